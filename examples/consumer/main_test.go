package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testpg"
)

// TestExample runs the points service on a fresh PostgreSQL schema and
// RabbitMQ vhost and feeds it what a broker and a producer can send: an
// event, a copy of it (re-encoded), a second event, an event with no id, a
// body that is not an event, and the first id again with another payload.
// The two events are credited once each; the copy is acked as a duplicate;
// the changed payload is quarantined and acked, never applied; the two
// that can never be processed are dead-lettered, not requeued. When the
// service stops, nothing is left in the queue: every delivery was settled.
func TestExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgURL, mqURL := testpg.Schema(t), testmq.VHost(t)

	conn, err := amqp.Dial(mqURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := declare(ch); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ id, body string }{
		{"evt-1", `{"account": "acct-1", "points": 100}`},
		{"evt-1", `{"points":100,"account":"acct-1"}`}, // the same event, re-encoded
		{"evt-2", `{"account": "acct-1", "points": 20}`},
		{"", `{"account": "acct-1", "points": 5000}`}, // no id
		{"evt-3", `points: 7`},                        // not an event
		{"evt-1", `{"account": "acct-1", "points": 999}`},
	} {
		confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false,
			amqp.Publishing{MessageId: m.id, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(m.body)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := confirm.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish %s: not confirmed (%v)", m.id, err)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- run(runCtx, pgURL, mqURL, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer stop()

	// run migrates before it consumes: once it consumes, the tables exist.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Consumers == 1 {
			break
		}
		select {
		case err := <-stopped:
			t.Fatalf("run returned before consuming: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("run is not consuming %s after 30 s", queue)
		}
	}
	db, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	// settled reports the store's and the dead-letter queue's state; it is
	// final once the six deliveries are handled.
	settled := func() (balance, quarantined, dead int, done bool) {
		err := db.QueryRow(ctx, `SELECT
    coalesce((SELECT balance FROM accounts WHERE id = 'acct-1'), 0),
    (SELECT count(*) FROM herald_quarantined_events)`).Scan(&balance, &quarantined)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ch.QueueDeclarePassive(deadQueue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return balance, quarantined, q.Messages, quarantined == 1 && q.Messages == 2
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		balance, quarantined, dead, done := settled()
		if done {
			if balance != 120 {
				t.Errorf("balance %d, want 120: evt-1 and evt-2 once each", balance)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: balance %d, %d quarantined, %d dead-lettered; want 120, 1, 2", balance, quarantined, dead)
		}
		time.Sleep(20 * time.Millisecond)
	}

	stop()
	if err := testenv.Recv(t, stopped, "run to return after its context's end"); err != nil {
		t.Fatalf("run: %v", err)
	}
	// run closed its connection: an unsettled delivery would be back in
	// the queue now, and a requeued one would have kept coming back.
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages left in %s, want every delivery settled", q.Messages, queue)
	}
	var consumed int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM herald_consumed_events WHERE consumer = 'points'`).Scan(&consumed); err != nil {
		t.Fatal(err)
	}
	if consumed != 2 {
		t.Errorf("%d events recorded, want 2 (evt-1, evt-2)", consumed)
	}
}
