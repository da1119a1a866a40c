package metrics

import "github.com/prometheus/client_golang/prometheus"

// WatchLeader exports whether this process runs the leader's work (the
// sweeps, the watchdog, reconciliation, retention, the purge of old event
// keys, the status look-ups of UNKNOWN deliveries, the store's gauges and
// campaigns' fan-out), read when scraped:
//
//	herald_leader    1 on the process that leads, 0 on the others
//
// isLeader nil means this process always leads (SQLite: herald's one
// process). Summed over a deployment's processes it should be 1; 0 for
// longer than the leader election's interval means no process runs those
// loops (each waits, with its deadline, for a leader). Call it once per
// Metrics.
func (m *Metrics) WatchLeader(isLeader func() bool) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_leader",
		Help: "1 if this process runs the leader's work (sweeps, watchdog, reconciliation, retention, event key purge, status look-ups, store gauges, campaign fan-out), else 0.",
	}, func() float64 {
		if isLeader == nil || isLeader() {
			return 1
		}
		return 0
	}))
}
