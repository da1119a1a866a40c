package config

import (
	"strings"
	"testing"
)

// The rate_limit block is checked by RateLimit.validate, which
// validateProviders calls for each provider; these cases call it directly.
func TestRateLimitValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		in        *RateLimit
		wantBurst int
		wantErr   string
	}{
		{"NoneIsNoLimit", nil, 0, ""},
		{"BurstDefaultsToASecondsCalls", &RateLimit{PerSecond: 200}, 200, ""},
		{"BurstDefaultRoundsUp", &RateLimit{PerSecond: 2.5}, 3, ""},
		{"SlowRateBurstsOne", &RateLimit{PerSecond: 0.2}, 1, ""},
		{"BurstGivenStays", &RateLimit{PerSecond: 200, Burst: 20}, 20, ""},
		{"ZeroRate", &RateLimit{}, 0, "providers[0].rate_limit.per_second: must be more than 0"},
		{"NegativeRate", &RateLimit{PerSecond: -1}, 0, "per_second: must be more than 0"},
		{"RateTooHigh", &RateLimit{PerSecond: MaxRateLimit + 1}, 0, "per_second: must be more than 0 and at most 1000000"},
		{"NegativeBurst", &RateLimit{PerSecond: 1, Burst: -1}, 0, "providers[0].rate_limit.burst: must be 1..1000000, got -1"},
		{"BurstTooHigh", &RateLimit{PerSecond: 1, Burst: MaxRateLimit + 1}, 0, "rate_limit.burst: must be 1..1000000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.in.validate("providers[0]")
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("validate: %v, want an error containing %q", err, c.wantErr)
			case c.wantErr == "" && c.in != nil && c.in.Burst != c.wantBurst:
				t.Fatalf("burst %d, want %d", c.in.Burst, c.wantBurst)
			}
		})
	}
}
