package dispatch

import (
	"fmt"
	"strings"
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
	// A tenant's unscoped rows are one of its scopes once it has others:
	// c's "" got the most rows, so its round goes on after "".
	r.served([]store.Claimed{row("c", ""), row("c", ""), row("c", "z")})
	if got, ok := r.scopes["c"]; !ok || got != "" {
		t.Fatalf("a claim giving c's unscoped rows the most: c's scope %q (%v), want \"\"", got, ok)
	}
	// The memory is bounded: tenants not served for maxRoundScopes claims
	// are forgotten.
	for i := range 2 * maxRoundScopes {
		r.served([]store.Claimed{row(fmt.Sprintf("t%d", i), "s")})
	}
	if len(r.scopes) > maxRoundScopes || r.scopes["a"] != "" {
		t.Fatalf("after %d tenants: %d remembered (a: %q), want at most %d and a forgotten", 2*maxRoundScopes, len(r.scopes), r.scopes["a"], maxRoundScopes)
	}
}

// share skips the tenant at the bound (Concurrency − Reserve sends in
// flight), or, while all but Reserve/2 of them are one scope's and the
// tenant holds less than the bound plus that half, only that scope, with
// a cap on the tenant's other scopes' rows (not on the claim); below
// the bound a claim takes at most what the tenant may still hold.
func TestShareSkipsATenantOrItsOneBigScope(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		held  map[string]int // "tenant/scope" → sends in flight
		limit int
		skip  string // "tenant" or "tenant/scope"; "" none
		cap   int    // with a scope skipped, how many of the tenant's other rows
	}{
		{"BelowTheBound", map[string]int{"a/x": 50}, 10, "", 0},
		{"AnotherTenantDoesNotCount", map[string]int{"a/x": 50, "b/": 9}, 10, "", 0},
		{"OneScopeAtTheBound", map[string]int{"a/": 60}, 64, "a/", 2},
		{"ItsOtherScopesMayAddTheirHalf", map[string]int{"a/x": 59, "a/y": 2}, 64, "a/x", 1},
		{"ItsOtherScopesUsedTheirHalf", map[string]int{"a/x": 60, "a/y": 2}, 64, "a", 0},
		{"ItsScopesEvenly", map[string]int{"a/x": 30, "a/y": 30}, 64, "a", 0},
		{"ItsManyScopes", map[string]int{"a/1": 12, "a/2": 12, "a/3": 12, "a/4": 12, "a/5": 12}, 64, "a", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cl := &Claimer{ClaimerConfig: ClaimerConfig{Concurrency: 64, Reserve: 4}}
			id := int64(0)
			for g, n := range c.held {
				tenant, scope, _ := strings.Cut(g, "/")
				for range n {
					id++
					cl.held.add(store.Claimed{Job: heraldtype.Job{Tenant: tenant, Scope: scope}, Fence: store.Fence{ID: id}})
				}
			}
			limit, skip := cl.share(64)
			got := skip.Tenant
			if skip.Scope != nil {
				got += "/" + *skip.Scope
			}
			if limit != c.limit || got != c.skip || skip.Cap != c.cap {
				t.Fatalf("share(64) = %d, skip %q cap %d; want %d, skip %q cap %d", limit, got, skip.Cap, c.limit, c.skip, c.cap)
			}
		})
	}
	// A Reserve of 1 has no half for scopes: the tenant is skipped.
	cl := &Claimer{ClaimerConfig: ClaimerConfig{Concurrency: 8, Reserve: 1}}
	for i := range 7 {
		cl.held.add(store.Claimed{Job: heraldtype.Job{Tenant: "a", Scope: "x"}, Fence: store.Fence{ID: int64(i)}})
	}
	if limit, skip := cl.share(8); limit != 8 || skip.Tenant != "a" || skip.Scope != nil {
		t.Fatalf("Reserve 1, a/x at the bound: share = %d, %+v; want 8 and all of a skipped", limit, skip)
	}
}
