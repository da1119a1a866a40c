package dispatch

import (
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// lastServed names the tenant the claim's round of ties ended on: of the
// tenants that got the most rows, the last counted from after, wrapping
// round past the last tenant in byte order.
func TestLastServedIsWhereTheRoundOfTiesEnded(t *testing.T) {
	t.Parallel()
	rows := func(tenants ...string) []store.Claimed {
		out := make([]store.Claimed, len(tenants))
		for i, tn := range tenants {
			out[i].Job = heraldtype.Job{Tenant: tn}
		}
		return out
	}
	for _, c := range []struct {
		name  string
		rows  []store.Claimed
		after string
		want  string
	}{
		{"NoRowsKeepsAfter", nil, "b", "b"},
		{"OneRowIsItsTenant", rows("a"), "b", "a"},
		{"FromNobodyTheLastInByteOrder", rows("c", "a", "b"), "", "c"},
		{"TheRoundWrapsPastTheLastTenant", rows("c", "a"), "b", "a"},
		{"AfterNeedNotHaveRows", rows("a", "c"), "bb", "a"},
		{"TheTenantsWithTheMostRowsReachedTheLastTurn", rows("a", "c", "c", "b", "b"), "a", "c"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := lastServed(c.rows, c.after); got != c.want {
				t.Fatalf("lastServed(after %q) = %q, want %q", c.after, got, c.want)
			}
		})
	}
}
