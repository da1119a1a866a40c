package postgres

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/store"
)

// A receipt finds its message by its own key and the message's
// notification by id, never by walking the recipient's notifications,
// even on statistics taken when the recipient had only a few.
func TestReceiptsFindTheirNotificationByID(t *testing.T) {
	t.Parallel()
	_, conn := planConn(t,
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't', 'r', 'e' || g, 'k', 'transactional', '{}', now() FROM generate_series(1, 5) g`,
		`ANALYZE notifications`, // the recipient has five notifications
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'm' || g, 't', 'r', 'e' || g, 'k', 'transactional', '{}', now() FROM generate_series(1, 5000) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.push', 't', 'transactional', 'push', 'PENDING', now(), now(), now() FROM notifications`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT id || '.push', id, 't', 'push', 'PROVIDER_ACCEPTED', 1, now(), now() FROM notifications`,
	)
	for name, q := range map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"receipt": {qReceipt, []any{nil, "m7.push", "t", "r", store.ReasonReceipt, store.ReasonReceiptAfterUnknown},
			[]string{"deliveries_message_id", "notifications_pkey"}},
		"planned": {qReceiptPlanned, []any{store.ReceiptNotificationCandidates("m7.push"), "m7.push", "t", "r"},
			[]string{"outbox_pkey", "notifications_pkey"}},
	} {
		plans := bothPlans(t, conn, "plan_"+name, q.sql, q.args)
		for how, text := range plans {
			if strings.Contains(text, "notifications_tenant_recipient_created") || strings.Contains(text, "Seq Scan") {
				t.Errorf("%s (%s plan) walks the recipient's notifications or a table:\n%s", name, how, text)
			}
			for _, index := range q.want {
				if !strings.Contains(text, "Index Scan using "+index+" on ") && !strings.Contains(text, "Bitmap Index Scan on "+index+" ") {
					t.Errorf("%s (%s plan) does not use %s:\n%s", name, how, index, text)
				}
			}
		}
	}
}
