package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
)

// claim_cooldown: unset is the default, a negative value is none, and
// more than a second is refused naming the key.
func TestClaimCooldown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		yaml string
		want time.Duration
	}{
		{"", config.DefaultClaimCooldown},
		{"claim_cooldown: 25ms\n", 25 * time.Millisecond},
		{"claim_cooldown: -1ns\n", 0},
		{"claim_cooldown: 1s\n", time.Second},
	} {
		cfg, err := config.Load(writeFile(t, minimal+c.yaml), noEnv)
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if got := cfg.Cooldown(); got != c.want {
			t.Errorf("%q: Cooldown() = %s, want %s", c.yaml, got, c.want)
		}
	}
	_, err := config.Load(writeFile(t, minimal+"claim_cooldown: 2s\n"), noEnv)
	if want := "claim_cooldown: must be at most 1s"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("claim_cooldown: 2s: %v, want an error saying %q", err, want)
	}
}
