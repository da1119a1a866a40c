package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store/postgres"
)

// drainPage is how many items one batch insert (River) or one page of
// recipients (herald's campaign) carries: the campaign fan-out's batch.
const drainPage = 10_000

// BenchmarkDrainRiver: b.N no-op jobs batch-inserted with River's
// InsertManyFast (COPY), drainPage a call, while the client is not yet
// working; then the client (64 workers, 10 ms fetch cooldown, as in
// BenchmarkGoAPIRiver) starts, timed until the last job is worked. It
// reports inserted/s, worked/s (from the client's start) and jobs/s (from
// the first insert to the last job worked).
func BenchmarkDrainRiver(b *testing.B) {
	ctx := context.Background()
	pool, _ := database(b)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	var worked atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: func(*river.Job[noopArgs]) { worked.Add(1) }})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 64}},
		FetchCooldown: 10 * time.Millisecond,
		Workers:       workers,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	began := time.Now()
	for from := 0; from < b.N; from += drainPage {
		page := make([]river.InsertManyParams, 0, min(drainPage, b.N-from))
		for i := from; i < min(b.N, from+drainPage); i++ {
			page = append(page, river.InsertManyParams{Args: noopArgs{N: i}})
		}
		if _, err := client.InsertManyFast(ctx, page); err != nil {
			b.Fatal(err)
		}
	}
	inserted := time.Now()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	wait(b, &worked)
	end := time.Now()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/inserted.Sub(began).Seconds(), "inserted/s")
	b.ReportMetric(float64(b.N)/end.Sub(inserted).Seconds(), "worked/s")
	b.ReportMetric(float64(b.N)/end.Sub(began).Seconds(), "jobs/s")
}

// BenchmarkDrainHerald: a campaign of b.N recipients of a transactional
// kind (a webhook to a 0 ms provider, 64 sends in flight, the db transport
// on PostgreSQL), its recipients added through the HTTP API in pages of
// drainPage, then started; timed from the start until the last send is
// recorded PROVIDER_ACCEPTED. The leader's fan-out (batches of 10,000,
// looked for every second) and the sends overlap. It reports sent/s and
// how long the fan-out took.
func BenchmarkDrainHerald(b *testing.B) {
	ctx := context.Background()
	_, url := database(b)
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
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	var sent atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	a, err := app.New(ctx, cfg, app.Options{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Providers: map[string]provider.Provider{"sim-webhook": sim.New(sim.Config{})},
		Listener:  l,
		Hooks: sender.Hooks{AfterRecord: func(_ context.Context, _ heraldtype.Job, r sender.Result) {
			if r.State == heraldtype.DeliveryProviderAccepted {
				sent.Add(1)
			}
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	base := "http://" + l.Addr().String()
	var created struct{ ID string }
	if err := call(http.MethodPost, base+"/v1/campaigns", fmt.Sprintf("drain-%d", time.Now().UnixNano()), map[string]any{"kind": "bench", "params": map[string]any{"amount": 1000}}, &created); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < b.N; from += drainPage {
		page := make([]map[string]string, 0, drainPage)
		for i := from; i < min(b.N, from+drainPage); i++ {
			page = append(page, map[string]string{"recipient": fmt.Sprintf("member-%d", i)})
		}
		if err := call(http.MethodPost, base+"/v1/campaigns/"+created.ID+"/recipients", "", map[string]any{"recipients": page}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	began := time.Now()
	if err := call(http.MethodPost, base+"/v1/campaigns/"+created.ID+"/start", "", map[string]any{}, nil); err != nil {
		b.Fatal(err)
	}
	// The fan-out's end, read from the campaign's enqueued count while
	// the sends go on.
	fannedOut := make(chan time.Duration, 1)
	go func() {
		for {
			var progress struct{ Enqueued int }
			if err := call(http.MethodGet, base+"/v1/campaigns/"+created.ID, "", nil, &progress); err == nil && progress.Enqueued >= b.N {
				fannedOut <- time.Since(began)
				return
			}
			if rctx.Err() != nil {
				fannedOut <- 0
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	wait(b, &sent)
	end := time.Now()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/end.Sub(began).Seconds(), "sent/s")
	b.ReportMetric((<-fannedOut).Seconds(), "fanout-s")
}

// call sends body as JSON with the development key (and key as the
// Idempotency-Key when set) and decodes the answer into out.
func call(method, url, key string, body, out any) error {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}
