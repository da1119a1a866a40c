package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// undoMigration30 takes a schema back to before migrations 30 to 32
// (scopes, and the claim's index with them), and the ones after them.
const undoMigration30 = undoMigration33 + `
DROP INDEX outbox_fair;
CREATE INDEX outbox_fair ON outbox (lane, tenant, available_at, id) WHERE state = 'PENDING';
ALTER TABLE notifications DROP COLUMN scope;
ALTER TABLE outbox DROP COLUMN scope;
ALTER TABLE campaigns DROP COLUMN scope;
DELETE FROM schema_migrations WHERE version IN (30, 31, 32);`

// TestMigration30ScopesWhatWasThereNone: a schema from before scopes
// (migrations 30 to 32), with
// PENDING rows in it, migrates to rows of no scope, claimed as before,
// outbox_fair rebuilt with the scope; a row an older herald writes beside
// the migrated schema (it names no scope) gets none.
func TestMigration30ScopesWhatWasThereNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := schemaBefore(t, undoMigration30)
	testpg.Exec(t, url, oldPendingRow("n1", "now() - interval '1 minute'"))
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatalf("migrations 30 to 32: %v", err)
	}
	// The index by name in the schema alone: pg_indexes reads every
	// schema's, which parallel tests drop and rebuild meanwhile.
	if n := queryInt(t, url, `SELECT count(*) FROM pg_get_indexdef(to_regclass('outbox_fair')) d
WHERE d LIKE '%(lane, tenant, scope, available_at, id)%'`); n != 1 {
		t.Fatal("outbox_fair is not (lane, tenant, scope, available_at, id) after migrations 31 and 32")
	}
	testpg.Exec(t, url, oldPendingRow("n2", "now() - interval '1 minute'"))
	if n := queryInt(t, url, `SELECT count(*) FROM notifications n JOIN outbox o ON o.notification_id = n.id WHERE n.scope = '' AND o.scope = ''`); n != 2 {
		t.Fatalf("%d of 2 rows have no scope after migration 30", n)
	}
	s := setup(t, url, Options{MustExist: true})
	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim after migration 30: %d rows, %v; want both", len(rows), err)
	}
}
