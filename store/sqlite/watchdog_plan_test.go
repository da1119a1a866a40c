package sqlite

import (
	"github.com/heraldhq/herald/internal/testenv"
	"strings"
	"testing"
	"time"
)

// The watchdog's finds (migration 8) each search the partial index of what
// their kind looks for, from the page's position up to the cutoff: no scan
// of the outbox or the deliveries, whose ended rows a table of a million
// deliveries is made of. The re-drive finds each row by its key.
func TestWatchdogFindsSearchTheirIndexes(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	// 20,000 ended sends (half of them published by the relay), and a few
	// rows of each kind the watchdog looks for.
	s := planStore(t,
		`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 20000)
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT printf('ntf_%08d', i), 't', 'r', 'e' || i, 'k', 'transactional', '{}', 1000 * i FROM g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, claimed_until)
SELECT id, id || '.webhook', 't', 'transactional', 'webhook',
       CASE WHEN rowid % 1000 = 1 THEN 'CLAIMED' WHEN rowid % 2 = 0 THEN 'PUBLISHED' ELSE 'DONE' END,
       created_at, created_at, created_at, CASE WHEN rowid % 1000 = 1 THEN created_at END
FROM notifications`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, claimed_at, next_attempt_at, created_at, updated_at)
SELECT id || '.webhook', id, 't', 'webhook',
       CASE WHEN rowid % 1000 = 3 THEN 'RETRY_WAIT' WHEN rowid % 1000 = 5 THEN 'SENDING' ELSE 'PROVIDER_ACCEPTED' END, 1,
       created_at, CASE WHEN rowid % 1000 = 3 THEN created_at END, created_at, created_at
FROM notifications`,
	)
	cutoff, after := time.Hour.Milliseconds(), int64(-62135596800000) // the zero position
	for name, q := range map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"RetryWait": {qUnownedFindRetryWait, []any{cutoff, after, "", 1000},
			[]string{"SEARCH deliveries USING INDEX deliveries_retry_wait ((next_attempt_at,message_id)>(?,?) AND next_attempt_at<?)", "SEARCH o USING INDEX sqlite_autoindex_outbox_1 (message_id=?)"}},
		"Published": {qUnownedFindPublished, []any{cutoff, after, "", 1000},
			[]string{"SEARCH outbox USING INDEX outbox_published (updated_at>? AND updated_at<?)", "SEARCH d USING PRIMARY KEY (message_id=?)"}},
		"Sending": {qUnownedFindSending, []any{cutoff, after, "", 1000},
			[]string{"SEARCH deliveries USING INDEX deliveries_sending ((claimed_at,message_id)>(?,?) AND claimed_at<?)", "SEARCH o USING INDEX sqlite_autoindex_outbox_1 (message_id=?)"}},
		"Lease": {qUnownedFindLease, []any{cutoff, after, "", 1000},
			[]string{"SEARCH outbox USING INDEX outbox_leased (claimed_until>? AND claimed_until<?)"}},
		"RedriveOutbox": {qUnownedRedriveOutbox, []any{cutoff, "m", 1, "DONE", "retry_wait", cutoff},
			[]string{"SEARCH outbox USING INDEX sqlite_autoindex_outbox_1 (message_id=?)", "SEARCH d USING PRIMARY KEY (message_id=?)"}},
		"RedriveSending": {qUnownedRedriveSending, []any{cutoff, "m", cutoff},
			[]string{"SEARCH deliveries USING PRIMARY KEY (message_id=?)"}},
	} {
		text := queryPlan(t, s, q.sql, q.args...)
		t.Logf("%s:\n%s", name, text)
		for _, w := range q.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: no %q in its plan:\n%s", name, w, text)
			}
		}
		if strings.Contains(text, "SCAN outbox") || strings.Contains(text, "SCAN deliveries") {
			t.Errorf("%s scans a table:\n%s", name, text)
		}
	}
}
