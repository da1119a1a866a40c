// Package claimbench holds the claim benchmark both drivers run on a store
// they filled themselves (store/sqlite, store/postgres): the same claims,
// timed the same way, so that their figures compare; and the claims and
// completions their benchmarks and plan tests drain a lane with.
package claimbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Claims times claims of 32 transactional rows on s, each taking new ones
// (their leases last the benchmark, so later claims see the rows in
// flight), after five claims that warm the store's connections and plans.
func Claims(b *testing.B, s store.Store) {
	for range 5 {
		Claim(b, s, 32)
	}
	b.ResetTimer()
	for range b.N {
		Claim(b, s, 32)
	}
}

// Claim claims limit transactional rows on s, leased for an hour, and
// fails tb unless it took that many.
func Claim(tb testing.TB, s store.Store, limit int) []store.Claimed {
	tb.Helper()
	rows, err := s.OutboxClaim(context.Background(), store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: limit, Lease: time.Hour})
	if err != nil || len(rows) != limit {
		tb.Fatalf("claim: %d rows (%v), want %d", len(rows), err, limit)
	}
	return rows
}

// Drain claims n transactional rows on s, limit at a time, and completes
// each DONE, as a drain's sends leave them.
func Drain(tb testing.TB, s store.Store, n, limit int) {
	tb.Helper()
	for range n / limit {
		Complete(tb, s, Claim(tb, s, limit))
	}
}

// Complete completes rows DONE, fenced, and fails tb if one was not.
// Each completion is a transaction of its own, as a send's is; they run
// from completers goroutines at once, as a lane's sends do, so that their
// commits share the log's flushes: one after another, the 20,000 of a
// plan test's drain took some 40 s of CI's time on PostgreSQL.
func Complete(tb testing.TB, s store.Store, rows []store.Claimed) {
	tb.Helper()
	const completers = 8
	errs := make([]error, completers)
	var wg sync.WaitGroup
	for w := range completers {
		wg.Go(func() {
			for i := w; i < len(rows) && errs[w] == nil; i += completers {
				ok, err := s.OutboxComplete(context.Background(), rows[i].Fence, heraldtype.OutboxDone, "")
				if err == nil && !ok {
					err = errors.New("its fence did not hold")
				}
				if err != nil {
					errs[w] = fmt.Errorf("complete %s: %w", rows[i].MessageID, err)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
}
