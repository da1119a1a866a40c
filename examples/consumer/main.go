// Command consumer is the points service of docs/consumer.md, "Consuming events
// exactly once in effect": it credits points for each event of the RabbitMQ
// queue "points" on PostgreSQL, once per event id however often the event is
// delivered, and acks, rejects or requeues each delivery by the outcome.
//
//	export DATABASE_URL=postgres://postgres@127.0.0.1:5432/points
//	export RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5672/
//	go run .
//
// An event is a message whose message id is the producer's event id and
// whose body is {"account": "acct-1", "points": 120}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/consumer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL"), os.Getenv("RABBITMQ_URL"), slog.Default()); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

// Queues: points, whose rejected messages go to points.dead.
const (
	queue     = "points"
	deadQueue = "points.dead"
)

// run consumes the points queue until ctx ends.
func run(ctx context.Context, databaseURL, rabbitmqURL string, log *slog.Logger) error {
	if databaseURL == "" || rabbitmqURL == "" {
		return errors.New("set DATABASE_URL (PostgreSQL) and RABBITMQ_URL (amqp://…)")
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	// README:begin migrate
	if err := consumer.Migrate(ctx, pool); err != nil { // once: herald_consumed_events, herald_quarantined_events
		return err
	}
	// README:end
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS accounts (id text PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
		return fmt.Errorf("create accounts: %w", err)
	}

	conn, err := amqp.Dial(rabbitmqURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := declare(ch); err != nil {
		return err
	}
	if err := ch.Qos(16, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	log.Info("consumer: consuming", slog.String("queue", queue))
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-deliveries:
			if !ok {
				return errors.New("the broker closed the channel")
			}
			if err := handle(ctx, pool, msg); err != nil {
				return fmt.Errorf("settle delivery %d: %w", msg.DeliveryTag, err)
			}
		}
	}
}

// declare declares the points queue and its dead-letter queue, where
// rejected messages go: durable quorum queues, so nothing is lost between.
func declare(ch *amqp.Channel) error {
	quorum := amqp.Table{"x-queue-type": "quorum"}
	if _, err := ch.QueueDeclare(deadQueue, true, false, false, false, quorum); err != nil {
		return fmt.Errorf("declare %s: %w", deadQueue, err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": deadQueue,
	}); err != nil {
		return fmt.Errorf("declare %s: %w", queue, err)
	}
	return nil
}

// README:begin handle
// handle credits an event's points once per event id, then settles the delivery.
func handle(ctx context.Context, pool *pgxpool.Pool, msg amqp.Delivery) error {
	var credit struct {
		Account string `json:"account"`
		Points  int64  `json:"points"`
	}
	if err := json.Unmarshal(msg.Body, &credit); err != nil {
		return msg.Reject(false) // never valid: to the dead-letter queue, not back to the queue
	}
	ev := consumer.Event{Consumer: "points", ID: msg.MessageId, Payload: msg.Body}
	_, err := consumer.Process(ctx, pool, ev, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance`, credit.Account, credit.Points)
		return err
	})
	var mismatch *consumer.MismatchError
	switch {
	case err == nil: // consumer.Applied or consumer.Duplicate, committed: ack
		return msg.Ack(false)
	case errors.As(err, &mismatch): // same id, other payload: quarantined (committed), never applied: ack
		return msg.Ack(false)
	case errors.Is(err, consumer.ErrNoEventID): // no id: can never be processed: dead-letter it
		return msg.Reject(false)
	default: // not processed, or the commit's outcome unknown: let it come again
		return msg.Nack(false, true)
	}
}

// README:end
