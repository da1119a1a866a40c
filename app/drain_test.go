package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRequestsWhileDrainingAre503: once herald has begun to drain, a
// request that reaches it before the listener closes is refused with 503
// (retry with the same key elsewhere), never accepted; liveness and
// readiness still answer. (CI caught a 202 for a POST sent after the
// "herald: draining" line.)
func TestRequestsWhileDrainingAre503(t *testing.T) {
	a := &App{}
	h := a.refuseWhileDraining(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	call := func(method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(`{}`)))
		return rec
	}
	if rec := call(http.MethodPost, "/v1/notifications"); rec.Code != http.StatusAccepted {
		t.Fatalf("before draining: %d, want the handler's 202", rec.Code)
	}
	a.draining.Store(true)
	rec := call(http.MethodPost, "/v1/notifications")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
		!strings.HasPrefix(rec.Header().Get("Content-Type"), "application/problem+json") {
		t.Fatalf("while draining: %d %v, want a 503 problem with Retry-After", rec.Code, rec.Header())
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if rec := call(http.MethodGet, p); rec.Code != http.StatusAccepted {
			t.Errorf("GET %s while draining: %d, want it passed on", p, rec.Code)
		}
	}
}
