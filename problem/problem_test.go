package problem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heraldhq/herald/problem"
)

// A detail is read by people: its <, > and & are written as they are, not
// as \u003c escapes.
func TestDetailIsWrittenAsItReads(t *testing.T) {
	w := httptest.NewRecorder()
	problem.New(w, http.StatusUnauthorized, "send Authorization: Bearer <key> & retry")
	if body := w.Body.String(); !strings.Contains(body, `"detail":"send Authorization: Bearer <key> & retry"`) {
		t.Fatalf("body %s; want the detail as written", body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
}
