package bench

import (
	"testing"

	"github.com/heraldhq/herald/config"
)

// BenchmarkEndToEndFirst is BenchmarkEndToEnd with the bench kind's
// channels a fallback chain of three (policy first: webhook, SMS,
// AlimTalk): intake writes the first step and the rest as a plan, and
// the webhook's PROVIDER_ACCEPTED settles the chain without writing the
// later steps. The common path of a first kind: the first channel takes
// it.
func BenchmarkEndToEndFirst(b *testing.B) {
	drive(b, startWith(b, false, withChain("webhook", "sms", "alimtalk")))
}

// BenchmarkEndToEndFirstFallback is BenchmarkEndToEndFirst with SMS first:
// the recipients have no profile, so each SMS step ends
// SUPPRESSED(DESTINATION_UNAVAILABLE) at send time and its decision
// releases the webhook step, whose acceptance skips AlimTalk: two sends
// per notification, the second after the first's write.
func BenchmarkEndToEndFirstFallback(b *testing.B) {
	drive(b, startWith(b, false, withChain("sms", "webhook", "alimtalk")))
}

// withChain makes the bench kind a fallback chain over channels (policy
// first), each with the webhook's template.
func withChain(channels ...string) func(*config.Config) {
	return func(cfg *config.Config) {
		k := &cfg.Kinds[0]
		text := k.Templates["webhook"]
		k.Channels, k.Policy = channels, config.PolicyFirst
		for _, ch := range channels {
			k.Templates[ch] = text
		}
	}
}
