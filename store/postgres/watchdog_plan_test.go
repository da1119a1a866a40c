package postgres

import (
	"strings"
	"testing"
	"time"
)

// The watchdog's finds (migration 8) each walk the partial index of what
// their kind looks for, from the page's position up to the cutoff, in both
// plans a pooled connection can run (custom and generic): no sequential
// scan of the outbox or the deliveries, whose ended rows a table of a
// million deliveries is made of. The re-drives find each row by its key.
func TestWatchdogFindsWalkTheirIndexes(t *testing.T) {
	t.Parallel()
	// 20,000 ended sends (half of them published by the relay), and a few
	// rows of each kind the watchdog looks for.
	_, conn := planConn(t,
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't', 'r', 'e' || g, 'k', 'transactional', '{}', now() - interval '1 day' + g * interval '1 s' FROM generate_series(1, 20000) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, claimed_until)
SELECT id, id || '.webhook', 't', 'transactional', 'webhook',
       CASE WHEN substr(id, 2)::int % 1000 = 1 THEN 'CLAIMED' WHEN substr(id, 2)::int % 2 = 0 THEN 'PUBLISHED' ELSE 'DONE' END,
       created_at, created_at, created_at, CASE WHEN substr(id, 2)::int % 1000 = 1 THEN created_at END
FROM notifications`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, claimed_at, next_attempt_at, created_at, updated_at)
SELECT id || '.webhook', id, 't', 'webhook',
       CASE WHEN substr(id, 2)::int % 1000 = 3 THEN 'RETRY_WAIT' WHEN substr(id, 2)::int % 1000 = 5 THEN 'SENDING' ELSE 'PROVIDER_ACCEPTED' END, 1,
       created_at, CASE WHEN substr(id, 2)::int % 1000 = 3 THEN created_at END, created_at, created_at
FROM notifications`,
		`ANALYZE outbox; ANALYZE deliveries`,
	)
	zero, now := time.Time{}, time.Now()
	find := []any{nil, time.Hour, zero, "", 1000}
	for name, q := range map[string]struct {
		sql  string
		args []any
		// want are the indexes that must drive the statement.
		want []string
		// bound: the generic plan shows a parameter in an index condition
		// (the cutoff), proving it generic.
		bound bool
	}{
		"retry_wait":      {qUnownedFindRetryWait, find, []string{"deliveries_retry_wait", "outbox_pkey"}, true},
		"published":       {qUnownedFindPublished, find, []string{"outbox_published", "deliveries_message_id"}, true},
		"sending":         {qUnownedFindSending, find, []string{"deliveries_sending", "outbox_pkey"}, true},
		"lease":           {qUnownedFindLease, find, []string{"outbox_leased"}, true},
		"redrive_outbox":  {qUnownedRedriveOutbox, []any{nil, []string{"n3"}, []string{"webhook"}, []int64{0}, []string{"DONE"}, []string{"retry_wait"}, []time.Time{now}}, []string{"outbox_pkey", "deliveries_message_id"}, false},
		"redrive_sending": {qUnownedRedriveSending, []any{nil, []string{"n5.webhook"}, []time.Time{now}}, []string{"deliveries_message_id"}, false},
	} {
		plans := bothPlans(t, conn, "plan_watchdog_"+name, q.sql, q.args)
		for _, how := range []string{"custom", "generic"} {
			text := plans[how]
			t.Logf("%s (%s plan):\n%s", name, how, text)
			if how == "generic" && q.bound && !strings.Contains(text, "$") {
				t.Errorf("%s: the generic plan shows no parameter, so it is not generic:\n%s", name, text)
			}
			if strings.Contains(text, "Seq Scan on outbox") || strings.Contains(text, "Seq Scan on deliveries") {
				t.Errorf("%s (%s plan) scans a table:\n%s", name, how, text)
			}
			for _, index := range q.want {
				if !strings.Contains(text, "using "+index+" on ") {
					t.Errorf("%s (%s plan) is not driven by %s:\n%s", name, how, index, text)
				}
			}
		}
	}
}
