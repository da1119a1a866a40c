package config_test

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/config"
)

// A whole-number setting written with a fraction is refused at start,
// named by its line and path: the YAML decoder would truncate it without a
// word (burst: 2.7 sets 2). Whole numbers, durations and fractions where
// fractions belong still load.
func TestAFractionForAWholeNumberIsRefused(t *testing.T) {
	t.Parallel()
	const good = `providers:
  - {name: s, type: sim, channel: sms, timeout: 1.5s, rate_limit: {per_second: 2.5, burst: 3}}
`
	if _, err := config.Load(writeFile(t, good), noEnv); err != nil {
		t.Fatalf("Load of whole numbers and a fractional rate: %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"burst: 3", "burst: 2.7", "line 2: providers[0].rate_limit.burst: 2.7 is not a whole number"},
		{"burst: 3", "burst: 0.5", "providers[0].rate_limit.burst: 0.5 is not a whole number"},
	} {
		_, err := config.Load(writeFile(t, strings.Replace(good, c.from, c.to, 1)), noEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Load = %v, want %q", c.to, err, c.want)
		}
	}
	if _, err := config.Load(writeFile(t, "limits: {key_rate: 50, key_burst: 100.5}\n"), noEnv); err == nil ||
		!strings.Contains(err.Error(), "line 1: limits.key_burst: 100.5 is not a whole number") {
		t.Errorf("key_burst 100.5: %v", err)
	}
	// Reached through an alias or a merge key, the anchored value is judged
	// where it is used.
	for name, c := range map[string]struct{ doc, want string }{
		"Alias": {`providers:
  - {name: s, type: sim, channel: sms, rate_limit: {per_second: &b 2.7, burst: *b}}
`, "providers[0].rate_limit.burst: 2.7 is not a whole number"},
		"Merge": {`providers:
  - {name: s, type: sim, channel: sms, rate_limit: &rl {per_second: 2.5, burst: 2.7}}
  - {name: e, type: sim, channel: email, rate_limit: {<<: *rl}}
`, "providers[1].rate_limit.burst: 2.7 is not a whole number"},
	} {
		if _, err := config.Load(writeFile(t, c.doc), noEnv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Load = %v, want %q", name, err, c.want)
		}
	}
	// A mapping's own key wins over a merged one, as the decoder has it:
	// the merged 2.7 is never read.
	if c, err := config.Load(writeFile(t, `providers:
  - {name: s, type: sim, channel: sms, rate_limit: {per_second: 2.5, burst: 3}}
  - {name: e, type: sim, channel: email, rate_limit: {<<: [{burst: 4}, {burst: 2.7}], per_second: 2}}
`), noEnv); err != nil || c.Providers[1].RateLimit.Burst != 4 {
		t.Errorf("a merged 2.7 overridden: %v, want it loaded with burst 4", err)
	}
	c, err := config.Load(writeFile(t, strings.Replace(good, "burst: 3", "burst: 3.0", 1)), noEnv)
	if err != nil || c.Providers[0].RateLimit.Burst != 3 {
		t.Errorf("burst 3.0: %v, want it read as 3", err)
	}
}
