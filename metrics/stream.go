package metrics

import "github.com/prometheus/client_golang/prometheus"

// Streams are the metrics of the live inbox streams (package stream,
// GET /v1/me/stream). Its methods are safe on nil.
type Streams struct {
	refused prometheus.Counter
}

// WatchStreams exports the stream metrics of this process, with open read
// when scraped:
//
//	herald_streams_open             streams open now
//	herald_streams_refused_total    streams refused because streams_max were open (503)
//
// and returns the counter side. Call it once per Metrics.
func (m *Metrics) WatchStreams(open func() float64) *Streams {
	if m == nil {
		return nil
	}
	s := &Streams{refused: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "herald_streams_refused_total",
		Help: "GET /v1/me/stream requests refused with 503 because inbox.streams_max streams were open (or herald was stopping).",
	})}
	m.Registry.MustRegister(s.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_streams_open", Help: "Live inbox streams (GET /v1/me/stream) open on this process.",
	}, open))
	return s
}

// Refused counts a stream refused over the cap.
func (s *Streams) Refused() {
	if s != nil {
		s.refused.Inc()
	}
}
