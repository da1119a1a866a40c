package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/reconcile"
)

const operatorKey = "ops-key"

// reconcileConfig is the development config on database with an operator
// key and the reconciliation interval given.
func reconcileConfig(t *testing.T, database string, interval time.Duration) *config.Config {
	t.Helper()
	return testConfig(t, database, func(c *config.Config) {
		c.OperatorKeys = []string{operatorKey}
		c.ReconcileInterval = config.Duration(interval)
		// The leader recomputes the store's gauges this often (gauges.go).
		c.Metrics.RefreshInterval = config.Duration(interval)
	})
}

// startHerald runs herald on cfg until stop (or the test's end) and returns
// its base URL.
func startHerald(t *testing.T, cfg *config.Config) (base string, stop func()) {
	t.Helper()
	a, base := newHerald(t, cfg, app.Options{})
	return base, runHerald(t, a)
}

// get calls base+path with the bearer key (none when key is "") and
// returns the status and body.
func get(t *testing.T, base, path, key string) (int, []byte) {
	t.Helper()
	return call(t, base, http.MethodGet, path, key, "")
}

// lastReport waits until GET /v1/ops/reconcile answers a report for which
// ok holds, and returns it.
func lastReport(t *testing.T, base, what string, ok func(reconcile.Report) bool) reconcile.Report {
	t.Helper()
	var rep reconcile.Report
	testenv.WaitFor(t, what, testenv.Patience, func() bool {
		code, body := get(t, base, "/v1/ops/reconcile", operatorKey)
		if code != http.StatusOK {
			return false
		}
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatalf("report %s: %v", body, err)
		}
		return ok(rep)
	})
	return rep
}

// A running herald reconciles at start and then every interval, and shows
// the last report to the operator (GET /v1/ops/reconcile) and in /metrics.
func TestServerReconcilesAndShowsTheOperator(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			database := driverDatabase(t, driver)
			base, _ := startHerald(t, reconcileConfig(t, database, 200*time.Millisecond))
			first := lastReport(t, base, "the run at start", func(r reconcile.Report) bool { return true })
			if !strings.HasPrefix(first.RunBy, "server ") || !first.Accounted() {
				t.Fatalf("first report %+v, want the server's, accounted", first)
			}
			lastReport(t, base, "a run one interval later", func(r reconcile.Report) bool { return r.StartedAt.After(first.StartedAt) })

			if code, _ := get(t, base, "/v1/ops/reconcile", config.DevAPIKey); code != http.StatusForbidden {
				t.Fatalf("an API key on /v1/ops/reconcile: %d, want 403", code)
			}
			if code, _ := get(t, base, "/v1/notifications", operatorKey); code != http.StatusUnauthorized {
				t.Fatalf("the operator key on /v1/notifications: %d, want 401", code)
			}
			// The leader's gauges follow within a refresh interval.
			wants := []string{`herald_reconcile_unowned{kind="missing_outbox"} 0`, `herald_reconcile_repaired{kind="lease"} 0`,
				"herald_reconcile_unknown 0", "herald_reconcile_last_run_timestamp_seconds 1"}
			testenv.WaitFor(t, "/metrics to show the last reconciliation", testenv.Patience, func() bool {
				_, metrics := get(t, base, "/metrics", "")
				for _, want := range wants {
					if !strings.Contains(string(metrics), want) {
						return false
					}
				}
				return true
			})
		})
	}
}

// Of two herald processes on one PostgreSQL database only the leader
// reconciles: the second, whose interval would have it run every 50 ms,
// runs only once the first has stopped and it has taken the lead.
func TestOnlyTheLeaderReconciles(t *testing.T) {
	t.Parallel()
	database := testpg.Schema(t)
	// A checks every second (a tenth of its interval) whether it leads yet.
	baseA, stopA := startHerald(t, reconcileConfig(t, database, 10*time.Second))
	a := lastReport(t, baseA, "the first process's run at start", func(reconcile.Report) bool { return true })
	baseB, _ := startHerald(t, reconcileConfig(t, database, 50*time.Millisecond))
	testenv.WaitFor(t, "the second process to be ready", testenv.Patience, func() bool {
		code, _ := get(t, baseB, "/readyz", "")
		return code == http.StatusOK
	})
	// Several of B's checks (every 10 ms) pass while A leads.
	for range 5 {
		if got := lastReport(t, baseB, "the report through the second process", func(reconcile.Report) bool { return true }); got.RunBy != a.RunBy {
			t.Fatalf("a run by %q while %q leads", got.RunBy, a.RunBy)
		}
	}
	// A gives up the lead during its stop, which goes on after that (CI
	// saw B run 27 ms before stopA returned): B's run must come after the
	// stop began.
	stopping := time.Now()
	stopA()
	b := lastReport(t, baseB, "the second process's run after it took the lead", func(r reconcile.Report) bool { return r.RunBy != a.RunBy })
	if b.StartedAt.Before(stopping) {
		t.Fatalf("the second process ran at %s, before the first began to stop at %s", b.StartedAt, stopping)
	}
}
