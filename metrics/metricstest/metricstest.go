// Package metricstest reads herald's metrics back in tests.
package metricstest

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/metrics"
)

// Series reads the counter or gauge name from m's registry as the values
// of its labels keys, joined by "/", → value. A series not exported is
// absent.
func Series(t testing.TB, m *metrics.Metrics, name string, keys ...string) map[string]float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range s.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			vals := make([]string, len(keys))
			for i, k := range keys {
				vals[i] = l[k]
			}
			v := s.GetCounter().GetValue()
			if g := s.GetGauge(); g != nil {
				v = g.GetValue()
			}
			out[strings.Join(vals, "/")] = v
		}
	}
	return out
}

// Deliveries reads herald_deliveries_total as "lane/channel/state" → value.
func Deliveries(t testing.TB, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	return Series(t, m, "herald_deliveries_total", "lane", "channel", "state")
}
