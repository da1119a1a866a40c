package peers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store/postgres"
)

// goroutines enqueue side by side, one transaction per item, in every
// Go API benchmark.
const goroutines = 8

// BenchmarkGoAPIHerald: b.N notifications enqueued with Client.Enqueue
// (one transaction each) from 8 goroutines into a running herald on the
// same database, timed until the last is recorded PROVIDER_ACCEPTED by a
// 0 ms provider.
func BenchmarkGoAPIHerald(b *testing.B) { benchHerald(b, 0) }

// BenchmarkGoAPIHeraldWakeEach is BenchmarkGoAPIHerald with a wake-up
// NOTIFY in every enqueue's transaction (WakeEvery < 0), herald's Go API
// before it throttled them.
func BenchmarkGoAPIHeraldWakeEach(b *testing.B) { benchHerald(b, -1) }

// BenchmarkGoAPIRiver: b.N no-op jobs inserted with River's Insert (one
// transaction each) from 8 goroutines into a running River client with 64
// workers and a 10 ms fetch cooldown on the same server, timed until the
// last is worked.
func BenchmarkGoAPIRiver(b *testing.B) {
	ctx := context.Background()
	pool, _ := database(b)
	lat := newLatencies(b.N)
	var worked atomic.Int64
	client := riverClient(b, pool, func(job *river.Job[noopArgs]) {
		lat.end(fmt.Sprint(job.ID))
		worked.Add(1)
	})
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer stopRiver(client)
	b.ResetTimer()
	began := time.Now()
	enqueue(b, goroutines, func(i int) error {
		res, err := client.Insert(ctx, noopArgs{N: i}, nil)
		if err == nil {
			lat.begin(fmt.Sprint(res.Job.ID))
		}
		return err
	})
	enqueued := time.Now()
	wait(b, &worked)
	report(b, began, enqueued, lat, "jobs/s")
}

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done func(*river.Job[noopArgs])
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	w.done(job)
	return nil
}

// riverClient migrates River's schema on pool and returns a client, not
// yet started, whose no-op worker calls done for each job. It is tuned as
// herald is: 64 workers (herald's lane concurrency here), and a fetch
// cooldown of 10 ms, which is also River's insert-notification throttle
// (herald's WakeEvery); River's default, 100 ms, caps 64 workers at 640
// jobs/s.
func riverClient(b *testing.B, pool *pgxpool.Pool, done func(*river.Job[noopArgs])) *river.Client[pgx.Tx] {
	b.Helper()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(context.Background(), rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: done})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 64}},
		FetchCooldown: 10 * time.Millisecond,
		Workers:       workers,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	return client
}

// stopRiver stops a started client, waiting up to a minute.
func stopRiver(client *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = client.Stop(ctx)
}

func benchHerald(b *testing.B, wakeEvery time.Duration) {
	ctx := context.Background()
	lat := newLatencies(b.N)
	h := startHerald(b, func(m provider.Message) { lat.end(strings.TrimSuffix(m.MessageID, ".webhook")) })
	pool, cfg := h.pool, h.cfg
	client, err := herald.NewClient(herald.Options{Kinds: cfg.Kinds, WakeEvery: wakeEvery})
	if err != nil {
		b.Fatal(err)
	}
	run := time.Now().UnixNano()
	b.ResetTimer()
	began := time.Now()
	enqueue(b, goroutines, func(i int) error {
		e, err := client.Enqueue(ctx, pool, herald.Intent{
			Tenant: config.DevTenant, Recipient: fmt.Sprintf("user-%d", i%1000), EventID: fmt.Sprintf("e-%d-%d", run, i),
			Kind: "bench", Params: map[string]any{"amount": i}, DedupKey: fmt.Sprintf("bench-%d-%d", run, i),
		})
		if err == nil {
			lat.begin(e.ID)
		}
		return err
	})
	enqueued := time.Now()
	wait(b, &h.recorded)
	report(b, began, enqueued, lat, "notifications/s")
}

// heraldRun is a herald running on a database of its own until the
// benchmark ends: the bench kind (transactional, a webhook) to a 0 ms
// simulated provider, 64 sends in flight, the db transport.
type heraldRun struct {
	pool     *pgxpool.Pool
	cfg      *config.Config
	base     string       // its HTTP API
	recorded atomic.Int64 // sends recorded PROVIDER_ACCEPTED
}

// startHerald migrates a new database (database) and runs herald on it;
// onCall, when set, sees every provider call.
func startHerald(b *testing.B, onCall func(provider.Message)) *heraldRun {
	b.Helper()
	ctx := context.Background()
	pool, url := database(b)
	if _, err := postgres.Migrate(ctx, url); err != nil {
		b.Fatal(err)
	}
	cfg := config.Dev()
	cfg.Database = url
	cfg.Kinds = []config.Kind{{
		Name: "bench", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "Paid", Body: "Paid {{.amount}} won"}},
	}}
	cfg.Lanes = map[string]config.Lane{"transactional": {Concurrency: 64}}
	// HERALD_BENCH_CLAIM_COOLDOWN sets claim_cooldown ("-1ns": none), as
	// in bench.
	if d, err := time.ParseDuration(os.Getenv("HERALD_BENCH_CLAIM_COOLDOWN")); err == nil {
		cfg.ClaimCooldown = config.Duration(d)
	}
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	h := &heraldRun{pool: pool, cfg: cfg}
	s := sim.New(sim.Config{})
	if onCall != nil {
		s.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
			onCall(m)
			return provider.Outcome{}
		})
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	a, err := app.New(ctx, cfg, app.Options{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Providers: map[string]provider.Provider{"sim-webhook": s},
		Listener:  l,
		Hooks: sender.Hooks{AfterRecord: func(_ context.Context, _ heraldtype.Job, r sender.Result) {
			if r.State == heraldtype.DeliveryProviderAccepted {
				h.recorded.Add(1)
			}
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	a.WarmUp(ctx) // as herald serve does
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	b.Cleanup(func() { // before database's clean-up drops the database
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	h.base = "http://" + l.Addr().String()
	return h
}

// database creates a database of its own on the benchmark's server and
// returns a pool on it and its URL; both go when the benchmark ends.
func database(b *testing.B) (*pgxpool.Pool, string) {
	b.Helper()
	ctx := context.Background()
	base := os.Getenv("HERALD_BENCH_POSTGRES_URL")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		b.Skipf("no PostgreSQL at %s: %v", base, err)
	}
	name := fmt.Sprintf("peers_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	u, err := neturl.Parse(base)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 2 * goroutines
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		pool.Close()
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(ctx)
	})
	return pool, u.String()
}

// enqueue runs one(i) for i in 1..b.N from workers goroutines.
func enqueue(b *testing.B, workers int, one func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := one(int(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// wait waits until n reaches b.N.
func wait(b *testing.B, n *atomic.Int64) {
	deadline := time.Now().Add(10 * time.Minute)
	for n.Load() < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d done after 10 minutes", n.Load(), b.N)
		}
		time.Sleep(time.Millisecond)
	}
}

func report(b *testing.B, began, enqueued time.Time, lat *latencies, unit string) {
	total := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/total.Seconds(), unit)
	b.ReportMetric(float64(b.N)/enqueued.Sub(began).Seconds(), "enqueued/s")
	p50, p99 := lat.percentiles()
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
}

// latencies pairs each item's commit (the enqueue call returned) with its
// end (the provider call, the job's work).
type latencies struct {
	mu    sync.Mutex
	begun map[string]time.Time
	early map[string]time.Time // ended before begin was noted
	took  []time.Duration
}

func newLatencies(n int) *latencies {
	return &latencies{begun: make(map[string]time.Time, n), early: map[string]time.Time{}, took: make([]time.Duration, 0, n)}
}

func (l *latencies) begin(id string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if end, ok := l.early[id]; ok {
		delete(l.early, id)
		l.took = append(l.took, max(0, end.Sub(now)))
		return
	}
	l.begun[id] = now
}

func (l *latencies) end(id string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, ok := l.begun[id]; ok {
		delete(l.begun, id)
		l.took = append(l.took, now.Sub(at))
		return
	}
	l.early[id] = now
}

func (l *latencies) percentiles() (p50, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.took) == 0 {
		return 0, 0
	}
	s := slices.Clone(l.took)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}
