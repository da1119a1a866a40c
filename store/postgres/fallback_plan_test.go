package postgres

import (
	"strings"
	"testing"
	"time"
)

// The fallback chain's statements find their rows by key among 20,000
// ended sends and a few chains: the result write, the decision and the
// stale sweep move a chain on through the outbox's primary key (never the
// partial index of WAITING rows, never a scan), and the watchdog's find
// walks outbox_waiting, in both plans a pooled connection can run.
func TestFallbackStatementsUseTheirKeys(t *testing.T) {
	t.Parallel()
	_, conn := planConn(t,
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't', 'r', 'e' || g, 'k', 'transactional', '{}', now() - interval '1 day' + g * interval '1 s' FROM generate_series(1, 20000) g`,
		// Every notification is a chain push → sms; one in a thousand is
		// still waiting for its push.
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, fallback_step)
SELECT id, id || '.' || ch, 't', 'transactional', ch,
       CASE WHEN step = 1 AND substr(id, 2)::int % 1000 = 1 THEN 'CLAIMED' WHEN step = 1 THEN 'DONE'
            WHEN substr(id, 2)::int % 1000 = 1 THEN 'WAITING' ELSE 'SKIPPED' END,
       created_at, created_at, created_at, step
FROM notifications, (VALUES ('push', 1), ('sms', 2)) AS c (ch, step)`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, claimed_at, created_at, updated_at)
SELECT id || '.push', id, 't', 'push', CASE WHEN substr(id, 2)::int % 1000 = 1 THEN 'SENDING' ELSE 'PROVIDER_ACCEPTED' END, 1,
       created_at, created_at, created_at
FROM notifications`,
		`ANALYZE outbox; ANALYZE deliveries`,
	)
	now := time.Now()
	record := []any{nil, "PERMANENT_FAILURE", "X", nil, "n1.push", 1, "o", now, now, "permanent", 1, ""}
	for name, q := range map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"record":  {qDeliveryRecord, record, []string{"deliveries_message_id", "outbox_pkey"}},
		"settle":  {qDeliveryRecordSettle, append(record, "n1", "push", int64(1)), []string{"deliveries_message_id", "outbox_pkey"}},
		"decide":  {qDeliveryDecide, []any{nil, "n1.push", "n1", "t", "push", "SUPPRESSED", "CONSENT_DENIED"}, []string{"outbox_pkey"}},
		"stale":   {qDeliverySweepStale, []any{nil, 10 * time.Minute}, []string{"deliveries_sending", "outbox_pkey"}},
		"find":    {qUnownedFindWaiting, []any{nil, time.Minute, time.Time{}, "", 1000}, []string{"outbox_waiting", "outbox_pkey"}},
		"release": {qFallbackRelease, []any{nil, "n1", 2, "PERMANENT_FAILURE"}, []string{"outbox_pkey"}},
		// A lazy chain's statements (fallback.go).
		"lazy":        {qDeliveryRecordLazy, append(record, "n1", "push", int64(1)), []string{"deliveries_message_id", "outbox_pkey"}},
		"offchain":    {qDeliveryRecordOffChain, append(record, "n1", "push", int64(1)), []string{"deliveries_message_id", "outbox_pkey"}},
		"end":         {qFallbackEnd, []any{nil, "n1.push", "", "n1", "push", int64(1)}, []string{"deliveries_message_id", "outbox_pkey"}},
		"lock":        {qFallbackLockPlanned, []any{[]string{"n1"}}, []string{"outbox_pkey"}},
		"materialize": {qFallbackMaterialize, []any{nil, []string{"n1"}, "WAITING", nil}, []string{"outbox_pkey"}},
		"written":     {qFallbackWritten, []any{[]string{"n1"}}, []string{"outbox_pkey"}},
	} {
		plans := bothPlans(t, conn, "plan_fallback_"+name, q.sql, q.args)
		for _, how := range []string{"custom", "generic"} {
			text := plans[how]
			if strings.Contains(text, "Seq Scan on outbox") || strings.Contains(text, "Seq Scan on deliveries") {
				t.Errorf("%s (%s plan) scans a table:\n%s", name, how, text)
			}
			if name != "find" && strings.Contains(text, "outbox_waiting") {
				t.Errorf("%s (%s plan) walks the WAITING rows:\n%s", name, how, text)
			}
			for _, index := range q.want {
				if !strings.Contains(text, "using "+index+" on ") && !strings.Contains(text, "Bitmap Index Scan on "+index+" ") {
					t.Errorf("%s (%s plan) is not driven by %s:\n%s", name, how, index, text)
				}
			}
		}
	}
}
