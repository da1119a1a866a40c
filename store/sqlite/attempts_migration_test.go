package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/heraldhq/herald/store/sqlite"
)

// TestMigration7KeepsTheEarliestRowPerAttempt: a file whose attempt log
// holds a second row for one attempt (a result written again after a lost
// answer, before migration 7) keeps the earliest, and a third cannot be
// added.
func TestMigration7KeepsTheEarliestRowPerAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before migration 7, with its duplicates.
	exec(t, path, `DROP INDEX delivery_attempts_message_attempt;
CREATE INDEX delivery_attempts_message ON delivery_attempts (message_id);
DELETE FROM schema_migrations WHERE version = 7;
INSERT INTO delivery_attempts (message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms) VALUES
    ('m1', 1, 'first', 1, 2, 'not_sent', 'HTTP_429', 1),
    ('m1', 1, 'again', 1, 2, 'not_sent', 'HTTP_429', 1),
    ('m1', 2, 'second', 3, 4, 'accepted', '', 1),
    ('m1', 2, 'again', 3, 4, 'accepted', '', 1),
    ('m2', 1, 'only', 1, 2, 'accepted', '', 1)`)
	if _, err := sqlite.Migrate(ctx, path); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, path, `SELECT count(*) FROM delivery_attempts`); n != 3 {
		t.Fatalf("%d attempt rows after migration 7, want 3", n)
	}
	if n := queryInt(t, path, `SELECT count(*) FROM delivery_attempts WHERE owner = 'again'`); n != 0 {
		t.Fatalf("migration 7 kept %d later duplicates, want the earliest of each", n)
	}
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO delivery_attempts (message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms)
VALUES ('m2', 1, 'again', 1, 2, 'accepted', '', 1)`); err == nil {
		t.Fatal("a second row for one attempt was accepted")
	}
}
