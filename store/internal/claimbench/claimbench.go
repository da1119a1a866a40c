// Package claimbench holds the claim benchmark both drivers run on a store
// they filled themselves (store/sqlite, store/postgres): the same claims,
// timed the same way, so that their figures compare.
package claimbench

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Claims times claims of 32 transactional rows on s, each taking new ones
// (their leases last the benchmark, so later claims see the rows in
// flight), after five claims that warm the store's connections and plans.
func Claims(b *testing.B, s store.Store) {
	ctx := context.Background()
	claim := func() {
		rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 32, Lease: time.Hour})
		if err != nil || len(rows) != 32 {
			b.Fatalf("claim: %d rows (%v), want 32", len(rows), err)
		}
	}
	for range 5 {
		claim()
	}
	b.ResetTimer()
	for range b.N {
		claim()
	}
}
