package postgres

import (
	"fmt"
	"strings"
	"testing"
)

// InboxHeads probes both primary keys once per key, in the custom plan and
// the generic one, for a full batch of keys among 10,000 inboxes: no scan
// of either table, no hash join over the counters (which the planner chose
// for a plain join on the counters, whole table read for 500 keys).
func TestInboxHeadsProbesThePrimaryKeys(t *testing.T) {
	t.Parallel()
	_, conn := planConn(t,
		`INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at)
SELECT 't1', 'r' || (g / 2), g % 2 + 1, 'ntf_' || g || '.inbox', 'ntf_' || g, 'k', 'Paid', 'Paid', '', timestamptz '2030-01-01' + g * interval '1 s'
FROM generate_series(0, 19999) g`,
		`INSERT INTO inbox_counters (tenant, recipient, seq, unread)
SELECT tenant, recipient, max(seq), count(*) FROM inbox_items GROUP BY tenant, recipient`,
		`ANALYZE inbox_items; ANALYZE inbox_counters`,
	)
	tenants, recipients := make([]string, 500), make([]string, 500)
	for i := range tenants {
		tenants[i], recipients[i] = "t1", fmt.Sprintf("r%d", i*20)
	}
	plans := bothPlans(t, conn, "inbox_heads", qInboxHeads, []any{tenants, recipients})
	for how, text := range plans {
		for _, bad := range []string{"Seq Scan", "Hash"} {
			if strings.Contains(text, bad) {
				t.Errorf("heads (%s plan): %s:\n%s", how, bad, text)
			}
		}
		for _, want := range []string{"Index Scan using inbox_counters_pkey on inbox_counters", "Index Scan Backward using inbox_items_pkey on inbox_items"} {
			if !strings.Contains(text, want) {
				t.Errorf("heads (%s plan): no %s:\n%s", how, want, text)
			}
		}
	}
}
