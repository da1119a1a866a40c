package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/bench/chart"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
)

// fairKeyB is the second tenant's API key in BenchmarkFairness.
const fairKeyB = "bench-key-tenant-b"

// BenchmarkFairness is issue 12's fairness run inside one lane: tenant B
// sends 20 notifications a second for 10 s on an idle herald (after a
// second of them unmeasured, to warm it up), then tenant
// A posts a backlog of 20,000 (HERALD_BENCH_FAIR_BACKLOG) transactional
// notifications to a 100 ms provider (64 sends in flight) and B sends its
// 20 a second again while A's backlog drains. It reports B's latency from
// POST to the provider call, idle and beside A's backlog (p50, p99, max):
// the aim is B's p99 within 2× its idle p99 and ≤ 250 ms. Claims used to
// go oldest first across tenants, which held B behind A's whole backlog
// (61.9 s p99 measured before claims were shared between tenants).
// Run it once: -benchtime 1x. With HERALD_BENCH_CHART_DIR it draws each of
// B's sends and A's backlog over time in fairness-<store>.svg there.
func BenchmarkFairness(b *testing.B) { fairness(b, false, false) }

// BenchmarkFairnessScopes is BenchmarkFairness inside one tenant: the
// backlog is the tenant's scope clinic-a, the sends at 20 a second its
// scope clinic-b (a notification's "scope"). The claim shares the
// tenant's turns between its scopes as it shares a lane between tenants.
// With HERALD_BENCH_CHART_DIR it draws fairness-scopes-<store>.svg
// (fairness-scopes-<store>-rabbitmq.svg on RabbitMQ).
func BenchmarkFairnessScopes(b *testing.B) { fairness(b, false, true) }

// BenchmarkFairnessRabbitMQ is BenchmarkFairness on the rabbitmq transport
// (the machine's RabbitMQ, a fresh vhost): the relays' publish window
// keeps A's backlog in the outbox, where claims are shared, rather than
// in the lane queue's one FIFO, and B's rows, B having no backlog, go to
// the lane's express queue, past A's messages ready in the lane queue.
func BenchmarkFairnessRabbitMQ(b *testing.B) { fairness(b, true, false) }

// BenchmarkFairnessScopesRabbitMQ is BenchmarkFairnessScopes on the
// rabbitmq transport: clinic-b's rows go to the express queue while only
// clinic-a, its tenant's other scope, has a backlog.
func BenchmarkFairnessScopesRabbitMQ(b *testing.B) { fairness(b, true, true) }

// fairParty is who sends in a fairness run: the API key, and the scope
// and recipient its notifications name.
type fairParty struct{ key, scope, recipient string }

func fairness(b *testing.B, rabbit, scoped bool) {
	// A and B are two tenants, or with scoped two scopes of one tenant.
	partyA, partyB := fairParty{config.DevAPIKey, "", "user-1"}, fairParty{fairKeyB, "", "user-1"}
	if scoped {
		partyA, partyB = fairParty{config.DevAPIKey, "clinic-a", "user-1"}, fairParty{config.DevAPIKey, "clinic-b", "user-b"}
	}
	isB := func(m provider.Message) bool { return m.Tenant == "tenant-b" }
	if scoped {
		isB = func(m provider.Message) bool { return m.Recipient == partyB.recipient }
	}
	backlog := 20_000
	if v, err := strconv.Atoi(os.Getenv("HERALD_BENCH_FAIR_BACKLOG")); err == nil && v > 0 {
		backlog = v
	}
	lat := &fairLatencies{begun: map[string]time.Time{}, ended: map[string]time.Time{}}
	var calls, callsA, postedA atomic.Int64
	s := sim.New(sim.Config{Latency: providerLatency})
	s.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
		calls.Add(1)
		if isB(m) {
			lat.end(strings.TrimSuffix(m.MessageID, ".webhook"))
		} else {
			callsA.Add(1)
		}
		return provider.Outcome{}
	})
	e := startWithProvider(b, "sim-webhook", s, func(cfg *config.Config) {
		cfg.APIKeys = append(cfg.APIKeys, config.APIKey{Key: fairKeyB, Tenant: "tenant-b"})
		cfg.Lanes = map[string]config.Lane{"transactional": {Concurrency: 64}}
		if rabbit {
			cfg.Transport, cfg.RabbitMQURL = "rabbitmq", testmq.VHost(b)
			cfg.RabbitMQ.RelayBundle = relayBundle()
			// HERALD_BENCH_PUBLISH_WINDOW=-1 runs it without the window,
			// as the relay published before it had one.
			if w, err := strconv.Atoi(os.Getenv("HERALD_BENCH_PUBLISH_WINDOW")); err == nil {
				cfg.RabbitMQ.PublishWindow = w
			}
		}
	})
	base := e.bases[0]
	// B's first sends on a new herald pay for its start: each statement
	// prepared on each connection at first use, the claims' plans made
	// (on PostgreSQL the first took 128 ms, the second 43 ms, which with
	// 200 samples was B's idle p99). A second of B's sends goes first,
	// unmeasured and off the chart, so idle means idle.
	const warmUp = 20
	fairSmallTenant(b, base, partyB, lat, "warm-up", warmUp)
	b.ResetTimer()
	for range b.N {
		// The chart's backlog is A's notifications accepted and not yet
		// sent: two counters, read four times a second.
		runBegan := time.Now()
		var backlogs *backlogSampler
		var note string
		if chartDir() != "" {
			note = machineNote()
			backlogs = sampleBacklog(runBegan, func() int64 { return postedA.Load() - callsA.Load() })
		}
		idle := fairSmallTenant(b, base, partyB, lat, "idle", 200)
		var next atomic.Int64
		var wg sync.WaitGroup
		began := time.Now()
		for range 16 {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > int64(backlog) {
						return
					}
					if _, err := postScoped(base, partyA.key, fmt.Sprintf("a-%d-%d", began.UnixNano(), i), partyA.recipient, partyA.scope, 1); err != nil {
						b.Error(err)
						return
					}
					postedA.Add(1)
				}
			})
		}
		wg.Wait()
		b.Logf("tenant A posted %d in %s; %d provider calls so far", backlog, time.Since(began).Round(time.Millisecond), calls.Load())
		busyBegan := time.Now()
		busy := fairSmallTenant(b, base, partyB, lat, "busy", 200)
		left := int64(backlog) + warmUp + 400 - calls.Load()
		b.Logf("tenant B's second run ended with %d of A's notifications not yet sent", left)
		if left <= 0 {
			b.Logf("A's backlog drained before B's run ended: raise HERALD_BENCH_FAIR_BACKLOG")
		}
		for _, r := range []struct {
			name string
			d    []time.Duration
		}{{"idle", idle}, {"busy", busy}} {
			p50, p99, mx := r.d[len(r.d)/2], r.d[len(r.d)*99/100], r.d[len(r.d)-1]
			b.ReportMetric(float64(p50.Microseconds())/1000, "B-"+r.name+"-p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "B-"+r.name+"-p99-ms")
			b.ReportMetric(float64(mx.Microseconds())/1000, "B-"+r.name+"-max-ms")
		}
		if backlogs != nil {
			store := storeName()
			name := "fairness-" + strings.ToLower(store)
			if rabbit {
				store += " + RabbitMQ"
				name += "-rabbitmq"
			}
			a, bb := "tenant A", "tenant B"
			if scoped {
				name = strings.Replace(name, "fairness-", "fairness-scopes-", 1)
				a, bb = "scope clinic-a", "scope clinic-b"
			}
			writeChart(b, name, &chart.Chart{
				Title: fmt.Sprintf("Fairness: %s at 20/s beside %s's %s in one lane — %s, %s",
					bb, a, chart.Thousands(int64(backlog)), store, runBegan.UTC().Format("2006-01-02")),
				Subtitle: fmt.Sprintf("100 ms provider, 64 sends in flight. B's p99 %s idle, %s beside A's backlog (max %s)",
					msText(idle[len(idle)*99/100]), msText(busy[len(busy)*99/100]), msText(busy[len(busy)-1])),
				Sends: lat.sends(runBegan), SendsLabel: bb + ": due → provider call",
				Backlog: backlogs.Stop(), BacklogLabel: a + ": accepted, not yet sent",
				Aim: 250 * time.Millisecond,
				Marks: []chart.Mark{
					{At: 0, Label: "B alone"},
					{At: began.Sub(runBegan), Label: fmt.Sprintf("A posts %s", chart.Thousands(int64(backlog)))},
					{At: busyBegan.Sub(runBegan), Label: "B beside A's backlog"},
				},
				Note: note,
			})
		}
	}
}

// fairSmallTenant posts n of party's (tenant B's, or scope clinic-b's)
// notifications, 20 a second on a
// fixed schedule (postOnSchedule), and returns their latencies from when
// each was due to its provider call, sorted.
func fairSmallTenant(b *testing.B, base string, party fairParty, lat *fairLatencies, run string, n int) []time.Duration {
	began := time.Now().UnixNano()
	ids, err := postOnSchedule(n, 50*time.Millisecond, lat, func(i int) (string, error) {
		return postScoped(base, party.key, fmt.Sprintf("b-%s-%d-%d", run, began, i), party.recipient, party.scope, 1)
	})
	if err != nil {
		b.Fatal(err)
	}
	return lat.await(b, ids, 10*time.Minute, "tenant B's "+run+" notifications")
}

// postOnSchedule posts n notifications, the i-th due every×i after it is
// called, each from its own goroutine (at most 64 at once), and notes
// each one's start as the time it was due, not the time a poster got to
// it. A load generator that waits for each answer before the next post
// would post less while intake stalls and count the stall once; this one
// keeps the rate, and a stall counts against every notification due
// during it (no coordinated omission). It returns the ids in order.
func postOnSchedule(n int, every time.Duration, lat *fairLatencies, post func(i int) (string, error)) ([]string, error) {
	start := time.Now()
	ids := make([]string, n)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	slots := make(chan struct{}, 64)
	for i := range n {
		due := start.Add(time.Duration(i) * every)
		time.Sleep(time.Until(due))
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			id, err := post(i)
			if err != nil {
				once.Do(func() { first = err })
				return
			}
			lat.begin(id, due)
			ids[i] = id
		}()
	}
	wg.Wait()
	return ids, first
}

// fairLatencies pairs each notification's POST with its provider call,
// whichever is noted first.
type fairLatencies struct {
	mu           sync.Mutex
	begun, ended map[string]time.Time
}

func (l *fairLatencies) begin(id string, at time.Time) {
	l.mu.Lock()
	l.begun[id] = at
	l.mu.Unlock()
}

func (l *fairLatencies) end(id string) {
	now := time.Now()
	l.mu.Lock()
	if _, ok := l.ended[id]; !ok {
		l.ended[id] = now
	}
	l.mu.Unlock()
}

// await waits until every one of ids has its provider call, at most
// within (then it fails the benchmark, naming what), and returns their
// latencies, sorted.
func (l *fairLatencies) await(b *testing.B, ids []string, within time.Duration, what string) []time.Duration {
	deadline := time.Now().Add(within)
	for {
		d, missing := l.of(ids)
		if missing == 0 {
			slices.Sort(d)
			return d
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d %s not sent after %s", missing, len(ids), what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// of returns the latencies of ids and how many have no call yet.
func (l *fairLatencies) of(ids []string) (d []time.Duration, missing int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		end, ok := l.ended[id]
		if !ok {
			missing++
			continue
		}
		d = append(d, end.Sub(l.begun[id]))
	}
	return d, missing
}
