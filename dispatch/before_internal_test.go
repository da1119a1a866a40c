package dispatch

import "testing"

// TestARowBeforeABacklog: the rule by which a backlog refuses an offer
// (held.before): a row is handed over only where the next claim would
// take it before every row of the tenants and scopes waiting.
func TestARowBeforeABacklog(t *testing.T) {
	t.Parallel()
	var h held
	for g, n := range map[scopeOf]int{{"big", ""}: 5, {"big", "clinic"}: 1, {"mid", ""}: 2, {"small", ""}: 1} {
		for range n {
			h.reserve(g.tenant, g.scope)
		}
	}
	big, clinic, mid := scopeOf{"big", ""}, scopeOf{"big", "clinic"}, scopeOf{"mid", ""}
	for _, tc := range []struct {
		name          string
		tenant, scope string
		waiting       []scopeOf
		top           int
		want          bool
	}{
		{"nothing known to wait: no claim has looked", "small", "", nil, 0, false},
		{"a tenant holding fewer than the one waiting", "small", "", []scopeOf{big}, 6, true},
		{"a tenant holding none", "new", "", []scopeOf{big, mid}, 6, true},
		{"a tenant holding fewer than one waiting, not than another", "mid", "", []scopeOf{big, {"small", ""}}, 6, false},
		{"a tenant holding as many as one waiting", "small", "", []scopeOf{big, {"other", ""}}, 6, false},
		{"a tenant waiting itself", "mid", "", []scopeOf{big, mid}, 6, false},
		{"the waiting tenant's scope that waits itself", "big", "clinic", []scopeOf{clinic, big}, 7, false},
		{"the waiting tenant's scope holding fewer than the one waiting", "big", "clinic", []scopeOf{big}, 7, true},
		{"a new scope of the waiting tenant", "big", "new", []scopeOf{big, clinic}, 7, true},
		{"the waiting tenant's scope holding more than the one waiting", "big", "", []scopeOf{clinic}, 7, false},
		{"the waiting tenant holding as many as the full claim's most", "big", "clinic", []scopeOf{big}, 6, false},
		{"the waiting tenant's scope, its tenant holding more than another waiting", "big", "clinic", []scopeOf{big, mid}, 7, false},
		{"the waiting tenant's scope, its tenant holding fewer than another waiting", "mid", "new", []scopeOf{mid, big}, 7, true},
	} {
		if got := h.before(tc.tenant, tc.scope, tc.waiting, tc.top); got != tc.want {
			t.Errorf("%s: before(%q, %q, %v, %d) = %v, want %v", tc.name, tc.tenant, tc.scope, tc.waiting, tc.top, got, tc.want)
		}
	}
}

// TestAnOfferBesideAClaimUnderWay: the rule by which an offer fits its
// tenant's share beside a claim under way (Claimer.fits), in a lane of 64
// slots with a reserve of 4 (a tenant holds at most 60, and past them its
// other scopes up to 2 more while one scope holds all the rest). The
// claim's rows are counted as the tenant's, unless it leaves the tenant
// or lets it have fewer; a backlog's rows count in the fullest scope.
func TestAnOfferBesideAClaimUnderWay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		held    map[scopeOf]int
		pledged int
		skip    skipping
		scope   string
		want    bool
	}{
		{"within the bound with every row the claim may bring", map[scopeOf]int{{"t", "a"}: 50}, 4, skipping{}, "a", true},
		{"another scope past the bound, as share would let it", map[scopeOf]int{{"t", "a"}: 57, {"t", "b"}: 2}, 1, skipping{}, "b", true},
		{"the fullest scope past the bound", map[scopeOf]int{{"t", "a"}: 57, {"t", "b"}: 2}, 1, skipping{}, "a", false},
		{"another scope holding half the reserve already", map[scopeOf]int{{"t", "a"}: 57, {"t", "b"}: 3}, 1, skipping{}, "b", false},
		{"another scope past the bound and half the reserve", map[scopeOf]int{{"t", "a"}: 59, {"t", "b"}: 1}, 2, skipping{}, "b", false},
		{"a claim that may bring two of the tenant's other rows", map[scopeOf]int{{"t", "a"}: 59, {"t", "b"}: 1}, 4, skipping{"t", new("a"), 2}, "b", false},
		{"a claim that may bring one of the tenant's other rows", map[scopeOf]int{{"t", "a"}: 59, {"t", "b"}: 1}, 4, skipping{"t", new("a"), 1}, "b", true},
		{"a claim that leaves the tenant", map[scopeOf]int{{"t", "a"}: 56, {"t", "b"}: 2}, 4, skipping{Tenant: "t"}, "b", true},
		{"a claim that leaves another tenant", map[scopeOf]int{{"t", "a"}: 57, {"t", "b"}: 2, {"u", ""}: 3}, 4, skipping{Tenant: "u"}, "b", false},
		{"a claim that leaves the tenant's only scope", map[scopeOf]int{{"t", ""}: 57}, 4, skipping{"t", new(""), 2}, "", true},
		{"a claim with no cap on the tenant's other scopes", map[scopeOf]int{{"t", "a"}: 59, {"t", "b"}: 1}, 4, skipping{"t", new("a"), 0}, "b", false},
		{"the tenant tying for the most with another", map[scopeOf]int{{"t", "a"}: 30, {"u", ""}: 30}, 30, skipping{}, "b", true},
		{"a scope tying with its tenant's fullest", map[scopeOf]int{{"t", "a"}: 29, {"t", "b"}: 29}, 4, skipping{Tenant: "u"}, "b", false},
		{"no claim under way", map[scopeOf]int{{"t", "a"}: 60}, 0, skipping{}, "a", true},
	} {
		c := &Claimer{ClaimerConfig: ClaimerConfig{Concurrency: 64, Reserve: 4}, pledged: tc.pledged, pledgedSkip: tc.skip}
		for g, n := range tc.held {
			for range n {
				c.held.reserve(g.tenant, g.scope)
			}
		}
		if got := c.fits("t", tc.scope); got != tc.want {
			t.Errorf("%s: fits(%q) = %v, want %v", tc.name, tc.scope, got, tc.want)
		}
	}
}
