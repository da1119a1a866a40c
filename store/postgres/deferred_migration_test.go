package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// undoMigration33 takes a schema back to before migrations 33 to 35
// (deferred outbox rows, out of the claim's index).
const undoMigration33 = `DROP INDEX outbox_fair;
DROP INDEX outbox_deferred;
CREATE INDEX outbox_fair ON outbox (lane, tenant, scope, available_at, id) WHERE state = 'PENDING';
ALTER TABLE outbox DROP COLUMN deferred;
DELETE FROM schema_migrations WHERE version IN (33, 34, 35);`

// TestMigration33DefersNothingWrittenBefore: a schema from before deferred
// rows (migrations 33 to 35), with a row due now and one due tomorrow,
// migrates to rows not deferred, both in the claim's new index, claimed
// when due; a row an older herald writes beside the migrated schema (it
// names no flag) is not deferred either.
func TestMigration33DefersNothingWrittenBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := schemaBefore(t, undoMigration33)
	testpg.Exec(t, url, oldPendingRow("n1", "now() - interval '1 minute'"))
	testpg.Exec(t, url, oldPendingRow("n2", "now() + interval '1 day'"))
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatalf("migrations 33 to 35: %v", err)
	}
	for index, def := range map[string]string{
		"outbox_fair":     `%(lane, tenant, scope, available_at, id) WHERE %PENDING% AND (NOT deferred))`,
		"outbox_deferred": `%(lane, available_at) WHERE %PENDING% AND deferred)`,
	} {
		if n := queryInt(t, url, `SELECT count(*) FROM pg_get_indexdef(to_regclass('`+index+`')) d WHERE d LIKE '`+def+`'`); n != 1 {
			t.Fatalf("%s is not %s after migrations 34 and 35", index, def)
		}
	}
	testpg.Exec(t, url, oldPendingRow("n3", "now() - interval '1 minute'"))
	if n := queryInt(t, url, `SELECT count(*) FROM outbox WHERE NOT deferred`); n != 3 {
		t.Fatalf("%d of 3 rows are not deferred after migration 33", n)
	}
	s := setup(t, url, Options{MustExist: true})
	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(rows) != 2 || rows[0].NotificationID != "n1" || rows[1].NotificationID != "n3" {
		t.Fatalf("claim after migration 33: %d rows, %v; want n1 and n3, the due ones", len(rows), err)
	}
}

// schemaBefore migrates a fresh schema and takes it back with undo, as
// it was before the migrations undo names; it returns the schema's URL.
func schemaBefore(t *testing.T, undo string) string {
	t.Helper()
	url := testpg.Schema(t)
	if _, err := Migrate(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	testpg.Exec(t, url, undo)
	return url
}

// oldPendingRow is what an older herald writes for a notification id of
// tenant t1 with one PENDING webhook row due at due (SQL): it names none
// of the later columns.
func oldPendingRow(id, due string) string {
	return `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
VALUES ('` + id + `', 't1', 'r', 'e', 'k', 'transactional', '{}', now() - interval '1 minute');
INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
VALUES ('` + id + `', '` + id + `.webhook', 't1', 'transactional', 'webhook', 'PENDING', ` + due + `, now(), now());`
}
