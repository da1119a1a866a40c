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
		name    string
		tenant  string
		waiting []scopeOf
		want    bool
	}{
		{"nothing known to wait: no claim has looked", "small", nil, false},
		{"a tenant holding fewer than the one waiting", "small", []scopeOf{big}, true},
		{"a tenant holding none", "new", []scopeOf{big, mid}, true},
		{"a tenant holding fewer than one waiting, not than another", "mid", []scopeOf{big, {"small", ""}}, false},
		{"a tenant holding as many as one waiting", "small", []scopeOf{big, {"other", ""}}, false},
		{"a tenant waiting itself", "mid", []scopeOf{big, mid}, false},
		{"the waiting tenant, in another scope", "big", []scopeOf{{"big", "clinic"}}, false},
	} {
		if got := h.before(tc.tenant, tc.waiting); got != tc.want {
			t.Errorf("%s: before(%q, %v) = %v, want %v", tc.name, tc.tenant, tc.waiting, got, tc.want)
		}
	}
}
