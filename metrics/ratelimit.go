package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// rateLimits show what the providers' shared rate limits (package
// ratelimit) do to sends: how long a send waited for its token before it
// went on, and how many were put back for later because no token came
// within the limiter's bound (those also count as the dispatcher's retry,
// which says nothing of why).
type rateLimits struct {
	waits     *prometheus.HistogramVec
	deferrals *prometheus.CounterVec
}

func newRateLimits(reg *prometheus.Registry) *rateLimits {
	r := &rateLimits{
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "herald_rate_limit_wait_seconds",
			Help:    "How long a send waited for its provider's rate-limit token before it went on, by provider.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"provider"}),
		deferrals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_rate_limit_deferrals_total",
			Help: "Sends put back for later (RATE_LIMITED) because their provider's rate limit had no token within the wait's bound, by provider.",
		}, []string{"provider"}),
	}
	reg.MustRegister(r.waits, r.deferrals)
	return r
}

// RateLimitWaited observes a send's wait for its token (it went on).
func (m *Metrics) RateLimitWaited(provider string, d time.Duration) {
	if m != nil {
		m.rateLimits.waits.WithLabelValues(provider).Observe(d.Seconds())
	}
}

// RateLimitDeferred counts a send its rate limit put back for later.
func (m *Metrics) RateLimitDeferred(provider string) {
	if m != nil {
		m.rateLimits.deferrals.WithLabelValues(provider).Inc()
	}
}
