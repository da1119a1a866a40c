package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/heraldtype"
)

// ReceiptFrom are the states a receipt settles DELIVERED from, the labels
// of herald_receipts_total.
var ReceiptFrom = []heraldtype.DeliveryState{heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryUnknown}

// newReceipts registers herald_receipts_total, each label at 0.
func newReceipts(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_receipts_total",
		Help: "App receipts (POST /v1/me/receipts) that settled a delivery DELIVERED, by the state it was in: PROVIDER_ACCEPTED " +
			"(confirmed) or UNKNOWN (an unsettled delivery settled by its receipt; reconciliation no longer counts it unknown).",
	}, []string{"from"})
	for _, s := range ReceiptFrom {
		c.WithLabelValues(string(s))
	}
	reg.MustRegister(c)
	return c
}

// Receipt counts a receipt that settled a delivery DELIVERED from state
// from (one of ReceiptFrom); a receipt that changed nothing is not counted.
func (m *Metrics) Receipt(from heraldtype.DeliveryState) {
	if m != nil {
		m.receipts.WithLabelValues(string(from)).Inc()
	}
}
