package sqlite

import (
	"github.com/heraldhq/herald/internal/testenv"
	"strings"
	"testing"
	"time"
)

// The fallback chain's statements search by key among 20,000 ended chains
// (push, then SMS; one in a thousand still waiting): the end of a send
// finds its row by message_id and its chain by outbox_notification (never
// by the partial index of WAITING rows, never a scan), and the watchdog's
// find searches outbox_waiting.
func TestFallbackStatementsSearchTheirKeys(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	s := planStore(t,
		`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 20000)
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT printf('ntf_%08d', i), 't', 'r', 'e' || i, 'k', 'transactional', '{}', 1000 * i FROM g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, fallback_step)
SELECT n.id, n.id || '.' || c.ch, 't', 'transactional', c.ch,
       CASE WHEN c.step = 1 THEN 'DONE' WHEN n.rowid % 1000 = 1 THEN 'WAITING' ELSE 'SKIPPED' END,
       n.created_at, n.created_at, n.created_at, c.step
FROM notifications n, (SELECT 'push' AS ch, 1 AS step UNION ALL SELECT 'sms', 2) c`,
	)
	cutoff, after := time.Hour.Milliseconds(), int64(-62135596800000)
	for name, q := range map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"SkipAfter": {qFallbackSkipAfter, []any{cutoff, "ntf_00000001.push", "PROVIDER_ACCEPTED"},
			[]string{"SEARCH outbox USING INDEX outbox_notification (notification_id=?)", "SEARCH outbox USING INDEX sqlite_autoindex_outbox_1 (message_id=?)"}},
		"Of": {qFallbackOf, []any{"ntf_00000001.push"},
			[]string{"SEARCH o USING INDEX sqlite_autoindex_outbox_1 (message_id=?)", "SEARCH s USING INDEX outbox_notification (notification_id=?)"}},
		"Fail": {qFallbackFail, []any{cutoff, "ntf_00000001", 1, "PERMANENT_FAILURE", 1},
			[]string{"SEARCH outbox USING INDEX outbox_notification (notification_id=?)"}},
		"Find": {qUnownedFindWaiting, []any{cutoff, after, "", 1000},
			[]string{"SEARCH outbox USING INDEX outbox_waiting ((available_at,message_id)>(?,?) AND available_at<?)", "SEARCH p USING INDEX outbox_notification (notification_id=?)"}},
	} {
		text := queryPlan(t, s, q.sql, q.args...)
		t.Logf("%s:\n%s", name, text)
		for _, w := range q.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: no %q in its plan:\n%s", name, w, text)
			}
		}
		if strings.Contains(text, "SCAN outbox") || strings.Contains(text, "SCAN deliveries") || (name != "Find" && strings.Contains(text, "outbox_waiting")) {
			t.Errorf("%s scans a table or walks the WAITING rows:\n%s", name, text)
		}
	}
}
