package postgres

import (
	"strings"
	"testing"
	"time"
)

// The parked list and the requeue walk deliveries_parked (0018) and stop at
// their limit, instead of scanning every delivery for state 'PARKED'
// (issue 13), for one tenant or all, bounded by ParkedBefore or not.
func TestParkedListAndRequeueWalkTheParkedIndex(t *testing.T) {
	t.Parallel()
	_, conn := planConn(t,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT 'm' || g || '.push', 'm' || g, 't' || (g % 7), 'push', 'PROVIDER_ACCEPTED', 1, now(), now() FROM generate_series(1, 20000) g`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, reason, attempts, created_at, updated_at)
SELECT 'p' || g || '.push', 'p' || g, 't1', 'push', 'PARKED', 'UNKNOWN_KIND', 1, now(), now() FROM generate_series(1, 5) g`,
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT notification_id, tenant, 'r', message_id, 'k', 'transactional', '{}', now() FROM deliveries`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT notification_id, message_id, tenant, 'transactional', 'push', 'DONE', now(), now(), now() FROM deliveries`,
		`ANALYZE deliveries`, `ANALYZE outbox`, `ANALYZE notifications`,
	)
	before := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"list_tenant":     {qParkedList, []any{"t1", 100}},
		"list_all":        {qParkedList, []any{"", 100}},
		"requeue_tenant":  {qParkedRequeue, []any{nil, "t1", "", 1000, true, nil}},
		"requeue_bounded": {qParkedRequeue, []any{nil, "t1", "", 1000, true, before}},
		"requeue_all":     {qParkedRequeue, []any{nil, "", "", 1000, false, nil}},
		"requeue_one":     {qParkedRequeue, []any{nil, "t1", "p1.push", 1000, true, nil}},
	} {
		for how, text := range bothPlans(t, conn, "plan_parked_"+name, q.sql, q.args) {
			if strings.Contains(text, "Seq Scan on deliveries") || strings.Contains(text, "Seq Scan on outbox") {
				t.Errorf("%s (%s plan) scans the deliveries or the outbox:\n%s", name, how, text)
			}
			if name != "requeue_one" && !strings.Contains(text, "deliveries_parked") {
				t.Errorf("%s (%s plan) does not walk deliveries_parked:\n%s", name, how, text)
			}
			t.Logf("%s (%s plan):\n%s", name, how, text)
		}
	}
}
