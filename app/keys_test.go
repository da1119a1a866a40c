package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
)

func init() { apikeys.Iterations = 1000 } // the tests' stored keys

// The app wires config api_keys' scopes, the stored keys and limits into
// the API.
func TestKeysScopesAndLimitsFromConfig(t *testing.T) {
	t.Parallel()
	a, base := newApp(t, func(c *config.Config) {
		c.APIKeys = append(c.APIKeys, config.APIKey{Key: "reader-key", Tenant: config.DevTenant, Name: "reader", Scopes: []string{"read"}})
		c.Limits.KeyRate, c.Limits.KeyBurst = 0.001, 2
	})
	t.Cleanup(func() { a.Close() })
	_, stored, err := apikeys.Create(context.Background(), a.Store(), apikeys.CreateParams{Tenant: config.DevTenant, Name: "crm", Scopes: []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, key string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", "k")
		resp, err := testenv.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := do("POST", "/v1/notifications", "reader-key"); got != http.StatusForbidden {
		t.Errorf("a read-only config key sending: %d, want 403", got)
	}
	if got := do("GET", "/v1/kinds", stored); got != http.StatusOK {
		t.Errorf("a stored key reading: %d, want 200", got)
	}
	if got := do("GET", "/v1/kinds", stored); got != http.StatusOK {
		t.Errorf("a stored key's second request: %d, want 200", got)
	}
	if got := do("GET", "/v1/kinds", stored); got != http.StatusTooManyRequests {
		t.Errorf("a stored key past its burst: %d, want 429", got)
	}
	if got := do("GET", "/v1/kinds", config.DevAPIKey); got != http.StatusOK {
		t.Errorf("the development key: %d, want 200 (its own rate)", got)
	}
}
