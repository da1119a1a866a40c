package postgres

import (
	"strings"
	"testing"
	"time"
)

// Every event key statement finds its rows by an index, with statistics
// of a table of 20,000 keys: the key by its primary key, an owner's sends
// by the outbox's (notification_id, channel) key and the deliveries'
// message id, the purge by event_keys_lease, the takeover count by its
// partial index (the takeovers are few).
func TestEventKeyStatementsUseTheirIndexes(t *testing.T) {
	t.Parallel()
	_, conn := planConn(t,
		`INSERT INTO event_keys (tenant, recipient, event_id, kind, channel, owner, lease_until, taken_at, taken_from)
SELECT 't', 'r' || (g % 1000), 'e' || g, 'k', '', 'n' || g, now() + (g || ' seconds')::interval, now(),
    CASE WHEN g % 1000 = 0 THEN 'n0' END
FROM generate_series(1, 20000) g`,
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't', 'r' || (g % 1000), 'e' || g, 'k', 'transactional', '{}', now() FROM generate_series(1, 20000) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.' || ch, 't', 'transactional', ch, 'DONE', now(), now(), now() FROM notifications, unnest(ARRAY['push', 'sms']) ch`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT message_id, notification_id, 't', channel, 'PROVIDER_ACCEPTED', 1, now(), now() FROM outbox`,
		`ANALYZE event_keys`, `ANALYZE outbox`, `ANALYZE deliveries`,
	)
	key := []any{nil, "t", "r7", "e7", "k", "", "n8", time.Minute}
	for name, q := range map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"lock":      {qEventKeyLock, key[:6], []string{"event_keys_pkey"}},
		"sends":     {qEventKeyOwnerSends, []any{"n7"}, []string{"outbox_pkey", "deliveries_message_id"}},
		"takeover":  {qEventKeyTakeOver, append([]any{time.Now()}, key[1:]...), []string{"event_keys_pkey"}},
		"purge":     {qEventKeyPurge, []any{nil, 24 * time.Hour, 1000}, []string{"event_keys_lease"}},
		"takenover": {qEventKeysTakenOver, []any{time.Now().Add(-time.Hour)}, []string{"event_keys_taken_over"}},
	} {
		plans := bothPlans(t, conn, "event_key_"+name, q.sql, q.args)
		for how, text := range plans {
			if strings.Contains(text, "Seq Scan") {
				t.Errorf("%s (%s plan) scans a table:\n%s", name, how, text)
			}
			for _, index := range q.want {
				if !strings.Contains(text, "using "+index+" on ") && !strings.Contains(text, "Bitmap Index Scan on "+index+" ") &&
					!strings.Contains(text, "Index Only Scan using "+index+" on ") {
					t.Errorf("%s (%s plan) does not use %s:\n%s", name, how, index, text)
				}
			}
		}
	}
}
