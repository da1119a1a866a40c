package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// RowsBeforeInboxAt is what a database from before migration 25 held for
// three notifications of tenant t1: n1 with a push to two devices, the
// inbox and an sms; n2 with the inbox alone; n3 with an sms alone. Each
// inbox send is an outbox row DONE(STORED) and a STORED delivery; now is
// the driver's SQL for the time. A driver's migration test writes it after
// taking its schema back to before migration 25, migrates, and calls
// CheckInboxAtMigrated.
func RowsBeforeInboxAt(now string) string {
	return strings.ReplaceAll(`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at) VALUES
    ('n1', 't1', 'r1', 'e1', 'k', 'transactional', '{}', NOW),
    ('n2', 't1', 'r1', 'e2', 'k', 'transactional', '{}', NOW),
    ('n3', 't1', 'r1', 'e3', 'k', 'transactional', '{}', NOW);
INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, created_at, updated_at) VALUES
    ('n1', 'n1.push.d1', 't1', 'transactional', 'push.d1', 'PENDING', '', NOW, NOW, NOW),
    ('n1', 'n1.push.d2', 't1', 'transactional', 'push.d2', 'PENDING', '', NOW, NOW, NOW),
    ('n1', 'n1.inbox', 't1', 'transactional', 'inbox', 'DONE', 'STORED', NOW, NOW, NOW),
    ('n1', 'n1.sms', 't1', 'transactional', 'sms', 'PENDING', '', NOW, NOW, NOW),
    ('n2', 'n2.inbox', 't1', 'transactional', 'inbox', 'DONE', 'STORED', NOW, NOW, NOW),
    ('n3', 'n3.sms', 't1', 'transactional', 'sms', 'PENDING', '', NOW, NOW, NOW);
INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at) VALUES
    ('n1.inbox', 'n1', 't1', 'inbox', 'STORED', 'STORED', NOW, NOW),
    ('n2.inbox', 'n2', 't1', 'inbox', 'STORED', 'STORED', NOW, NOW)`, "NOW", now)
}

// InboxAtAfterMigration is each notification of RowsBeforeInboxAt's
// inbox_at once migrated, and the query that counts the inbox rows left
// (none).
var (
	InboxAtAfterMigration = map[string]int{"n1": 2, "n2": 1, "n3": 0}
	InboxRowsLeft         = `SELECT (SELECT count(*) FROM outbox WHERE channel = 'inbox') + (SELECT count(*) FROM deliveries WHERE channel = 'inbox')`
)

// CheckInboxAtMigrated checks that s shows RowsBeforeInboxAt's inbox sends
// as the rows did: STORED, each where its row was among the planned sends.
func CheckInboxAtMigrated(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	v, err := s.NotificationGet(ctx, "t1", "n1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, dv := range v.Deliveries {
		state, _, _ := v.EntryState(dv)
		got = append(got, string(dv.Channel)+"="+state)
	}
	if want := "[push.d1=PENDING push.d2=PENDING inbox=STORED sms=PENDING]"; fmt.Sprint(got) != want {
		t.Errorf("n1's sends %v, want %s", got, want)
	}
	if d, err := s.DeliveryGet(ctx, "n2.inbox"); err != nil || d.State != heraldtype.DeliveryStored || d.Tenant != "t1" {
		t.Errorf("n2's inbox send %+v (%v), want STORED", d, err)
	}
}
