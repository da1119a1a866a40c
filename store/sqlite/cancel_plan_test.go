package sqlite

import (
	"strings"
	"testing"
)

// Every claim reads its notification's cancel mark (migration 33): from
// the index of the marked notifications, not the notification's row.
func TestTheClaimReadsTheCancelMarkFromItsIndex(t *testing.T) {
	t.Parallel()
	s := planStore(t,
		`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 2000)
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at, cancelled_at)
SELECT printf('ntf_%08d', i), 't', 'r', 'e' || i, 'k', 'transactional', '{}', 1000 * i, CASE WHEN i % 100 = 0 THEN 1000 * i END FROM g`,
	)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"claim":  {qDeliveryClaimInsert, []any{"ntf_00000001.webhook", "ntf_00000001", "t", "webhook", "p", "w", 1, 1, 1}},
		"marked": {qNotificationCancelled, []any{"ntf_00000001"}},
	} {
		text := queryPlan(t, s, q.sql, q.args...)
		if !strings.Contains(text, "USING INDEX notifications_cancelled (id=?)") || strings.Contains(text, "SCAN n") { // notifications, or the claim's n
			t.Errorf("%s does not read the mark from its index:\n%s", name, text)
		}
	}
}
