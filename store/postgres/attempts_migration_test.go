package postgres

import (
	"context"
	"testing"

	"github.com/heraldhq/herald/internal/testpg"
)

// TestMigration7KeepsTheEarliestRowPerAttempt: a schema whose attempt log
// holds a second row for one attempt (a result written again after a lost
// answer, before migration 7) keeps the earliest, and a third cannot be
// added.
func TestMigration7KeepsTheEarliestRowPerAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before migration 7, with its duplicates.
	testpg.Exec(t, url, `DROP INDEX delivery_attempts_message_attempt;
CREATE INDEX delivery_attempts_message ON delivery_attempts (message_id);
DELETE FROM schema_migrations WHERE version = 7;
INSERT INTO delivery_attempts (message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms) VALUES
    ('m1', 1, 'first', now(), now(), 'not_sent', 'HTTP_429', 1),
    ('m1', 1, 'again', now(), now(), 'not_sent', 'HTTP_429', 1),
    ('m1', 2, 'second', now(), now(), 'accepted', '', 1),
    ('m1', 2, 'again', now(), now(), 'accepted', '', 1),
    ('m2', 1, 'only', now(), now(), 'accepted', '', 1)`)
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM delivery_attempts`); n != 3 {
		t.Fatalf("%d attempt rows after migration 7, want 3", n)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM delivery_attempts WHERE owner = 'again'`); n != 0 {
		t.Fatalf("migration 7 kept %d later duplicates, want the earliest of each", n)
	}
	s := setup(t, url, Options{MustExist: true})
	if _, err := s.pool.Exec(ctx, `INSERT INTO delivery_attempts (message_id, attempt, owner, started_at, finished_at, class, reason, duration_ms)
VALUES ('m2', 1, 'again', now(), now(), 'accepted', '', 1)`); err == nil {
		t.Fatal("a second row for one attempt was accepted")
	}
}
