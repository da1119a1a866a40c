package peers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/testmq"
)

// Watermill's outbox, as its forwarder component is meant to be used.
const (
	// producers insert side by side, one transaction each: herald's
	// BenchmarkEndToEndRabbitMQ posts from 16 HTTP clients.
	producers = 16
	// outboxTopic is the SQL topic (table watermill_outbox) the producers'
	// enveloped messages go to and the forwarder reads.
	outboxTopic = "outbox"
	// queueTopic is the destination: a quorum queue of that name, on the
	// default exchange.
	queueTopic = "notifications"
	// subscriptions consume the queue side by side (a Watermill AMQP
	// subscription hands out one message at a time and waits for its ack).
	subscriptions = 4
)

// BenchmarkWatermillOutbox: b.N messages, each written by one of 16
// producers in its own PostgreSQL transaction through watermill-sql's
// publisher on that transaction, wrapped in the forwarder's envelope
// publisher (the outbox); Watermill's forwarder (components/forwarder)
// moves them from watermill-sql's subscriber to a RabbitMQ quorum queue
// through watermill-amqp's publisher with publisher confirms; a consumer
// acks each. Timed from the first insert until the last message is
// consumed (each counted once), with the latency from an insert's commit
// to its consumption. herald's BenchmarkEndToEndRabbitMQ (bench) is the
// same path with herald's intake, relay and sender, measured the same way.
//
// Tuned, not defaults:
//   - SQL subscriber: the default PostgreSQL schema and offsets adapter
//     (ordered by transaction id, the one Watermill's outbox docs use),
//     a batch of 1,000 rows per read (default 100: fewer reads and offset
//     writes), and a 10 ms poll interval when there is nothing to read
//     (default 1 s, which would idle the forwarder for a second at the
//     start and whenever it catches up; 10 ms is herald's and River's
//     wake-up throttle in the Go API benchmarks).
//   - AMQP publisher: confirms on (the aim's "with confirms"), a channel
//     pool of 1 (the default, 0, opens and closes a channel, and puts it in
//     confirm mode, for every Publish); persistent messages (the default).
//   - The forwarder publishes one message at a time and waits for its
//     confirm before the subscriber hands it the next (Watermill's
//     subscribers deliver a message and wait for its ack). A second
//     forwarder would not help: the offsets adapter locks the consumer
//     group's row for each read, so forwarders of one topic take turns.
//   - Consumer: 4 subscriptions of one subscriber, prefetch 64 each (herald's
//     lane consumer has prefetch 64 and 64 sends in flight).
//
// The producers write only the outbox row, no row of their own: herald's
// intake writes a notification, its outbox rows and more in its
// transaction, so this favours Watermill.
func BenchmarkWatermillOutbox(b *testing.B) {
	ctx := context.Background()
	pool, dbURL := database(b)
	if max := pool.Config().MaxConns; max < producers {
		b.Fatalf("the producers' pool has %d connections for %d producers", max, producers)
	}
	// The forwarder has its own pool, as it would in its own process.
	fwdPool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer fwdPool.Close()
	mqURL := testmq.VHost(b)
	logger := watermill.NopLogger{}
	schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 1000}

	sqlSub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(fwdPool), wsql.SubscriberConfig{
		SchemaAdapter:  schema,
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
		PollInterval:   10 * time.Millisecond,
	}, logger)
	if err != nil {
		b.Fatal(err)
	}
	if err := sqlSub.SubscribeInitialize(outboxTopic); err != nil {
		b.Fatal(err)
	}

	mqCfg := wamqp.NewDurableQueueConfig(mqURL)
	mqCfg.Queue.Arguments = amqp.Table{"x-queue-type": "quorum"}
	mqCfg.Publish.ConfirmDelivery = true
	mqCfg.Publish.ChannelPoolSize = 1
	mqCfg.Consume.Qos.PrefetchCount = 64
	mqPub, err := wamqp.NewPublisher(mqCfg, logger)
	if err != nil {
		b.Fatal(err)
	}
	mqSub, err := wamqp.NewSubscriber(mqCfg, logger)
	if err != nil {
		b.Fatal(err)
	}

	lat := newLatencies(b.N)
	var consumed atomic.Int64
	var seenMu sync.Mutex
	seen := make(map[string]bool, b.N)
	cctx, stopConsumer := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	for range subscriptions {
		// Subscribe declares the quorum queue before the forwarder publishes.
		msgs, err := mqSub.Subscribe(cctx, queueTopic)
		if err != nil {
			b.Fatal(err)
		}
		consumers.Go(func() {
			for m := range msgs {
				seenMu.Lock()
				first := !seen[m.UUID]
				seen[m.UUID] = true
				seenMu.Unlock()
				if first {
					lat.end(m.UUID)
					consumed.Add(1)
				}
				m.Ack()
			}
		})
	}

	fwd, err := forwarder.NewForwarder(sqlSub, mqPub, logger, forwarder.Config{ForwarderTopic: outboxTopic})
	if err != nil {
		b.Fatal(err)
	}
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Run(ctx) }()
	<-fwd.Running()
	defer func() {
		if err := fwd.Close(); err != nil {
			b.Error(err)
		}
		if err := <-fwdDone; err != nil {
			b.Error(err)
		}
		stopConsumer()
		_ = mqSub.Close()
		consumers.Wait()
		_ = mqPub.Close()
	}()

	run := time.Now().UnixNano()
	b.ResetTimer()
	began := time.Now()
	enqueue(b, producers, func(i int) error {
		id := fmt.Sprintf("%d-%d", run, i)
		if err := insert(ctx, pool, logger, message.NewMessage(id,
			fmt.Appendf(nil, `{"recipient":"user-%d","kind":"bench","params":{"amount":%d}}`, i%1000, i))); err != nil {
			return err
		}
		lat.begin(id)
		return nil
	})
	enqueued := time.Now()
	wait(b, &consumed)
	report(b, began, enqueued, lat, "messages/s")
}

// insert writes msg for queueTopic into the outbox in a transaction of its
// own, through an SQL publisher on that transaction wrapped in the
// forwarder's envelope, as Watermill's outbox is used.
func insert(ctx context.Context, pool *pgxpool.Pool, logger watermill.LoggerAdapter, msg *message.Message) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, logger)
	if err != nil {
		return err
	}
	msg.SetContext(ctx)
	if err := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: outboxTopic}).Publish(queueTopic, msg); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
