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
			claimbench.Claims(b, clinicsStore(b, clinicsSpread(c.scopes*c.each, c.scopes)))
		})
	}
}

// The clinics fixtures: tenant "clinics" of the transactional lane, its
// notifications n1, n2, … created at 01:00 on clinicsDay, one webhook row
// each, written set-based, then ANALYZE.
var clinicsDay = time.Date(2026, 6, 11, 3, 0, 0, 0, time.UTC)

// clinicsNotifications writes n notifications.
func clinicsNotifications(n int) string {
	return fmt.Sprintf(`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 'clinics', 'r', 'e' || g, 'k', 'transactional', '{}', '2026-06-11 01:00:00+00' FROM generate_series(1, %d) g`, n)
}

// clinicsSpread is n rows due now spread over scopes scopes (c0, c1, …).
func clinicsSpread(n, scopes int) []string {
	return []string{clinicsNotifications(n),
		fmt.Sprintf(`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, scope)
SELECT id, id || '.webhook', tenant, 'transactional', 'webhook', 'PENDING', created_at, created_at, created_at, 'c' || (substr(id, 2)::int %% %d)
FROM notifications`, scopes),
		`ANALYZE outbox`, `ANALYZE notifications`}
}

// clinicsBesideTomorrow is due rows due now in scope "due" and a row due
// tomorrow in each of scopes other scopes, written as herald writes such
// a row (deferred).
func clinicsBesideTomorrow(due, scopes int) []string {
	return []string{clinicsNotifications(due + scopes),
		fmt.Sprintf(`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, scope, deferred)
SELECT id, id || '.webhook', tenant, 'transactional', 'webhook', 'PENDING', v.at, created_at, created_at, v.scope, v.at > created_at + %s
FROM notifications, LATERAL (SELECT CASE WHEN substr(id, 2)::int <= %d THEN created_at ELSE created_at + interval '1 day' END AS at,
                                    CASE WHEN substr(id, 2)::int <= %d THEN 'due' ELSE 'c' || substr(id, 2) END AS scope) v`, qDeferHorizon, due, due),
		`ANALYZE outbox`, `ANALYZE notifications`}
}

// clinicsStore opens a store on a fresh schema, its clock at clinicsDay,
// and fills it.
func clinicsStore(b *testing.B, fill []string) *Store {
	ctx := context.Background()
	s, err := Open(ctx, testpg.Schema(b), Options{Clock: clock.NewFake(clinicsDay), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	for _, q := range fill {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkClaimThroughADrain: one op is a claim of 32 in a lane where one
// tenant's 200,000 due rows are spread over 1 or 2 scopes, after settled
// rows were claimed and completed DONE before the timer started (as a
// campaign's drain has done by then), with no vacuum in between: each
// claimed row leaves a dead entry at the front of its scope's range of
// outbox_fair and each settled one a dead entry in outbox_leased. Each
// op's rows are completed too, outside the timer.
//
//	go test ./store/postgres -run '^$' -bench ClaimThroughADrain -benchtime 200x
func BenchmarkClaimThroughADrain(b *testing.B) {
	for _, scopes := range []int{1, 2} {
		for _, settled := range []int{0, 50_000, 150_000} {
			b.Run(fmt.Sprintf("scopes=%d/settled=%d", scopes, settled), func(b *testing.B) {
				s := clinicsStore(b, clinicsSpread(200_000, scopes))
				claimbench.Drain(b, s, settled, 32)
				b.ResetTimer()
				for range b.N {
					rows := claimbench.Claim(b, s, 32)
					b.StopTimer()
					claimbench.Complete(b, s, rows)
					b.StartTimer()
				}
			})
		}
	}
}
