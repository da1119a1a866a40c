package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Where a provider's report came from, the source label of
// herald_provider_reports_total.
const (
	ReportCallback = "callback"
	ReportLookup   = "lookup"
)

// reports are the counters of providers' later word (package settle):
// delivery reports and status look-ups.
type reports struct {
	reports       *prometheus.CounterVec
	lookupsFailed *prometheus.CounterVec
	// byPerson counts UNKNOWN deliveries a person settled (settle.ByPerson).
	byPerson *prometheus.CounterVec
}

func newReports(reg *prometheus.Registry) *reports {
	r := &reports{
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_provider_reports_total",
			Help: "Providers' reports on messages, by provider, source (callback: a delivery report; lookup: a status look-up " +
				"of an UNKNOWN delivery), result (delivered, failed, pending, not_found) and whether it moved the delivery " +
				"(a late or repeated report moves nothing).",
		}, []string{"provider", "source", "result", "moved"}),
		lookupsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_provider_lookups_failed_total",
			Help: "Status look-ups that got no answer (the provider unreachable or refusing); the delivery stays UNKNOWN for a later round.",
		}, []string{"provider"}),
		byPerson: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_deliveries_settled_by_person_total",
			Help: "UNKNOWN deliveries a person settled through the API (POST /v1/deliveries/{message_id}/settle), by result " +
				"(delivered, failed); the CLI's are in the audit log.",
		}, []string{"result"}),
	}
	for _, res := range []string{"delivered", "failed"} {
		r.byPerson.WithLabelValues(res)
	}
	reg.MustRegister(r.reports, r.lookupsFailed, r.byPerson)
	return r
}

// SettledByPerson counts an UNKNOWN delivery a person settled as result.
func (m *Metrics) SettledByPerson(result string) {
	if m != nil {
		m.reports.byPerson.WithLabelValues(result).Inc()
	}
}

// ProviderReport counts one report applied to a delivery.
func (m *Metrics) ProviderReport(provider, source, result string, moved bool) {
	if m != nil {
		mv := "false"
		if moved {
			mv = "true"
		}
		m.reports.reports.WithLabelValues(provider, source, result, mv).Inc()
	}
}

// ProviderLookupFailed counts a status look-up that got no answer.
func (m *Metrics) ProviderLookupFailed(provider string) {
	if m != nil {
		m.reports.lookupsFailed.WithLabelValues(provider).Inc()
	}
}
