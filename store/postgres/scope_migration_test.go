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
// (scopes, and the claim's index with them).
const undoMigration30 = `DROP INDEX outbox_fair;
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
	url := testpg.Schema(t)
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	testpg.Exec(t, url, undoMigration30)
	oldRow := func(id string) string {
		return `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
VALUES ('` + id + `', 't1', 'r', 'e', 'k', 'transactional', '{}', now() - interval '1 minute');
INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
VALUES ('` + id + `', '` + id + `.webhook', 't1', 'transactional', 'webhook', 'PENDING', now() - interval '1 minute', now(), now());`
	}
	testpg.Exec(t, url, oldRow("n1"))
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatalf("migrations 30 to 32: %v", err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'outbox_fair'
  AND indexdef LIKE '%(lane, tenant, scope, available_at, id)%'`); n != 1 {
		t.Fatal("outbox_fair is not (lane, tenant, scope, available_at, id) after migrations 31 and 32")
	}
	testpg.Exec(t, url, oldRow("n2"))
	if n := queryInt(t, url, `SELECT count(*) FROM notifications n JOIN outbox o ON o.notification_id = n.id WHERE n.scope = '' AND o.scope = ''`); n != 2 {
		t.Fatalf("%d of 2 rows have no scope after migration 30", n)
	}
	s := setup(t, url, Options{MustExist: true})
	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim after migration 30: %d rows, %v; want both", len(rows), err)
	}
}
