package fcm_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/fcm"
)

// FuzzClassify holds Classify to the rules of the package doc for any
// answer: only a 4xx is a refusal (NotSent or Permanent), only a 2xx is
// accepted, only an UNREGISTERED 404 kills a device, and a reason is
// always a short code, whatever the body says.
func FuzzClassify(f *testing.F) {
	for _, seed := range []struct {
		code int
		ra   string
		body string
	}{
		{200, "", `{"name": "projects/p/messages/1"}`},
		{404, "", errorBody(404, "NOT_FOUND", "UNREGISTERED", "x")},
		{429, "30", errorBody(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "x")},
		{401, "", errorBody(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", "x")},
		{503, "Wed, 21 Oct 2026 07:28:00 GMT", errorBody(503, "UNAVAILABLE", "UNAVAILABLE", "x")},
		{400, "", `{"error": {"status": "INVALID_ARGUMENT", "details": [{"@type": 7}]}}`},
		{302, "", `<html>`},
	} {
		f.Add(seed.code, seed.ra, []byte(seed.body))
	}
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, code int, retryAfter string, body []byte) {
		code = 100 + (code%900+900)%900 // net/http reads three digits, no more
		out := fcm.Classify(code, retryAfter, body, now)
		refusal := code >= 400 && code < 500
		switch {
		case (out.Class == provider.Accepted) != (code >= 200 && code < 300):
			t.Fatalf("HTTP %d classified %v", code, out.Class)
		case (out.Class == provider.NotSent || out.Class == provider.Permanent) && !refusal:
			t.Fatalf("HTTP %d classified %v: only a 4xx refuses", code, out.Class)
		case out.DeadDestination && (out.Class != provider.Permanent || code != http.StatusNotFound || !strings.Contains(string(body), "UNREGISTERED")):
			t.Fatalf("HTTP %d %q marked dead", code, body)
		case out.RetryAfter < 0 || out.RetryAfter > provider.MaxRetryAfter || (out.RetryAfter > 0 && out.Class != provider.NotSent):
			t.Fatalf("retry-after %v with %v", out.RetryAfter, out.Class)
		case out.Class != provider.Accepted && (!reasonCode.MatchString(out.Reason) || len(out.Reason) > 32):
			t.Fatalf("reason %q is not a short code", out.Reason)
		case out.Class == provider.Accepted && (out.Reason != "" || len(out.ProviderRef) > 256):
			t.Fatalf("accepted with reason %q, ref of %d bytes", out.Reason, len(out.ProviderRef))
		}
	})
}
