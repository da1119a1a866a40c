package auth

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/internal/testenv"
)

func TestRequireRecipient(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	rt := newTokens(t, clk, map[string][]RecipientKey{"acme": {{ID: "k1", Secret: secret1}}})
	keys := NewKeys(map[string]string{"api-key-1": "acme"})
	h := RequireRecipient(rt, keys)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc, ok := RecipientFrom(r.Context())
		if !ok || Tenant(r.Context()) != "" {
			t.Errorf("RecipientFrom = %+v, %v; Tenant = %q", rc, ok, Tenant(r.Context()))
		}
		_, _ = io.WriteString(w, rc.Tenant+"/"+rc.ID)
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tok := mint(t, rt, "acme", "user-1")

	get := func(authz string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/me/feed", nil)
		if err != nil {
			t.Fatal(err)
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := testenv.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("401 with Content-Type %q", ct)
			}
			if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("401 without a Bearer challenge: %q", resp.Header.Get("WWW-Authenticate"))
			}
			var p struct{ Detail string }
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("401 body %s: %v", body, err)
			}
			return resp.StatusCode, p.Detail, ""
		}
		return resp.StatusCode, "", string(body)
	}

	if code, _, body := get("Bearer " + tok); code != 200 || body != "acme/user-1" {
		t.Fatalf("the token: %d %q", code, body)
	}
	if code, _, body := get("bearer  " + tok); code != 200 || body != "acme/user-1" {
		t.Fatalf("lower-case scheme: %d %q", code, body)
	}
	for _, tc := range []struct{ name, authz, detail string }{
		{"NoHeader", "", "a recipient token is required"},
		{"Basic", "Basic " + tok, "a recipient token is required"},
		{"APIKey", "Bearer api-key-1", "an API key is not accepted"},
		{"Garbage", "Bearer not-a-token", "not valid"},
	} {
		if code, detail, _ := get(tc.authz); code != 401 || !strings.Contains(detail, tc.detail) {
			t.Errorf("%s: %d %q, want 401 saying %q", tc.name, code, detail, tc.detail)
		}
	}
	clk.Advance(time.Hour)
	if code, detail, _ := get("Bearer " + tok); code != 401 || !strings.Contains(detail, "expired") {
		t.Errorf("expired: %d %q", code, detail)
	}

	// Without tokens configured every request is refused.
	none := httptest.NewServer(RequireRecipient(nil, keys)(h))
	t.Cleanup(none.Close)
	resp, err := testenv.HTTP.Get(none.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("nil tokens: %d", resp.StatusCode)
	}
}

// A /v1/me/… handler routed without RequireRecipient answers 401 itself,
// as RequireRecipient answers a request without a token.
func TestRequiredRecipientWithoutMiddleware(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rc, ok := RequiredRecipient(w, r); ok {
			t.Errorf("RequiredRecipient = %+v without the middleware", rc)
		}
	}))
	t.Cleanup(srv.Close)
	resp, err := testenv.HTTP.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ Detail string }
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") || !strings.Contains(p.Detail, "a recipient token is required") {
		t.Errorf("%d %q %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("WWW-Authenticate"), p.Detail)
	}
}
