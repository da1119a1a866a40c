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
