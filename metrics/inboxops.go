package metrics

import "github.com/prometheus/client_golang/prometheus"

// The results herald_erasures_total counts.
const (
	ErasureDone   = "done"
	ErasureFailed = "failed"
)

// inboxOps are the operator side of the inbox and of personal data:
// erasures (package erasure), the retention purge (package retention) and
// recounts of the unread counters.
type inboxOps struct {
	erasures       *prometheus.CounterVec
	erasedSends    prometheus.Counter
	inboxPurged    prometheus.Counter
	recountDrifted prometheus.Counter
}

func newInboxOps(reg *prometheus.Registry) *inboxOps {
	o := &inboxOps{
		erasures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_erasures_total",
			Help: "Recipient erasures (DELETE /v1/recipients/{recipient}) by result: done (every batch committed) or failed (a batch failed; the batches before it stay erased).",
		}, []string{"result"}),
		erasedSends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_erasure_suppressed_total",
			Help: "Waiting sends that an erasure ended SUPPRESSED(ERASED) (also counted in herald_deliveries_total).",
		}),
		inboxPurged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_inbox_purged_total",
			Help: "Inbox items the leader deleted past their tenant's retention.",
		}),
		recountDrifted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_inbox_recount_repaired_total",
			Help: "Unread counters a recount found wrong and set right (herald inbox recount, POST /v1/ops/inbox/recount); the goal is zero.",
		}),
	}
	for _, r := range []string{ErasureDone, ErasureFailed} {
		o.erasures.WithLabelValues(r)
	}
	reg.MustRegister(o.erasures, o.erasedSends, o.inboxPurged, o.recountDrifted)
	return o
}

// Erasure counts an erasure that ended with result.
func (m *Metrics) Erasure(result string) {
	if m != nil {
		m.inboxOps.erasures.WithLabelValues(result).Inc()
	}
}

// ErasureSuppressed counts n sends an erasure suppressed.
func (m *Metrics) ErasureSuppressed(n int) {
	if m != nil && n > 0 {
		m.inboxOps.erasedSends.Add(float64(n))
	}
}

// InboxPurged counts n inbox items purged past their retention.
func (m *Metrics) InboxPurged(n int) {
	if m != nil && n > 0 {
		m.inboxOps.inboxPurged.Add(float64(n))
	}
}

// InboxRecountRepaired counts n counters a recount set right.
func (m *Metrics) InboxRecountRepaired(n int) {
	if m != nil && n > 0 {
		m.inboxOps.recountDrifted.Add(float64(n))
	}
}
