package sqlite

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
)

// The parked list and the requeue's selection walk deliveries_parked (0018)
// instead of scanning every delivery: on SQLite the requeue's selection
// runs inside the single writer's transaction, so a scan there held up
// every write (issue 13).
func TestParkedListAndRequeueWalkTheParkedIndex(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	s := planStore(t,
		`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000)
INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT 'm' || n || '.push', 'm' || n, 't' || (n % 7), 'push', 'PROVIDER_ACCEPTED', 1, 0, 0 FROM g`,
		`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 5)
INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, reason, attempts, created_at, updated_at)
SELECT 'p' || n || '.push', 'p' || n, 't1', 'push', 'PARKED', 'UNKNOWN_KIND', 1, 0, 0 FROM g`,
	)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"list":           {qParkedList, []any{"t1", 100}},
		"select":         {qParkedSelect, []any{"t1", "", 1, 1000, 0}},
		"select_bounded": {qParkedSelect, []any{"", "", 0, 1000, 1}},
	} {
		plan := queryPlan(t, s, q.sql, q.args...)
		if !strings.Contains(plan, "deliveries_parked") || strings.Contains(plan, "SCAN d\n") || strings.HasSuffix(plan, "SCAN d") {
			t.Errorf("%s does not walk deliveries_parked:\n%s", name, plan)
		}
		t.Logf("%s:\n%s", name, plan)
	}
}
