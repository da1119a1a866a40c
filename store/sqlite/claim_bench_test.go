package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/store/internal/claimbench"
)

// BenchmarkClaimManyDueScopes is PostgreSQL's benchmark of that name on
// SQLite: one op is a claim of 32 in a lane where one tenant's 20,000 due
// rows are spread over 1, 100 or 1,000 scopes (its claims' rows stay in
// flight). Measured on the 2-core development machine, 20 claims each:
// 2.0, 25 and 131 ms a claim when each scope's walk read up to 32 rows;
// 1.8, 11-13 and 57-60 ms with the caps (qOutboxClaim).
//
//	go test ./store/sqlite -run '^$' -bench ClaimManyDueScopes -benchtime 20x
func BenchmarkClaimManyDueScopes(b *testing.B) {
	for _, c := range []struct{ scopes, each int }{{1, 20000}, {100, 200}, {1000, 20}} {
		b.Run(fmt.Sprintf("scopes=%d", c.scopes), func(b *testing.B) {
			s, _ := spreadLane(b, c.scopes*c.each, c.scopes)
			claimbench.Claims(b, s)
		})
	}
}

// spreadLane opens a store on a fake clock whose transactional lane holds
// tenant "clinics"'s n rows, due an hour ago, spread over scopes scopes
// (c0, c1, …), written set-based, then ANALYZE; it returns the store,
// closed when tb ends, and the clock's time.
func spreadLane(tb testing.TB, n, scopes int) (*Store, time.Time) {
	tb.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 6, 11, 3, 0, 0, 0, time.UTC)
	s, err := Open(ctx, filepath.Join(tb.TempDir(), "herald.db"), Options{Clock: clock.NewFake(t0)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	for _, q := range []string{
		fmt.Sprintf(`WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM g WHERE x < %d)
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || x, 'clinics', 'r', 'e' || x, 'k', 'transactional', '{}', %d FROM g`, n, t0.Add(-time.Hour).UnixMilli()),
		fmt.Sprintf(`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, scope)
SELECT id, id || '.webhook', tenant, 'transactional', 'webhook', 'PENDING', created_at, created_at, created_at,
       'c' || (CAST(substr(id, 2) AS INTEGER) %% %d)
FROM notifications`, scopes),
		`ANALYZE`,
	} {
		if _, err := s.wdb.ExecContext(ctx, q); err != nil {
			tb.Fatal(err)
		}
	}
	return s, t0
}
