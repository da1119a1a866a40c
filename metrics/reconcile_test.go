package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/heraldhq/herald/metrics"
)

// gauges returns name's samples as label value (of its one label, "" for
// none) → value.
func gauges(t *testing.T, m *metrics.Metrics, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range gather(t, m)[name].GetMetric() {
		label := ""
		if l := s.GetLabel(); len(l) == 1 {
			label = l[0].GetValue()
		}
		out[label] = s.GetGauge().GetValue()
	}
	return out
}

func TestReconcileGaugesShowTheLastRunAndZeroBeforeIt(t *testing.T) {
	t.Parallel()
	kinds := []string{"missing_outbox", "lease"}
	var figures metrics.ReconcileFigures
	var failure error
	m := metrics.New(nil)
	m.WatchReconcile(kinds, func(context.Context) (metrics.ReconcileFigures, error) { return figures, failure })

	for _, name := range []string{"herald_reconcile_unowned", "herald_reconcile_repaired"} {
		if got := gauges(t, m, name); len(got) != 2 || got["missing_outbox"] != 0 || got["lease"] != 0 {
			t.Fatalf("%s before the first run: %v, want every kind at 0", name, got)
		}
	}
	if got := gauges(t, m, "herald_reconcile_last_run_timestamp_seconds"); got[""] != 0 || len(got) != 1 {
		t.Fatalf("last run before the first: %v", got)
	}

	finished := time.Date(2026, 12, 1, 10, 0, 0, 500e6, time.UTC)
	figures = metrics.ReconcileFigures{Ran: true, FinishedAt: finished,
		Unowned: map[string]int64{"lease": 2}, Repaired: map[string]int64{"missing_outbox": 3}, Unknown: 4}
	if got := gauges(t, m, "herald_reconcile_unowned"); got["lease"] != 2 || got["missing_outbox"] != 0 {
		t.Fatalf("unowned %v", got)
	}
	if got := gauges(t, m, "herald_reconcile_repaired"); got["missing_outbox"] != 3 || got["lease"] != 0 {
		t.Fatalf("repaired %v", got)
	}
	if got := gauges(t, m, "herald_reconcile_unknown"); got[""] != 4 {
		t.Fatalf("unknown %v", got)
	}
	if got := gauges(t, m, "herald_reconcile_last_run_timestamp_seconds"); got[""] != 1796119200.5 {
		t.Fatalf("last run %v, want %v", got, float64(finished.UnixMilli())/1000)
	}

	failure = errors.New("store down")
	if _, err := m.Registry.Gather(); err == nil {
		t.Fatal("a scrape whose read failed succeeded")
	}
}
