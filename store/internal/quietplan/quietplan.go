// Package quietplan holds what both drivers' quiet-hours plan tests
// (store/sqlite, store/postgres: TestTheMarketingClaimSkipsTheDeferredBacklog)
// share: the size of the night's deferred backlog they fill.
package quietplan

import (
	"os"
	"strconv"
	"testing"
)

// DeferredRows is the night's backlog the quiet-hours plan tests defer:
// a hundred thousand marketing rows (ten thousand with -short), or
// HERALD_TEST_DEFERRED_ROWS.
func DeferredRows(t testing.TB) int {
	t.Helper()
	if v := os.Getenv("HERALD_TEST_DEFERRED_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("HERALD_TEST_DEFERRED_ROWS=%q is not a count", v)
		}
		return n
	}
	// A million rows take minutes to write under -race on two cores:
	// the test command checks the shape with 100,000 (10,000 with
	// -short), the README's figure is HERALD_TEST_DEFERRED_ROWS=1000000.
	if testing.Short() {
		return 10_000
	}
	return 100_000
}
