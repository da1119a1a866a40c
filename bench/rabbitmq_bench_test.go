package bench

// The rabbitmq transport's benchmarks. Both need the machine's PostgreSQL
// and RabbitMQ (a fresh database and vhost each):
//
//	go test ./bench -run '^$' -bench RelayDrain -benchtime 100000x          # relay rows/s, confirms on
//	go test ./bench -run '^$' -bench EndToEndRabbitMQ -benchtime 50000x     # notifications/s end to end

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store/postgres"
)

// fillOutbox writes n due notifications with one PENDING webhook outbox row
// each, straight into the tables, as a backlog for the relay.
func fillOutbox(b *testing.B, url string, n int) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'ntf_bench' || lpad(g::text, 10, '0'), 't1', 'user-' || (g % 1000), 'evt-' || g, 'bench', 'transactional',
       ('{"amount":' || g || '}')::json, now()
FROM generate_series(1, $1::integer) g`, n); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.webhook', tenant, lane, 'webhook', 'PENDING', created_at, created_at, created_at FROM notifications ORDER BY id`); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE notifications; ANALYZE outbox`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRelayDrain: one lane's relay drains a pre-filled outbox of b.N
// rows to a quorum queue with publisher confirms; timed from start until
// every row is marked PUBLISHED.
func BenchmarkRelayDrain(b *testing.B) {
	db := testpg.Database(b)
	mq := testmq.VHost(b)
	ctx := context.Background()
	st, err := postgres.Open(ctx, db, postgres.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	fillOutbox(b, db, b.N)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: mq, Topology: rabbitmq.Topology{}, Logger: quiet})
	pctx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	go pub.Run(pctx)
	if err := pub.Ready(ctx); err != nil {
		b.Fatal(err)
	}
	var published atomic.Int64
	done := make(chan struct{})
	relay := dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: st, Wake: st.Wakeups().C(heraldtype.LaneTransactional), Publisher: pub,
		Owner: "bench", BatchSize: 500, InFlight: 4, Lease: time.Minute, PollInterval: 100 * time.Millisecond, Logger: quiet,
		Hooks: dispatch.RelayHooks{AfterSettle: func(p, _ int) {
			if published.Add(int64(p)) == int64(b.N) {
				close(done)
			}
		}},
	})
	rctx, stopRelay := context.WithCancel(ctx)
	b.ResetTimer()
	began := time.Now()
	relayDone := make(chan struct{})
	go func() { relay.Run(rctx); close(relayDone) }()
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("published %d of %d", published.Load(), b.N)
	}
	took := time.Since(began)
	b.StopTimer()
	stopRelay()
	<-relayDone
	b.ReportMetric(float64(b.N)/took.Seconds(), "rows/s")
}

// BenchmarkEndToEndRabbitMQ: b.N notifications posted by 16 HTTP clients to a
// herald on PostgreSQL with the rabbitmq transport and a 0 ms simulated
// provider; timed from the first POST until the last delivery is recorded.
func BenchmarkEndToEndRabbitMQ(b *testing.B) {
	db := testpg.Database(b)
	mq := testmq.VHost(b)
	e := &env{}
	cfg := config.Dev()
	cfg.Database = db
	cfg.Transport = "rabbitmq"
	cfg.RabbitMQURL = mq
	cfg.Kinds = []config.Kind{{
		Name: "bench", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "Paid", Body: "Paid {{.amount}} won"}},
	}}
	cfg.Lanes = map[string]config.Lane{"transactional": {Concurrency: 64}}
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	e.sim = sim.New(sim.Config{Keep: 10})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, app.Options{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Providers: map[string]provider.Provider{"sim-webhook": e.sim},
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
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			b.Error(err)
		}
	}()
	e.bases = []string{"http://" + l.Addr().String()}

	const clients = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	began := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := post(e.bases[0], int(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	intake := time.Since(began)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
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
