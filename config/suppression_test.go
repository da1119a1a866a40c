package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
)

// On by default with a 10 minute lease, keys kept for idempotency_ttl;
// each key can be set, and false turns the rule off.
func TestEventSuppressionDefaultsAndKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		on         bool
		lease, ttl time.Duration
	}{
		{"Defaults", "", true, 10 * time.Minute, 24 * time.Hour},
		{"TTLFollowsIdempotencyTTL", "idempotency_ttl: 48h\n", true, 10 * time.Minute, 48 * time.Hour},
		{"TTLNotBelowStaleClaimAfter", "idempotency_ttl: 5m\n", true, 10 * time.Minute, 10 * time.Minute},
		{"Set", "event_suppression: {enabled: true, lease: 2m, ttl: 1h}\n", true, 2 * time.Minute, time.Hour},
		{"Off", "event_suppression: {enabled: false}\n", false, 10 * time.Minute, 24 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(writeFile(t, minimal+c.yaml), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			e := cfg.EventSuppression
			if e.On() != c.on || e.Lease.D() != c.lease || e.TTL.D() != c.ttl {
				t.Fatalf("on %v lease %s ttl %s; want %v %s %s", e.On(), e.Lease.D(), e.TTL.D(), c.on, c.lease, c.ttl)
			}
		})
	}
	if !config.Dev().WithDefaults().EventSuppression.On() {
		t.Fatal("the development config has the rule off")
	}
}

// A lease shorter than the wait between the check and the claim, or a ttl
// that is not positive or shorter than a send may stay SENDING
// (stale_claim_after: a key purged under a send in flight lets a second
// notification of the event send), is refused naming the key.
func TestEventSuppressionRefusesUnsafeValues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, want string }{
		{"event_suppression: {lease: 30s}", "event_suppression.lease: must be at least 1m0s"},
		{"event_suppression: {ttl: -1h}", "event_suppression.ttl: must be positive"},
		{"event_suppression: {ttl: 5m}", "event_suppression.ttl: must be at least stale_claim_after (10m0s)"},
		{"stale_claim_after: 2h\nevent_suppression: {ttl: 1h}", "event_suppression.ttl: must be at least stale_claim_after (2h0m0s)"},
		{"event_suppression: {lease: 10m, keep: 1h}", `unknown key "event_suppression.keep"`},
	} {
		_, err := config.Load(writeFile(t, minimal+c.yaml+"\n"), noEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.yaml, err, c.want)
		}
	}
}
