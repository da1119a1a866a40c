package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store/storetest"
)

// qTextColumnsNotC counts the text columns of the schema's tables whose
// collation is not "C" (migration 26).
const qTextColumnsNotC = `SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
  AND c.relkind IN ('r', 'p') AND c.relname <> 'schema_migrations'
  AND a.attnum > 0 AND NOT a.attisdropped
  AND a.atttypid IN ('text'::regtype, 'text[]'::regtype)
  AND a.attcollation <> 'pg_catalog."C"'::regcollation`

// TestEveryTextColumnIsCollatedC: a table a later migration adds writes
// COLLATE "C" on its text columns, as migration 26 made every column
// before it.
func TestEveryTextColumnIsCollatedC(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	if _, err := Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, url, qTextColumnsNotC); n != 0 {
		t.Fatalf("%d text columns are not COLLATE \"C\"", n)
	}
}

// TestMigration26CollatesTextColumnsC: a schema from before migration 26,
// its text columns under the database's collation and rows in its tables,
// ends with every text column "C", its rows where they were (no table is
// rewritten; the indexes are rebuilt) and readable through the store.
func TestMigration26CollatesTextColumnsC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before migration 26: the migrations after it
	// undone, and it turned round, every "C" column to the database's
	// collation.
	testpg.Exec(t, url, undoMigration27)
	body, err := migrations.ReadFile("migrations/0026_c_collation.sql")
	if err != nil {
		t.Fatal(err)
	}
	back := strings.NewReplacer(`TYPE %s COLLATE "C"`, `TYPE %s COLLATE "default"`,
		`a.attcollation <> 'pg_catalog."C"'`, `a.attcollation = 'pg_catalog."C"'`).Replace(string(body))
	if back == string(body) {
		t.Fatal("migration 26 no longer reads as this test turns it round")
	}
	testpg.Exec(t, url, back+`
DELETE FROM schema_migrations WHERE version = 26;
`+storetest.RowsBeforeInboxAt("now()"))
	if n := queryInt(t, url, qTextColumnsNotC); n == 0 {
		t.Fatal("the schema before migration 26 has every text column \"C\" already")
	}
	const table = `SELECT relfilenode::int FROM pg_class WHERE oid = 'notifications'::regclass`
	const index = `SELECT relfilenode::int FROM pg_class WHERE oid = 'notifications_pkey'::regclass`
	tableBefore, indexBefore := queryInt(t, url, table), queryInt(t, url, index)
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, url, qTextColumnsNotC); n != 0 {
		t.Errorf("%d text columns are not COLLATE \"C\" after migration 26", n)
	}
	if got := queryInt(t, url, table); got != tableBefore {
		t.Errorf("notifications rewritten (relfilenode %d → %d)", tableBefore, got)
	}
	if got := queryInt(t, url, index); got == indexBefore {
		t.Error("notifications_pkey not rebuilt under the new collation")
	}
	s := setup(t, url, Options{MustExist: true})
	for _, id := range []string{"n1", "n2", "n3"} {
		if _, err := s.NotificationGet(ctx, "t1", id); err != nil {
			t.Errorf("NotificationGet(%s) after migration 26: %v", id, err)
		}
	}
}
