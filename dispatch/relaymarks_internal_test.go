package dispatch

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// TestARelayMarksTheScopesWithABacklog: the relay's backlog marks name a
// tenant's scopes (backlogs): a full claim marks, of the tenants given the
// most rows, the scopes given the most of each one's rows, so another
// scope of a marked tenant still goes to the express queue
// (besideBacklog) and a claim past a full window leaves only the marked
// scope's rows (onlyBacklogged); a tenant's backlog spread over its
// scopes (split evenly by the turns, give or take a row) marks them all. One-row claims mark a scope given two in a row.
func TestARelayMarksTheScopesWithABacklog(t *testing.T) {
	t.Parallel()
	claimOf := func(groups ...scopeOf) []store.Claimed {
		rows := make([]store.Claimed, len(groups))
		for i, g := range groups {
			rows[i] = store.Claimed{Job: heraldtype.Job{Tenant: g.tenant, Scope: g.scope}}
		}
		return rows
	}
	marks := func(m map[scopeOf]bool) []scopeOf {
		return slices.SortedFunc(maps.Keys(m), func(x, y scopeOf) int {
			return cmp.Or(strings.Compare(x.tenant, y.tenant), strings.Compare(x.scope, y.scope))
		})
	}
	a, b, u := scopeOf{"t1", "a"}, scopeOf{"t1", "b"}, scopeOf{"u", ""}
	x, y := scopeOf{"t2", "x"}, scopeOf{"t2", "y"}
	now := time.Now()
	r := NewRelay(RelayConfig{Express: true, ExpressHold: time.Hour})

	if got := r.backlogs(now, claimOf(a, a, a, a, b, u), 7); len(got) != 0 {
		t.Fatalf("a short claim marked %v", marks(got))
	}
	if got := marks(r.backlogs(now, claimOf(a, a, a, a, b, u), 6)); !slices.Equal(got, []scopeOf{a}) {
		t.Fatalf("a full claim of t1's backlog in a marked %v, want t1/a alone", got)
	}
	for _, tc := range []struct {
		g    scopeOf
		want bool
	}{{a, false}, {b, true}, {u, true}} {
		if got := r.besideBacklog(tc.g.tenant, tc.g.scope); got != tc.want {
			t.Errorf("besideBacklog(%v) = %v, want %v", tc.g, got, tc.want)
		}
	}
	if tenant, scope := r.onlyBacklogged(now); tenant != "t1" || scope == nil || *scope != "a" {
		t.Fatalf("onlyBacklogged = %q, %v; want t1's scope a", tenant, scope)
	}
	if got := marks(r.backlogs(now, claimOf(x, x, y, y, a), 5)); !slices.Equal(got, []scopeOf{a, x, y}) {
		t.Fatalf("a full claim of t2's backlog over two scopes marked %v, want both beside t1/a", got)
	}
	if tenant, _ := r.onlyBacklogged(now); tenant != "" {
		t.Fatalf("onlyBacklogged = %q with two tenants marked, want none", tenant)
	}
	r = NewRelay(RelayConfig{Express: true, ExpressHold: time.Hour})
	if got := marks(r.backlogs(now, claimOf(x, y, x, y, x, y, x), 7)); !slices.Equal(got, []scopeOf{x, y}) {
		t.Fatalf("a full claim of t2's backlog over two scopes, split 4 and 3, marked %v, want both", got)
	}
	r = NewRelay(RelayConfig{Express: true, ExpressHold: time.Hour})
	r.backlogs(now, claimOf(x, x, y, y), 4)
	if tenant, scope := r.onlyBacklogged(now); tenant != "t2" || scope != nil {
		t.Fatalf("onlyBacklogged = %q, %v with two scopes of t2 marked, want all of t2", tenant, scope)
	}

	r = NewRelay(RelayConfig{Express: true, ExpressHold: time.Hour})
	for _, g := range []scopeOf{a, b, a} {
		if got := r.backlogs(now, claimOf(g), 1); len(got) != 0 {
			t.Fatalf("one-row claims of t1's scopes by turns marked %v", marks(got))
		}
	}
	if got := marks(r.backlogs(now, claimOf(a), 1)); !slices.Equal(got, []scopeOf{a}) {
		t.Fatalf("a second one-row claim of t1/a in a row marked %v, want t1/a", got)
	}
	if tenant, _ := r.onlyBacklogged(now); tenant != "t1" {
		t.Fatalf("onlyBacklogged = %q, want t1", tenant)
	}
	r.backlogs(now, claimOf(b), 1)
	if tenant, scope := r.onlyBacklogged(now); tenant != "t1" || scope == nil || *scope != "a" {
		t.Fatalf("onlyBacklogged = %q, %v after one claim of t1/b; want t1's scope a", tenant, scope)
	}
}
