package sqlite

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/store/internal/quietplan"
)

// A night's backlog of deferred marketing does not occupy the marketing
// claim: its plan searches outbox_fair for each tenant's rows up to now
// (available_at<?), so the b-tree search stops at the first row not yet
// due and rows deferred to the next opening are never read. SQLite keeps
// no page counts, so the claim is timed too, for real in a transaction
// rolled back after: the best of 20 runs with a hundred times the backlog
// stays within a small factor, where a walk of the backlog would cost it
// a hundred times more.
//
// The backlog is written here by hand in outbox_fair (deferred = 0), as
// rows written before migration 30 are: intake and the deferral write rows
// due beyond store.DeferHorizon out of it altogether
// (deferred_plan_test.go).
func TestTheMarketingClaimSkipsTheDeferredBacklog(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	n := quietplan.DeferredRows(t)
	now := time.Date(2026, 6, 11, 12, 0, 0, 0, time.UTC).UnixMilli() // 21:00 in Seoul
	opening := now + (11 * time.Hour).Milliseconds()                 // 08:00 in Seoul
	fill := func(rows int) []string {
		return []string{
			// 100 marketing rows due now, then the backlog deferred to the
			// opening, each with its notification.
			`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 100 + ` + strconv.Itoa(rows) + `)
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT printf('ntf_%08d', i), 't', 'r' || i, 'e' || i, 'promo', 'marketing', '{}', ` + strconv.FormatInt(now-3600_000, 10) + ` FROM g`,
			`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, created_at, updated_at)
SELECT id, id || '.sms', 't', 'marketing', 'sms', 'PENDING',
       CASE WHEN rowid <= 100 THEN '' ELSE 'QUIET_HOURS' END,
       CASE WHEN rowid <= 100 THEN created_at + 1000 * rowid ELSE ` + strconv.FormatInt(opening, 10) + ` END,
       created_at, created_at FROM notifications`,
		}
	}
	small := max(n/100, 1)
	started := time.Now()
	few, night := planStore(t, fill(small)...), planStore(t, fill(n)...)
	t.Logf("filled %d and %d deferred rows in %s", small, n, time.Since(started).Round(time.Millisecond))

	args := []any{"CLAIMED", "w", now + time.Minute.Milliseconds(), now, "marketing", now, now, 16}
	plan := queryPlan(t, night, qOutboxClaim, append(args, nil, "", "{}", nil, nil)...)
	if !strings.Contains(plan, "USING INDEX outbox_fair (lane=? AND tenant=? AND scope=? AND available_at<?)") {
		t.Errorf("the claim does not search outbox_fair up to now:\n%s", plan)
	}
	// The one scan allowed is of the rows in flight (busy), on
	// outbox_leased: at most every claimer's concurrency.
	if strings.Contains(strings.ReplaceAll(plan, "SCAN outbox USING INDEX outbox_leased", ""), "SCAN outbox") {
		t.Errorf("the claim scans the outbox:\n%s", plan)
	}
	// The lane's one tenant (t) is claimed by qOutboxClaimOneTenant, after
	// qOutboxLaneTenants' two probes: both search outbox_fair, neither scans.
	one := queryPlan(t, night, qOutboxClaimOneTenant, append(args, "t", "")...)
	if !strings.Contains(one, "USING INDEX outbox_fair (lane=? AND tenant=? AND scope=? AND available_at<?)") || strings.Contains(one, "SCAN outbox") {
		t.Errorf("the one-tenant claim does not search outbox_fair up to now:\n%s", one)
	}
	if lt := queryPlan(t, night, qOutboxLaneTenants, "marketing"); strings.Contains(lt, "SCAN outbox") {
		t.Errorf("the lane's tenants are found by a scan:\n%s", lt)
	}

	claim := func(s *Store) time.Duration {
		ctx := context.Background()
		best := time.Hour
		for range 20 {
			tx, err := s.wdb.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			rows, err := tx.QueryContext(ctx, qOutboxClaim, append(args, nil, "", "{}", nil, nil)...)
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for rows.Next() {
				got++
			}
			err = rows.Close()
			took := time.Since(start)
			if rerr := tx.Rollback(); err == nil {
				err = rerr
			}
			if err != nil || got != 16 {
				t.Fatalf("the claim took %d rows (%v), want 16", got, err)
			}
			best = min(best, took)
		}
		return best
	}
	a, b := claim(few), claim(night)
	t.Logf("marketing claim of 16 rows: %s with %d deferred rows, %s with %d", a, small, b, n)
	if b > 5*a+5*time.Millisecond {
		t.Errorf("the claim took %s with %d deferred rows, %s with %d", b, n, a, small)
	}
}
