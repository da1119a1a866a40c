package validate_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/heraldhq/herald/validate"
)

// FuzzEdge: whatever the path and query, Edge answers 400 or 422 itself or
// lets the request through, and what it lets through has a path and a
// query of printable UTF-8 with a recipient of at most MaxRecipient bytes:
// nothing a store cannot hold reaches a handler by the URL.
func FuzzEdge(f *testing.F) {
	for _, s := range []string{"/v1/notifications/ntf_1", "/v1/notifications/%FF", "/v1/recipients/a%00b/profile",
		"/v1/parked/%E2%82/requeue", "/v1/notifications?recipient=%FF", "/v1/recipients/" + strings.Repeat("r", 201) + "/profile",
		"/v1/recipients/r/devices/a%2Fb", "/v1/me/feed?cursor=abc&limit=%0A", "/v1/notifications//cancel", "/v1/../healthz",
		"/v1/notifications/%2E%2E/cancel"} {
		f.Add(s)
	}
	reached := false
	h := validate.Edge(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			return
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL = u
		reached = false
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if !reached {
			if rec.Code != http.StatusBadRequest && rec.Code != http.StatusUnprocessableEntity && rec.Code != http.StatusNotFound ||
				rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%q refused with %d %s", target, rec.Code, rec.Header().Get("Content-Type"))
			}
			return
		}
		// The mux routes, and cleans, the escaped path: "/%2F" is one
		// segment holding a slash, not an empty one.
		segs := strings.Split(u.EscapedPath(), "/")
		for i, raw := range segs {
			seg, err := url.PathUnescape(raw)
			if err != nil || !validate.Printable(seg) || len(seg) > validate.MaxSegment {
				t.Fatalf("%q reached the handler with path segment %q", target, seg)
			}
			if raw == "." || raw == ".." || (raw == "" && i > 0 && i < len(segs)-1) {
				t.Fatalf("%q reached the handler with a path the mux would redirect (segment %d %q)", target, i, raw)
			}
		}
		if segs := strings.Split(u.EscapedPath(), "/"); len(segs) > 3 && segs[1] == "v1" && segs[2] == "recipients" {
			if rcpt, _ := url.PathUnescape(segs[3]); len(rcpt) > validate.MaxRecipient {
				t.Fatalf("%q reached the handler with a %d-byte recipient", target, len(rcpt))
			}
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			t.Fatalf("%q reached the handler with a query that does not parse: %v", target, err)
		}
		for k, vs := range q {
			for _, v := range append(vs, k) {
				if !validate.Printable(v) {
					t.Fatalf("%q reached the handler with query text %q", target, v)
				}
			}
		}
	})
}
