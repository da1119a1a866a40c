package bench

// The rabbitmq transport's benchmarks. They need the machine's PostgreSQL
// and RabbitMQ (a fresh database and vhost each):
//
//	go test ./bench -run '^$' -bench RelayDrain -benchtime 100000x          # relay rows/s, confirms on
//	                                                                        # HERALD_BENCH_RELAY_IN_FLIGHT, _CLAIMERS: the relay's batches
//	                                                                        # awaiting confirms (4) and claim loops (1)
//	go test ./bench -run '^$' -bench EndToEndRabbitMQ -benchtime 50000x     # notifications/s end to end
//	go test ./bench -run '^$' -bench BrokerCeiling -benchtime 100000x       # the broker alone, RelayDrain's ceiling
//	go test ./bench -run '^$' -bench BrokerRoundTrip -benchtime 20000x      # the broker alone at EndToEndRabbitMQ's rate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/provider/sim"
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
// every row is marked PUBLISHED. With the servers on this machine it also
// reports the CPU per row of herald, PostgreSQL and RabbitMQ (cpuSplit).
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
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: mq, Topology: rabbitmq.Topology{}, Bundle: relayBundle(), Logger: quiet})
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
		Owner: "bench", BatchSize: 500, InFlight: relayInFlight(), Claimers: relayClaimers(), Lease: time.Minute, PollInterval: 100 * time.Millisecond, Logger: quiet,
		Hooks: dispatch.RelayHooks{AfterSettle: func(p, _ int) {
			if published.Add(int64(p)) == int64(b.N) {
				close(done)
			}
		}},
	})
	rctx, stopRelay := context.WithCancel(ctx)
	cpu := startCPUSplit(b, db, mq)
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
	cpu.report(b.N, "row")
	stopRelay()
	<-relayDone
	b.ReportMetric(float64(b.N)/took.Seconds(), "rows/s")
}

// BenchmarkEndToEndRabbitMQ: b.N notifications posted by 16 HTTP clients to a
// herald on PostgreSQL with the rabbitmq transport and a 0 ms simulated
// provider (HERALD_BENCH_PROVIDER_MS sets another); timed from the first
// POST until the last delivery is recorded, with the CPU per notification
// of each process (cpuSplit). HERALD_BENCH_PUBLISH_WINDOW sets the
// relays' publish window, as for BenchmarkFairnessRabbitMQ, and
// HERALD_BENCH_RELAY_BUNDLE their jobs a message (also BenchmarkRelayDrain's).
func BenchmarkEndToEndRabbitMQ(b *testing.B) {
	db := testpg.Database(b)
	mq := testmq.VHost(b)
	cfg := benchConfig(b, db, func(c *config.Config) {
		c.Transport, c.RabbitMQURL = "rabbitmq", mq
		c.RabbitMQ.RelayBundle = relayBundle()
		if w, err := strconv.Atoi(os.Getenv("HERALD_BENCH_PUBLISH_WINDOW")); err == nil {
			c.RabbitMQ.PublishWindow = w
		}
	})
	e := &env{sim: sim.New(sim.Config{Keep: 10, Latency: providerDelay()})}
	e.bases = []string{startApp(b, cfg, e)}
	cpu := startCPUSplit(b, db, mq)
	drive(b, e)
	cpu.report(b.N, "notification")
}

// BenchmarkBrokerCeiling: what the broker takes from a bare client, as the
// ceiling BenchmarkRelayDrain is read against. One amqp091 channel in
// confirm mode publishes b.N of the relay's messages (rabbitmq.JobMessage
// of the rows fillOutbox writes) to herald's transactional lane queue (its
// topology: a quorum queue), in batches of the relay's 500 with up to its 4
// batches awaiting confirms; no database, no claim, no marking. Timed from
// the first publish until the last confirm, with the client's and the
// broker's CPU per message.
func BenchmarkBrokerCeiling(b *testing.B) {
	const batch, inFlight = 500, 4
	mq, ch, top := confirmingChannel(b)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, batch*inFlight))
	msgs := relayMessages(b, b.N)
	key := top.Key(heraldtype.LaneTransactional, dispatch.LaneQueue)
	ctx := context.Background()
	cpu := startCPUSplit(b, "", mq)
	b.ResetTimer()
	began := time.Now()
	confirmed := 0
	await := func(n int) {
		for confirmed < n {
			c, ok := <-confirms
			if !ok {
				b.Fatalf("channel closed after %d confirms", confirmed)
			}
			if !c.Ack {
				b.Fatalf("message %d nacked", c.DeliveryTag)
			}
			confirmed++
		}
	}
	for i := 0; i < b.N; i += batch {
		await(i - batch*(inFlight-1))
		for j := i; j < min(i+batch, b.N); j++ {
			if err := ch.PublishWithContext(ctx, top.Exchange(), key, false, false, msgs[j]); err != nil {
				b.Fatal(err)
			}
		}
	}
	await(b.N)
	took := time.Since(began)
	b.StopTimer()
	cpu.report(b.N, "msg")
	b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
}

// confirmingChannel is a channel in confirm mode on a fresh vhost with
// herald's topology declared, the bare client of the broker benchmarks.
func confirmingChannel(b *testing.B) (mq string, ch *amqp.Channel, top rabbitmq.Topology) {
	b.Helper()
	mq = testmq.VHost(b)
	ch = testmq.Channel(b, mq)
	top = rabbitmq.Topology{}.WithDefaults()
	if err := top.Declare(ch); err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	return mq, ch, top
}

// relayMessages are n of the relay's messages (rabbitmq.JobMessage) for the
// rows fillOutbox writes.
func relayMessages(b *testing.B, n int) []amqp.Publishing {
	b.Helper()
	now := time.Now()
	msgs := make([]amqp.Publishing, n)
	for i := range msgs {
		id := fmt.Sprintf("ntf_bench%010d", i+1)
		job := heraldtype.Job{
			MessageID: id + ".webhook", OutboxID: int64(i + 1), NotificationID: id, Tenant: "t1",
			Recipient: fmt.Sprintf("user-%d", (i+1)%1000), EventID: fmt.Sprintf("evt-%d", i+1), Kind: "bench",
			Lane: heraldtype.LaneTransactional, Channel: "webhook", Params: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, i+1)),
			OffChain: true, Outbox: &heraldtype.Fence{ID: int64(i + 1), NotificationID: id, Channel: "webhook", Token: int64(i + 1)},
		}
		var err error
		if msgs[i], err = rabbitmq.JobMessage(job, now); err != nil {
			b.Fatal(err)
		}
	}
	return msgs
}

// BenchmarkBrokerRoundTrip: what the broker takes for a message's whole trip
// at the pace herald's PostgreSQL+RabbitMQ path runs, from a bare client,
// as the floor BenchmarkEndToEndRabbitMQ's RabbitMQ CPU is read against.
// One channel in confirm mode publishes b.N of the relay's messages to
// herald's transactional lane queue (its topology: a quorum queue) in
// batches of 16, each confirmed before the next, paced to
// HERALD_BENCH_BROKER_RATE messages/s (default 2,000: herald's figure on
// this machine); a consumer on a second connection reads them with a
// prefetch of 32, the consumer's default, and acks every fourth with
// multiple set (herald's acker gathers about three a frame). Timed from the
// first publish until the last message is read, with the broker's CPU per
// message. At an unbounded pace the broker spends less a message: it is the
// pace, not herald, that sets this floor.
func BenchmarkBrokerRoundTrip(b *testing.B) {
	const batch, prefetch, ackEvery = 16, 32, 4
	rate := 2000
	if r, err := strconv.Atoi(os.Getenv("HERALD_BENCH_BROKER_RATE")); err == nil && r > 0 {
		rate = r
	}
	mq, ch, top := confirmingChannel(b)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, batch))
	cons := testmq.Channel(b, mq)
	if err := cons.Qos(prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := cons.Consume(top.Queue(heraldtype.LaneTransactional), "bench", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	msgs := relayMessages(b, b.N)
	key := top.Key(heraldtype.LaneTransactional, dispatch.LaneQueue)
	ctx := context.Background()
	read := make(chan error, 1)
	cpu := startCPUSplit(b, "", mq)
	b.ResetTimer()
	began := time.Now()
	go func() {
		for n := 1; n <= b.N; n++ {
			d, ok := <-deliveries
			if !ok {
				read <- fmt.Errorf("deliveries closed after %d", n-1)
				return
			}
			if n%ackEvery == 0 || n == b.N {
				if err := d.Ack(true); err != nil {
					read <- err
					return
				}
			}
		}
		read <- nil
	}()
	pace := time.NewTicker(time.Duration(float64(time.Second) * batch / float64(rate)))
	defer pace.Stop()
	for i := 0; i < b.N; i += batch {
		<-pace.C
		end := min(i+batch, b.N)
		for j := i; j < end; j++ {
			if err := ch.PublishWithContext(ctx, top.Exchange(), key, false, false, msgs[j]); err != nil {
				b.Fatal(err)
			}
		}
		for range end - i {
			if c, ok := <-confirms; !ok || !c.Ack {
				b.Fatalf("message %d not confirmed", c.DeliveryTag)
			}
		}
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
	took := time.Since(began)
	b.StopTimer()
	cpu.report(b.N, "msg")
	b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
}

// relayBundle is the relay's jobs a message in the RabbitMQ benchmarks:
// HERALD_BENCH_RELAY_BUNDLE, or 0 for the default (rabbitmq.DefaultBundle).
func relayBundle() int {
	n, _ := strconv.Atoi(os.Getenv("HERALD_BENCH_RELAY_BUNDLE"))
	return max(n, 0)
}

// relayInFlight is BenchmarkRelayDrain's batches awaiting confirms at once:
// the relay's default, 4, or HERALD_BENCH_RELAY_IN_FLIGHT.
func relayInFlight() int {
	if n, err := strconv.Atoi(os.Getenv("HERALD_BENCH_RELAY_IN_FLIGHT")); err == nil && n > 0 {
		return n
	}
	return 4
}

// relayClaimers is BenchmarkRelayDrain's claim loops: the relay's
// default, 1, or HERALD_BENCH_RELAY_CLAIMERS.
func relayClaimers() int {
	if n, err := strconv.Atoi(os.Getenv("HERALD_BENCH_RELAY_CLAIMERS")); err == nil && n > 0 {
		return n
	}
	return 1
}
