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
	big, mid := scopeOf{"big", ""}, scopeOf{"mid", ""}
	for _, tc := range []struct {
		name          string
		tenant, scope string
		waiting       []scopeOf
		want          bool
	}{
		{"nothing known to wait: no claim has looked", "small", "", nil, false},
		{"a tenant holding fewer than the one waiting", "small", "", []scopeOf{big}, true},
		{"a tenant holding none", "new", "", []scopeOf{big, mid}, true},
		{"a tenant holding fewer than one waiting, not than another", "mid", "", []scopeOf{big, {"small", ""}}, false},
		{"a tenant holding as many as one waiting", "small", "", []scopeOf{big, {"other", ""}}, false},
		{"the waiting tenant's own scope", "big", "", []scopeOf{big}, false},
		{"its other scope, holding fewer", "big", "clinic", []scopeOf{big}, true},
		{"its other scope, holding fewer, but a smaller tenant waits", "big", "clinic", []scopeOf{big, mid}, false},
		{"its other scope, its rows waiting too", "big", "clinic", []scopeOf{big, {"big", "clinic"}}, false},
		{"a tenant waiting itself", "mid", "", []scopeOf{big, mid}, false},
	} {
		if got := h.before(tc.tenant, tc.scope, tc.waiting); got != tc.want {
			t.Errorf("%s: before(%q, %q, %v) = %v, want %v", tc.name, tc.tenant, tc.scope, tc.waiting, got, tc.want)
		}
	}
}
