package lookup

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// Whatever the query, the list answers a 400 naming what is wrong, or
// params the store can run: a limit in range, a known state, and a cursor
// only if it was this listing's.
func FuzzListQuery(f *testing.F) {
	for _, q := range []string{"", "limit=1", "limit=100", "limit=0", "state=PENDING", "since=2030-03-14T09:00:00Z",
		"recipient=u1&kind=k&state=SENT", "cursor=AQ", "%zz", "limit=1&limit=2", "x=1", "recipient=a%00b",
		"recipient=user-1&kind=payment.approved&state=PENDING&since=2030-03-01T00:00:00Z&cursor=" + encodeCursor(listed, pos)} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/notifications", nil)
		r.URL.RawQuery = query
		p, f, perr := parseList(r, "a")
		if perr != nil {
			if perr.Status != http.StatusBadRequest || perr.Detail == "" {
				t.Fatalf("?%s: problem %+v", query, *perr)
			}
			return
		}
		if p.Tenant != "a" || p.Limit < 1 || p.Limit > MaxListLimit || (p.State != "" && !slices.Contains(ListStates, p.State)) {
			t.Fatalf("?%s: params %+v", query, p)
		}
		if p.Before != nil {
			if f.tenant != "a" || f.recipient != p.Recipient || f.kind != p.Kind || f.state != p.State {
				t.Fatalf("?%s: cursor accepted for filters %+v, params %+v", query, f, p)
			}
		}
	})
}
