package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/limits"
)

// BenchmarkGuard is what a request pays for its key: GET /v1/kinds (the
// cheapest route) through the whole router, with a config key and no
// limits against a stored key (cached after its first request) with the
// per-key rate on. Intake's own cost is milliseconds; the difference here
// is what issue 13's keys and limits add to it.
func BenchmarkGuard(b *testing.B) {
	clk := clock.Real{}
	st := testdb.Open(b, "sqlite", clk).Store
	cfg := fullConfig(b, st, clk)
	cfg.Keys = auth.NewKeys(map[string]string{"config-key": "a"})
	configOnly := cfg
	configOnly.APIKeys = nil
	stored := cfg
	stored.Limits = limits.New(limits.Config{KeyRate: 1e9, SendRate: 1e9})
	storedKey := mustKey(b, st, clk, "a")
	for _, c := range []struct {
		name string
		cfg  httpapi.Config
		key  string
	}{{"ConfigKey", configOnly, "config-key"}, {"StoredKeyAndLimits", stored, storedKey}} {
		b.Run(c.name, func(b *testing.B) {
			h := httpapi.New(c.cfg)
			req := httptest.NewRequest(http.MethodGet, "/v1/kinds", nil)
			req.Header.Set("Authorization", "Bearer "+c.key)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req) // the stored key's one KDF run
			if rec.Code != http.StatusOK {
				b.Fatalf("%d %s", rec.Code, rec.Body)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Errorf("%d", rec.Code)
						return
					}
				}
			})
		})
	}
}
