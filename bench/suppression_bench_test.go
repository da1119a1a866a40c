package bench

import (
	"testing"

	"github.com/heraldhq/herald/config"
)

// BenchmarkEndToEndNoSuppression is BenchmarkEndToEnd with event-level
// suppression off (event_suppression.enabled: false): the difference
// between the two is the rule's cost, one event key taken per send (every
// notification of the benchmark is its own event).
func BenchmarkEndToEndNoSuppression(b *testing.B) {
	drive(b, startWith(b, false, func(cfg *config.Config) {
		off := false
		cfg.EventSuppression.Enabled = &off
	}))
}

// BenchmarkEndToEndNoRules is BenchmarkEndToEnd with the send policy's
// optional rules off (event suppression, quiet hours): the figure the
// issue's "all rules enabled" run (BenchmarkEndToEndFirst: a fallback
// chain of three, suppression on, quiet hours on) is compared with.
func BenchmarkEndToEndNoRules(b *testing.B) {
	drive(b, startWith(b, false, func(cfg *config.Config) {
		off := false
		cfg.EventSuppression.Enabled = &off
		cfg.QuietHours.Enabled = &off
	}))
}
