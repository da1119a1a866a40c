// Package metrics defines herald's Prometheus metrics. Every method is safe on
// a nil *Metrics, so components may run without them (tests, library use).
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/heraldtype"
)

// Metrics holds the collectors.
type Metrics struct {
	Registry *prometheus.Registry

	accepted     *prometheus.CounterVec
	intake       *prometheus.CounterVec
	deliveries   *prometheus.CounterVec
	providerCall *prometheus.HistogramVec
	dispatch     *prometheus.CounterVec
	alerts       *prometheus.CounterVec
}

// New registers herald's collectors on a fresh registry, with backlog read
// from the store at scrape time.
func New(backlog func(ctx context.Context) (map[heraldtype.Lane]int, error)) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_notifications_accepted_total", Help: "Notifications accepted (202) by lane.",
		}, []string{"lane"}),
		intake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_intake_responses_total", Help: "Intake responses by status code.",
		}, []string{"code"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_deliveries_total", Help: "Delivery state transitions written by the sender, by lane, channel and state.",
		}, []string{"lane", "channel", "state"}),
		providerCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "herald_provider_call_seconds", Help: "Provider call latency by provider and outcome class.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"provider", "class"}),
		dispatch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_dispatch_total", Help: "Outbox rows settled by the dispatcher, by lane and result.",
		}, []string{"lane", "result"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_alerts_total", Help: "Alerts raised, by kind.",
		}, []string{"kind"}),
	}
	// Every lane's acceptance counter exists from the start, at 0, so the
	// series is scrapeable (and rate() works) before the first 202.
	for _, l := range heraldtype.Lanes {
		m.accepted.WithLabelValues(string(l))
	}
	m.Registry.MustRegister(m.accepted, m.intake, m.deliveries, m.providerCall, m.dispatch, m.alerts,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	if backlog != nil {
		m.Registry.MustRegister(&backlogCollector{read: backlog, desc: prometheus.NewDesc(
			"herald_outbox_backlog", "Due outbox rows waiting for a claimer, by lane.", []string{"lane"}, nil)})
	}
	return m
}

// Accepted counts a 202.
func (m *Metrics) Accepted(l heraldtype.Lane) {
	if m != nil {
		m.accepted.WithLabelValues(string(l)).Inc()
	}
}

// IntakeResponse counts an intake answer.
func (m *Metrics) IntakeResponse(code string) {
	if m != nil {
		m.intake.WithLabelValues(code).Inc()
	}
}

// Delivery counts a delivery state written.
func (m *Metrics) Delivery(l heraldtype.Lane, ch heraldtype.Channel, s heraldtype.DeliveryState) {
	if m != nil {
		m.deliveries.WithLabelValues(string(l), string(ch), string(s)).Inc()
	}
}

// ProviderCall observes one provider call.
func (m *Metrics) ProviderCall(provider, class string, d time.Duration) {
	if m != nil {
		m.providerCall.WithLabelValues(provider, class).Observe(d.Seconds())
	}
}

// Dispatch counts how the dispatcher settled a row.
func (m *Metrics) Dispatch(l heraldtype.Lane, result string) {
	if m != nil {
		m.dispatch.WithLabelValues(string(l), result).Inc()
	}
}

// DispatchN counts n rows settled with the same result (the relay's batches).
func (m *Metrics) DispatchN(l heraldtype.Lane, result string, n int) {
	if m != nil && n > 0 {
		m.dispatch.WithLabelValues(string(l), result).Add(float64(n))
	}
}

// Alert counts an alert.
func (m *Metrics) Alert(kind string) {
	if m != nil {
		m.alerts.WithLabelValues(kind).Inc()
	}
}

type backlogCollector struct {
	read func(ctx context.Context) (map[heraldtype.Lane]int, error)
	desc *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, l := range heraldtype.Lanes {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[l]), string(l))
	}
}
