// Package bench measures herald end to end, in process, over real HTTP:
//
//	go test ./bench -run '^$' -bench . -benchtime 20000x   # throughput
//	go test ./bench -run '^$' -bench IdleLatency -benchtime 500x
//
// HERALD_BENCH_DATABASE selects the store (default: a fresh SQLite file).
// HERALD_BENCH_INSTANCES=2 runs two herald instances on that database (each
// with its own store, pool, claimers, sweeps and listener, as two processes
// would have), and the clients spread their requests over both.
// HERALD_BENCH_PROVIDER_MS gives the simulated provider of the end-to-end
// runs an answer time (BenchmarkEndToEnd, …Inbox, …RabbitMQ: 0 ms unless
// set). HERALD_BENCH_CHART_DIR has the isolation and fairness runs draw their
// latency and backlog over time there as SVG (package bench/chart); unset,
// they draw nothing.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
)

type env struct {
	bases []string
	sim   *sim.Sim
	// providers replace providers of the development config by name
	// (sim-webhook is the simulator unless replaced here).
	providers map[string]provider.Provider
	records   atomic.Int64
	// called receives the time of each provider call, when set.
	called chan time.Time
}

// start runs an in-process herald with a 0 ms simulated webhook provider.
// With trackCalls, every provider call's time is sent on e.called.
func start(b *testing.B, trackCalls bool) *env {
	b.Helper()
	return startWith(b, trackCalls, nil)
}

// startWith is start with adjust applied to the config (benchConfig).
func startWith(b *testing.B, trackCalls bool, adjust func(*config.Config)) *env {
	b.Helper()
	return startEnv(b, &env{}, trackCalls, adjust)
}

// startWithProvider is startWith with p, not the simulator, as the
// provider the development config calls name.
func startWithProvider(b *testing.B, name string, p provider.Provider, adjust func(*config.Config)) *env {
	b.Helper()
	return startEnv(b, &env{providers: map[string]provider.Provider{name: p}}, false, adjust)
}

func (e *env) providerSet() map[string]provider.Provider {
	set := map[string]provider.Provider{"sim-webhook": e.sim}
	for name, p := range e.providers {
		set[name] = p
	}
	return set
}

func startEnv(b *testing.B, e *env, trackCalls bool, adjust func(*config.Config)) *env {
	b.Helper()
	if trackCalls {
		e.called = make(chan time.Time, 1)
	}
	db := os.Getenv("HERALD_BENCH_DATABASE")
	if db == "" {
		db = "sqlite:" + filepath.Join(b.TempDir(), "bench.db")
	}
	cfg := benchConfig(b, db, adjust)
	e.sim = sim.New(sim.Config{Latency: providerDelay()})
	e.sim.OnCall(func(context.Context, provider.Message) provider.Outcome {
		if e.called != nil {
			e.called <- time.Now()
		}
		return provider.Outcome{}
	})
	instances := 1
	if v, err := strconv.Atoi(os.Getenv("HERALD_BENCH_INSTANCES")); err == nil && v > 1 {
		instances = v
	}
	for range instances {
		e.bases = append(e.bases, startApp(b, cfg, e))
	}
	return e
}

// benchConfig is the development config on database with one transactional
// kind on a webhook; adjust changes it before it is validated.
func benchConfig(b *testing.B, database string, adjust func(*config.Config)) *config.Config {
	b.Helper()
	cfg := config.Dev()
	cfg.Database = database
	cfg.Kinds = []config.Kind{{
		Name: "bench", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "Paid", Body: "Paid {{.amount}} won"}},
	}}
	concurrency := 64
	if providerDelay() > 0 {
		concurrency = 512
	}
	cfg.Lanes = map[string]config.Lane{"transactional": {Concurrency: concurrency}}
	// HERALD_BENCH_CLAIM_COOLDOWN sets claim_cooldown ("-1ns": none), to
	// set a run beside one with the default.
	if d, err := time.ParseDuration(os.Getenv("HERALD_BENCH_CLAIM_COOLDOWN")); err == nil {
		cfg.ClaimCooldown = config.Duration(d)
	}
	if adjust != nil {
		adjust(cfg)
	}
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	return cfg
}

// providerDelay is HERALD_BENCH_PROVIDER_MS, the simulated provider's
// answer time in the end-to-end runs (default 0). With a delay the bench
// kind's lane sends 512 at once, as the providers runs do: 64 at 100 ms
// would cap a run at 640/s.
func providerDelay() time.Duration {
	ms, _ := strconv.Atoi(os.Getenv("HERALD_BENCH_PROVIDER_MS"))
	return time.Duration(max(ms, 0)) * time.Millisecond
}

// startApp runs one herald instance and returns its base URL.
func startApp(b *testing.B, cfg *config.Config, e *env) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, app.Options{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Providers: e.providerSet(),
		Listener:  l,
		Hooks: sender.Hooks{AfterRecord: func(_ context.Context, _ heraldtype.Job, r sender.Result) {
			if r.State == heraldtype.DeliveryProviderAccepted {
				e.records.Add(1)
			}
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	a.WarmUp(context.Background()) // as herald serve does
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	base := "http://" + l.Addr().String()
	awaitReady(b, base)
	return base
}

// awaitReady waits until base answers GET /readyz with 200: the store and,
// on the rabbitmq transport, the broker's publishers and consumers are
// connected, so no run times a herald that is still starting (the
// RabbitMQ fairness run's idle p99 counted its first seconds).
func awaitReady(b *testing.B, base string) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := httpClient.Get(base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("herald at %s was not ready after 60s (last: %v)", base, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}

func post(base string, i int) error {
	// The key is the event too: a run's events are new even on a database an
	// earlier run filled (a second notification of one is a duplicate event).
	key := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
	_, err := postEvent(base, benchKey, key, fmt.Sprintf("user-%d", i%1000), i)
	return err
}

// postEvent posts one bench notification of event (its Idempotency-Key
// too) for recipient with apiKey and returns its id.
func postEvent(base, apiKey, event, recipient string, amount int) (string, error) {
	return postScoped(base, apiKey, event, recipient, "", amount)
}

// postScoped is postEvent with the notification's scope ("" none).
func postScoped(base, apiKey, event, recipient, scope string, amount int) (string, error) {
	body := fmt.Appendf(nil, `{"recipient":"%s","event_id":"%s","kind":"bench","params":{"amount":%d}}`, recipient, event, amount)
	if scope != "" {
		body = fmt.Appendf(body[:len(body)-1], `,"scope":"%s"}`, scope)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/notifications", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", event)
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, out)
	}
	i := bytes.Index(out, []byte(`"id":"`))
	if i < 0 {
		return "", fmt.Errorf("no id in %s", out)
	}
	id := out[i+6:]
	return string(id[:bytes.IndexByte(id, '"')]), nil
}

// BenchmarkEndToEnd: b.N notifications posted by 16 concurrent clients, timed
// from the first POST until the last delivery is recorded PROVIDER_ACCEPTED,
// with the CPU per notification of herald's process (its HTTP clients
// included) and, on a local PostgreSQL, of its backends (cpuSplit).
func BenchmarkEndToEnd(b *testing.B) {
	e := start(b, false)
	cpu := startCPUSplit(b, os.Getenv("HERALD_BENCH_DATABASE"), "")
	drive(b, e)
	cpu.report(b.N, "notification")
}

// BenchmarkEndToEndInbox is BenchmarkEndToEnd with the inbox channel added
// to the kind: every notification also writes an inbox item, bumps its
// recipient's counter and ends its inbox send STORED in intake's
// transaction (and signals the inbox). Compare with BenchmarkEndToEnd.
func BenchmarkEndToEndInbox(b *testing.B) {
	drive(b, startWith(b, false, withInbox(config.Template{Title: "Paid", Body: "Paid {{.amount}} won"})))
}

// BenchmarkEndToEndInboxLocales is BenchmarkEndToEndInbox with the inbox
// text given per locale, so each create chooses by the recipient's
// profile language, read in its transaction.
func BenchmarkEndToEndInboxLocales(b *testing.B) {
	drive(b, startWith(b, false, withInbox(config.Template{Locales: map[string]config.Template{
		"ko":      {Title: "결제 완료", Body: "{{.amount}}원이 결제되었습니다"},
		"default": {Title: "Paid", Body: "Paid {{.amount}} won"},
	}})))
}

// withInbox adds the inbox channel, with text as its template, to the
// bench kind (benchConfig's one kind).
func withInbox(text config.Template) func(*config.Config) {
	return func(cfg *config.Config) {
		k := &cfg.Kinds[0]
		k.Channels = append(k.Channels, "inbox")
		k.Templates["inbox"] = text
	}
}

// drive posts b.N notifications from 16 concurrent clients, spread over the
// instances, and reports the rate from the first POST until the last
// delivery is recorded PROVIDER_ACCEPTED, and the intake rate alone.
func drive(b *testing.B, e *env) {
	b.ResetTimer()
	began := time.Now()
	drivePosts(b, e)
	intake := time.Since(began)
	deadline := time.Now().Add(10 * time.Minute)
	for e.records.Load() < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("recorded %d of %d", e.records.Load(), b.N)
		}
		time.Sleep(time.Millisecond)
	}
	total := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/total.Seconds(), "notifications/s")
	b.ReportMetric(float64(b.N)/intake.Seconds(), "accepted/s")
}

// drivePosts posts b.N notifications from 16 concurrent clients, spread
// over the instances, and returns once every one is accepted.
func drivePosts(b *testing.B, e *env) {
	const clients = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := post(e.bases[int(i)%len(e.bases)], int(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkIdleLatency: one notification at a time on an idle server; the
// time from receiving the 202 to the provider call, as p50 and p99.
func BenchmarkIdleLatency(b *testing.B) {
	e := start(b, true)
	lat := make([]time.Duration, 0, b.N)
	// Warm up the connection and the store.
	if err := post(e.bases[0], -1); err != nil {
		b.Fatal(err)
	}
	<-e.called
	b.ResetTimer()
	for i := range b.N {
		time.Sleep(5 * time.Millisecond) // let the server go idle between sends
		if err := post(e.bases[0], i); err != nil {
			b.Fatal(err)
		}
		accepted := time.Now()
		called := <-e.called
		lat = append(lat, max(called.Sub(accepted), 0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(1.00), "max-ms")
}
