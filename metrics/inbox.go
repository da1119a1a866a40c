package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/heraldtype"
)

// ReceiptFrom are the states a receipt settles DELIVERED from, the labels
// of herald_receipts_total.
var ReceiptFrom = []heraldtype.DeliveryState{heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryUnknown}

// The results herald_erasures_total counts.
const (
	ErasureDone   = "done"
	ErasureFailed = "failed"
)

// inbox are the counters of the recipient inbox and of personal data: the
// apps' receipts (package inbox), the devices the sender deactivated,
// erasures (package erasure), the retention purge (package retention) and
// recounts of the unread counters (package recount). The live streams'
// metrics are in stream.go.
type inbox struct {
	receipts           *prometheus.CounterVec
	devicesDeactivated *prometheus.CounterVec
	erasures           *prometheus.CounterVec
	erasedSends        prometheus.Counter
	purged             prometheus.Counter
	recountRepaired    prometheus.Counter
}

// newInbox registers the inbox's counters on reg, each label at 0.
func newInbox(reg *prometheus.Registry) *inbox {
	i := &inbox{
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_receipts_total",
			Help: "App receipts (POST /v1/me/receipts) that settled a delivery DELIVERED, by the state it was in: PROVIDER_ACCEPTED " +
				"(confirmed) or UNKNOWN (an unsettled delivery settled by its receipt; reconciliation no longer counts it unknown).",
		}, []string{"from"}),
		devicesDeactivated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_devices_deactivated_total",
			Help: "Push devices the sender deactivated because the provider said the token is dead, by the answer's reason code " +
				"(UNREGISTERED; HTTP_410 from a webhook). A steady rate is apps uninstalled; a burst is worth a look at the provider.",
		}, []string{"reason"}),
		erasures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_erasures_total",
			Help: "Recipient erasures (DELETE /v1/recipients/{recipient}) by result: done (every batch committed) or failed (a batch failed; the batches before it stay erased).",
		}, []string{"result"}),
		erasedSends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_erasure_suppressed_total",
			Help: "Waiting sends that an erasure ended SUPPRESSED(ERASED) (also counted in herald_deliveries_total).",
		}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_inbox_purged_total",
			Help: "Inbox items the leader deleted past their tenant's retention.",
		}),
		recountRepaired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_inbox_recount_repaired_total",
			Help: "Unread counters a recount found wrong and set right (herald inbox recount, POST /v1/ops/inbox/recount); the goal is zero.",
		}),
	}
	for _, s := range ReceiptFrom {
		i.receipts.WithLabelValues(string(s))
	}
	i.devicesDeactivated.WithLabelValues(heraldtype.ReasonUnregistered)
	for _, r := range []string{ErasureDone, ErasureFailed} {
		i.erasures.WithLabelValues(r)
	}
	reg.MustRegister(i.receipts, i.devicesDeactivated, i.erasures, i.erasedSends, i.purged, i.recountRepaired)
	return i
}

// Receipt counts a receipt that settled a delivery DELIVERED from state
// from (one of ReceiptFrom); a receipt that changed nothing is not counted.
func (m *Metrics) Receipt(from heraldtype.DeliveryState) {
	if m != nil {
		m.inbox.receipts.WithLabelValues(string(from)).Inc()
	}
}

// DeviceDeactivated counts a device the sender deactivated, with the
// provider's reason code (a stable, low-cardinality code).
func (m *Metrics) DeviceDeactivated(reason string) {
	if m != nil {
		m.inbox.devicesDeactivated.WithLabelValues(reason).Inc()
	}
}

// Erasure counts an erasure that ended with result.
func (m *Metrics) Erasure(result string) {
	if m != nil {
		m.inbox.erasures.WithLabelValues(result).Inc()
	}
}

// ErasureSuppressed counts n sends an erasure suppressed.
func (m *Metrics) ErasureSuppressed(n int) {
	if m != nil && n > 0 {
		m.inbox.erasedSends.Add(float64(n))
	}
}

// InboxPurged counts n inbox items purged past their retention.
func (m *Metrics) InboxPurged(n int) {
	if m != nil && n > 0 {
		m.inbox.purged.Add(float64(n))
	}
}

// InboxRecountRepaired counts n counters a recount set right.
func (m *Metrics) InboxRecountRepaired(n int) {
	if m != nil && n > 0 {
		m.inbox.recountRepaired.Add(float64(n))
	}
}
