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

// A loop's round remembers, per tenant whose rows have a scope, the scope
// served last, as it remembers the tenant: claims of one row made with it
// go round tenant a's scopes even while tenant b is served between them.
// Unscoped tenants take no memory.
func TestARoundRemembersEachTenantsLastScope(t *testing.T) {
	t.Parallel()
	row := func(tenant, scope string) store.Claimed {
		return store.Claimed{Job: heraldtype.Job{Tenant: tenant, Scope: scope}}
	}
	var r round
	r.served([]store.Claimed{row("a", "x")})
	r.served([]store.Claimed{row("b", "")})
	if r.after != "b" || r.scopes["a"] != "x" || len(r.scopes) != 1 {
		t.Fatalf("after a/x and b: after %q, scopes %v; want b and a's x alone", r.after, r.scopes)
	}
	r.served([]store.Claimed{row("a", "x"), row("a", "y"), row("a", "z"), row("a", "x")})
	if r.scopes["a"] != "x" {
		t.Fatalf("a claim giving x two rows: a's scope %q, want x (it reached the last turn)", r.scopes["a"])
	}
	r.served([]store.Claimed{row("a", "w"), row("a", "y")})
	if r.scopes["a"] != "w" {
		t.Fatalf("a claim of w and y after x: a's scope %q, want w (y first, then the round wrapped)", r.scopes["a"])
	}
	r.served(nil)
	if r.after != "a" || r.scopes["a"] != "w" {
		t.Fatalf("an empty claim changed the round: after %q, scopes %v", r.after, r.scopes)
	}
}
