package bench

// Reconciliation over a large PostgreSQL database (issue 8). Both fill a
// fresh database with HERALD_BENCH_NOTIFICATIONS notifications (default
// 1,000,000) by bulk INSERT … SELECT generate_series:
//
//	go test ./bench -run '^$' -bench Reconcile1M -benchtime 3x
//	go test ./bench -run '^$' -bench IntakeWhileReconciling -benchtime 20000x
//
// BenchmarkReconcile1M times one run (herald reconcile's work): paced as
// herald runs it (reconcile.DefaultDuty of its time in the database) and
// unpaced.
// BenchmarkIntakeWhileReconciling measures intake on that database with
// nothing else running, then while reconciliations run back to back.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/reconcile"
	"github.com/heraldhq/herald/store/postgres"
)

// fillAccepted writes n notifications of kind bench with their planned
// sends in the states a busy herald leaves: every tenth with a second (sms)
// send; 93 % PROVIDER_ACCEPTED, 5 % SUPPRESSED, 1.8 % PERMANENT_FAILURE,
// 0.1 % UNKNOWN, each with its outbox row DONE; and a few waiting that no
// claimer takes during the benchmark: 0.02 % RETRY_WAIT due tomorrow (their
// outbox rows PENDING until then) and the newest 1,000 SCHEDULED for
// tomorrow. The database is then vacuumed and analyzed, as autovacuum would
// have done.
func fillAccepted(b *testing.B, url string, n int) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	began := time.Now()
	for _, q := range []string{
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, send_at, created_at)
SELECT 'ntf_fill' || lpad(g::text, 10, '0'), 't' || (g % 10), 'user-' || (g % 50000), 'evt-' || g, 'bench', 'transactional',
       ('{"amount":' || g || '}')::json, CASE WHEN g > $1::integer - 1000 THEN now() + interval '1 day' END,
       now() - interval '30 days' + g * interval '2 seconds'
FROM generate_series(1, $1::integer) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, token, created_at, updated_at)
SELECT n.id, n.id || '.' || c.channel, n.tenant, n.lane, c.channel,
       CASE WHEN n.send_at IS NOT NULL THEN 'PENDING' ELSE 'DONE' END, coalesce(n.send_at, n.created_at), 1,
       n.created_at, n.created_at + interval '1 second'
FROM notifications n CROSS JOIN LATERAL (SELECT 'webhook' AS channel UNION ALL SELECT 'sms' WHERE right(n.id, 1) = '0') c
WHERE $1::integer > 0`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, provider, state, reason, attempts, claimed_at,
                        next_attempt_at, created_at, updated_at)
SELECT o.message_id, o.notification_id, o.tenant, o.channel, 'sim-' || o.channel,
       CASE WHEN x < 0.0002 THEN 'RETRY_WAIT' WHEN x < 0.0012 THEN 'UNKNOWN' WHEN x < 0.0192 THEN 'PERMANENT_FAILURE'
            WHEN x < 0.0692 THEN 'SUPPRESSED' ELSE 'PROVIDER_ACCEPTED' END,
       CASE WHEN x < 0.0002 THEN 'HTTP_429' WHEN x < 0.0012 THEN 'TIMEOUT' WHEN x < 0.0192 THEN 'HTTP_410'
            WHEN x < 0.0692 THEN 'CONSENT_DENIED' ELSE '' END,
       1, o.created_at, CASE WHEN x < 0.0002 THEN now() + interval '1 day' END, o.created_at, o.updated_at
FROM (SELECT o.*, random() AS x FROM outbox o WHERE o.state = 'DONE' AND $1::integer > 0) o`,
		`UPDATE outbox o SET state = 'PENDING', available_at = d.next_attempt_at
FROM deliveries d WHERE d.message_id = o.message_id AND d.state = 'RETRY_WAIT' AND $1::integer > 0`,
	} {
		if _, err := conn.Exec(ctx, q, n); err != nil {
			b.Fatalf("fill: %v", err)
		}
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE notifications, outbox, deliveries`); err != nil {
		b.Fatal(err)
	}
	var size string
	if err := conn.QueryRow(ctx, `SELECT pg_size_pretty(pg_database_size(current_database()))`).Scan(&size); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d notifications in %s (database %s)", n, time.Since(began).Round(time.Second), size)
}

// filledDatabase creates a fresh, migrated database holding
// HERALD_BENCH_NOTIFICATIONS accepted notifications (default 1,000,000)
// and returns its URL and a config for it.
func filledDatabase(b *testing.B) (string, *config.Config) {
	b.Helper()
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("HERALD_BENCH_NOTIFICATIONS")); err == nil && v > 0 {
		n = v
	}
	db := testpg.Database(b)
	if _, err := postgres.Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	fillAccepted(b, db, n)
	return db, benchConfig(b, db, nil)
}

// loadAverage is the machine's load average over the last minute: what
// else ran beside the benchmark.
func loadAverage(b *testing.B) float64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, _, _ := strings.Cut(string(raw), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return -1
	}
	return v
}

// reconciler opens its own store on db and returns cfg's reconciler on it
// with duty (1: unpaced).
func reconciler(b *testing.B, db string, cfg *config.Config, duty float64) *reconcile.Reconciler {
	b.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := postgres.Open(context.Background(), db, postgres.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	r, err := app.Reconciler(cfg, st, app.ReconcileOptions{RunBy: "bench", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	r.Duty = duty
	return r
}

// BenchmarkReconcile1M: one reconciliation of the filled database, paced
// as herald runs it and unpaced; it reports seconds per run and, once,
// what the run counted.
func BenchmarkReconcile1M(b *testing.B) {
	db, cfg := filledDatabase(b)
	for _, c := range []struct {
		name string
		duty float64
	}{{"paced", reconcile.DefaultDuty}, {"unpaced", 1}} {
		b.Run(c.name, func(b *testing.B) {
			r := reconciler(b, db, cfg, c.duty)
			var rep reconcile.Report
			for b.Loop() {
				var err error
				if rep, err = r.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(loadAverage(b), "load1")
			b.Logf("accepted %d, planned sends %d %v, unowned %d, unknown %d", rep.Accepted, rep.PlannedSends, rep.ByState, rep.Unowned, rep.Unknown)
		})
	}
}

// BenchmarkIntakeWhileReconciling: b.N notifications posted by 16 clients
// to a herald on the filled database, as BenchmarkEndToEnd drives it, with
// nothing else running ("idle"), and while reconciliations run back to
// back beside it, paced as herald runs them ("reconciling") and unpaced
// ("reconciling-unpaced"), five times each, alternated. Compare
// accepted/s.
func BenchmarkIntakeWhileReconciling(b *testing.B) {
	db, cfg := filledDatabase(b)
	// The server runs none of its own: the benchmark runs them.
	// The server runs none of its own: the benchmark runs them. A run kept
	// now (which warms the cache as well) tells the server's leader that
	// none is due for a day.
	cfg.ReconcileInterval = config.Duration(24 * time.Hour)
	if _, err := reconciler(b, db, cfg, 1).Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	e := &env{sim: sim.New(sim.Config{Keep: 10})}
	e.bases = []string{startApp(b, cfg, e)}
	// Alternated, so that what else the machine does weighs on both alike.
	for _, c := range []struct {
		name string
		duty float64 // 0: no reconciliation
	}{
		{"idle", 0}, {"reconciling", reconcile.DefaultDuty}, {"idle", 0}, {"reconciling", reconcile.DefaultDuty},
		{"idle", 0}, {"reconciling", reconcile.DefaultDuty}, {"idle", 0}, {"reconciling", reconcile.DefaultDuty},
		{"idle", 0}, {"reconciling", reconcile.DefaultDuty}, {"reconciling-unpaced", 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			e.records.Store(0)
			var runs int
			var wg sync.WaitGroup
			ctx, stop := context.WithCancel(context.Background())
			if c.duty > 0 {
				r := reconciler(b, db, cfg, c.duty)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ; ctx.Err() == nil; runs++ {
						_, _ = r.Run(ctx) // ends with ctx's error when the intake is done
					}
				}()
			}
			drive(b, e)
			stop()
			wg.Wait()
			if c.duty > 0 {
				b.ReportMetric(float64(runs), "runs-started")
			}
			b.ReportMetric(loadAverage(b), "load1")
		})
	}
}
