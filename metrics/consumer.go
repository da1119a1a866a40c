package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/heraldtype"
)

// consumers show the rabbitmq transport's consumers: each queue's broker
// prefetch in messages, which follows the jobs its messages carry
// (broker/rabbitmq, "Prefetch follows the bundles").
type consumers struct {
	prefetch *prometheus.GaugeVec
}

func newConsumers(reg *prometheus.Registry) *consumers {
	c := &consumers{
		prefetch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herald_consumer_prefetch_messages",
			Help: "The broker prefetch, in messages, of this process's rabbitmq consumer of each lane's queue (queue: lane or express); " +
				"it follows the jobs a message carries, so that the consumer holds rabbitmq.prefetch jobs and two messages more.",
		}, []string{"lane", "queue"}),
	}
	reg.MustRegister(c.prefetch)
	return c
}

// ConsumerPrefetch records the prefetch, in messages, of the lane's
// consumer of queue ("lane" or "express").
func (m *Metrics) ConsumerPrefetch(l heraldtype.Lane, queue string, messages int) {
	if m != nil {
		m.consumers.prefetch.WithLabelValues(string(l), queue).Set(float64(messages))
	}
}
