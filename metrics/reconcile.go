package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReconcileFigures are the last reconciliation run's figures (package
// reconcile), as the reconciliation gauges show them.
type ReconcileFigures struct {
	// Ran is false before the first run; every gauge is then 0.
	Ran        bool
	FinishedAt time.Time
	// Unowned and Repaired are by kind of finding.
	Unowned, Repaired map[string]int64
	Unknown           int64
}

// WatchReconcile exports the reconciliation gauges, read with last when
// scraped, the last run whichever process (or `herald reconcile`) ran it.
// herald's last serves the leader's figures (app's storeGauges): a
// process that does not lead answers ErrNoValue and its scrape leaves them
// out.
//
//	herald_reconcile_unowned{kind}                 what the last run left without an owner
//	herald_reconcile_repaired{kind}                what it repaired
//	herald_reconcile_unknown                       the UNKNOWN deliveries it counted
//	herald_reconcile_last_run_timestamp_seconds    when it finished (0: no run yet)
//
// Every kind is exported from the first scrape, at 0 until a run says
// otherwise. A read that fails fails the scrape, like the backlog's.
func (m *Metrics) WatchReconcile(kinds []string, last func(ctx context.Context) (ReconcileFigures, error)) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(&reconcileCollector{
		kinds: kinds, last: last,
		unowned: prometheus.NewDesc("herald_reconcile_unowned",
			"Planned sends the last reconciliation left with nothing to move them on, by kind of finding; 0 means every accepted notification is accounted for.",
			[]string{"kind"}, nil),
		repaired: prometheus.NewDesc("herald_reconcile_repaired",
			"Findings the last reconciliation repaired (recreated or re-drove), by kind of finding.", []string{"kind"}, nil),
		unknown: prometheus.NewDesc("herald_reconcile_unknown",
			"Deliveries in UNKNOWN the last reconciliation counted: ended, but unsettled.", nil, nil),
		lastRun: prometheus.NewDesc("herald_reconcile_last_run_timestamp_seconds",
			"When the last reconciliation finished, in Unix seconds; 0 before the first.", nil, nil),
	})
}

type reconcileCollector struct {
	kinds                               []string
	last                                func(ctx context.Context) (ReconcileFigures, error)
	unowned, repaired, unknown, lastRun *prometheus.Desc
}

func (c *reconcileCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.unowned
	ch <- c.repaired
	ch <- c.unknown
	ch <- c.lastRun
}

func (c *reconcileCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f, err := c.last(ctx)
	if errors.Is(err, ErrNoValue) {
		return
	}
	if err != nil {
		for _, d := range []*prometheus.Desc{c.unowned, c.repaired, c.unknown, c.lastRun} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
		return
	}
	for _, k := range c.kinds {
		ch <- prometheus.MustNewConstMetric(c.unowned, prometheus.GaugeValue, float64(f.Unowned[k]), k)
		ch <- prometheus.MustNewConstMetric(c.repaired, prometheus.GaugeValue, float64(f.Repaired[k]), k)
	}
	ch <- prometheus.MustNewConstMetric(c.unknown, prometheus.GaugeValue, float64(f.Unknown))
	var at float64
	if f.Ran {
		at = float64(f.FinishedAt.UnixMilli()) / 1000
	}
	ch <- prometheus.MustNewConstMetric(c.lastRun, prometheus.GaugeValue, at)
}
