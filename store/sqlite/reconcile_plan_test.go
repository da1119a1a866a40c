package sqlite

import (
	"github.com/heraldhq/herald/internal/testenv"
	"strings"
	"testing"
)

// A reconciliation page searches its notifications by their key, their
// outbox rows by notification and their deliveries by message id: no
// statement of a page scans a table.
func TestReconcilePagesSearchOnlyThePage(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	s := planStore(t,
		`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 20000)
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT printf('ntf_%08d', i), 't', 'r' || (i % 400), 'e' || i, 'k', 'transactional', '{}', 1000 * i FROM g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.webhook', tenant, lane, 'webhook', 'DONE', created_at, created_at, created_at FROM notifications`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT message_id, notification_id, tenant, channel, 'PROVIDER_ACCEPTED', 1, created_at, created_at FROM outbox`,
	)
	after, last := "ntf_00005000", "ntf_00006000"
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"Bound":         {qReconcileBound, []any{after, 1000}},
		"Groups":        {qReconcileGroups, []any{0, after, last, 0}},
		"MissingOutbox": {qReconcileMissingOutbox, []any{after, last, 100}},
		"NoDelivery":    {qReconcileNoDelivery, []any{after, last, 100, 0}},
		"Unknown":       {qReconcileUnknown, []any{after, last, 100}},
	} {
		text := queryPlan(t, s, q.sql, q.args...)
		plan := strings.Split(text, "\n")
		for _, line := range plan {
			if strings.HasPrefix(line, "SCAN ") && !strings.HasPrefix(line, "SCAN (subquery") {
				t.Errorf("%s scans a table (%s):\n%s", name, line, text)
			}
		}
	}
}
