package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/heraldtype"
)

// newDevicesDeactivated registers herald_devices_deactivated_total, its
// usual reason at 0.
func newDevicesDeactivated(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_devices_deactivated_total",
		Help: "Push devices the sender deactivated because the provider said the token is dead, by the answer's reason code " +
			"(UNREGISTERED; HTTP_410 from a webhook). A steady rate is apps uninstalled; a burst is worth a look at the provider.",
	}, []string{"reason"})
	c.WithLabelValues(heraldtype.ReasonUnregistered)
	reg.MustRegister(c)
	return c
}

// DeviceDeactivated counts a device the sender deactivated, with the
// provider's reason code (a stable, low-cardinality code).
func (m *Metrics) DeviceDeactivated(reason string) {
	if m != nil {
		m.devicesDeactivated.WithLabelValues(reason).Inc()
	}
}
