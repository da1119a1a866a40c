package config

import (
	"fmt"
	"math"
)

// RateLimit is a provider's call budget, shared by every herald process on
// one database: a token bucket refilled at PerSecond up to Burst (package
// ratelimit has the design).
type RateLimit struct {
	// PerSecond is the calls a second every process together may make, a
	// fraction allowed (0.5: one call every two seconds). Required, more
	// than 0 and at most MaxRateLimit.
	PerSecond float64 `yaml:"per_second"`
	// Burst is the most calls made at once after a quiet spell, at most
	// MaxRateLimit. A quarter of it (at least the calls of 50 ms) is kept
	// for alert, transactional and internal sends: marketing takes only
	// what lies above it. Defaults to per_second rounded up (at least 1):
	// a second's calls.
	Burst int `yaml:"burst"`
}

// MaxRateLimit bounds per_second and burst.
const MaxRateLimit = 1_000_000

// validate checks the rate_limit of the provider at key (nil: the provider
// has none) and fills Burst's default, which depends on PerSecond.
func (r *RateLimit) validate(key string) error {
	if r == nil {
		return nil
	}
	if !(r.PerSecond > 0 && r.PerSecond <= MaxRateLimit) {
		return fmt.Errorf("config: %s.rate_limit.per_second: must be more than 0 and at most %d, got %g", key, MaxRateLimit, r.PerSecond)
	}
	if r.Burst < 0 || r.Burst > MaxRateLimit {
		return fmt.Errorf("config: %s.rate_limit.burst: must be 1..%d, got %d", key, MaxRateLimit, r.Burst)
	}
	if r.Burst == 0 {
		r.Burst = max(1, int(math.Ceil(r.PerSecond)))
	}
	return nil
}
