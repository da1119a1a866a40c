package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store/internal/claimbench"
)

// BenchmarkClaimManyDueScopes: one op is a claim of 32 in a lane where one
// tenant's 20,000 due rows are spread over 1, 100, 1,000 or 5,000 scopes
// (its claims' rows stay in flight, so later claims see busy scopes).
// Measured on the 2-core development machine, 20 claims each: 1.8, 28.6,
// 116 and 182 ms a claim when each scope's walk read up to 32 rows;
// 1.9-2.7, 2.9-4.3, 11-19 and 51-84 ms with the caps (qOutboxClaim). The
// rest is the loose scan's probe of each scope and the sort of their rows.
//
//	go test ./store/postgres -run '^$' -bench ClaimManyDueScopes -benchtime 20x
func BenchmarkClaimManyDueScopes(b *testing.B) {
	for _, c := range []struct{ scopes, each int }{{1, 20000}, {100, 200}, {1000, 20}, {5000, 4}} {
		b.Run(fmt.Sprintf("scopes=%d", c.scopes), func(b *testing.B) {
			ctx := context.Background()
			now := time.Date(2026, 6, 11, 3, 0, 0, 0, time.UTC)
			s, err := Open(ctx, testpg.Schema(b), Options{Clock: clock.NewFake(now), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			n := c.scopes * c.each
			for _, q := range []string{
				fmt.Sprintf(`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 'clinics', 'r', 'e' || g, 'k', 'transactional', '{}', '2026-06-11 01:00:00+00' FROM generate_series(1, %d) g`, n),
				fmt.Sprintf(`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, scope)
SELECT id, id || '.webhook', tenant, 'transactional', 'webhook', 'PENDING', created_at, created_at, created_at, 'c' || (substr(id, 2)::int %% %d)
FROM notifications`, c.scopes),
				`ANALYZE outbox`, `ANALYZE notifications`,
			} {
				if _, err := s.pool.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			claimbench.Claims(b, s)
		})
	}
}
