package metrics

import "github.com/prometheus/client_golang/prometheus"

// Streams are the metrics of the live inbox streams (package stream,
// GET /v1/me/stream). Its methods are safe on nil.
type Streams struct {
	refused *prometheus.CounterVec
}

// Why a stream was refused: the label reason of herald_streams_refused_total.
const (
	// StreamRefusedServer: streams_max streams were open, or herald was
	// stopping (503).
	StreamRefusedServer = "streams_max"
	// StreamRefusedRecipient: the recipient had streams_per_recipient
	// streams open (429).
	StreamRefusedRecipient = "per_recipient"
	// StreamRefusedTenant: the recipient's tenant had streams_per_tenant
	// streams open (429).
	StreamRefusedTenant = "per_tenant"
)

// WatchStreams exports the stream metrics of this process, with open read
// when scraped:
//
//	herald_streams_open             streams open now
//	herald_streams_refused_total{reason}  streams refused: streams_max were open (503),
//	                                      per_recipient: the recipient's were (429),
//	                                      or per_tenant: its tenant's were (429)
//
// and returns the counter side. Call it once per Metrics.
func (m *Metrics) WatchStreams(open func() float64) *Streams {
	if m == nil {
		return nil
	}
	s := &Streams{refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_streams_refused_total",
		Help: "GET /v1/me/stream requests refused: reason streams_max, 503, inbox.streams_max streams were open (or herald was stopping); " +
			"per_recipient, 429, the recipient had inbox.streams_per_recipient open; per_tenant, 429, its tenant had inbox.streams_per_tenant open.",
	}, []string{"reason"})}
	for _, r := range []string{StreamRefusedServer, StreamRefusedRecipient, StreamRefusedTenant} {
		s.refused.WithLabelValues(r)
	}
	m.Registry.MustRegister(s.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_streams_open", Help: "Live inbox streams (GET /v1/me/stream) open on this process.",
	}, open))
	return s
}

// Refused counts a stream refused, for reason (StreamRefused…).
func (s *Streams) Refused(reason string) {
	if s != nil {
		s.refused.WithLabelValues(reason).Inc()
	}
}
