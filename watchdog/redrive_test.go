package watchdog_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/watchdog"
)

// wantSentOnce waits until messageID is PROVIDER_ACCEPTED and checks that
// it took exactly one provider call in total, made as attempt.
func (w *world) wantSentOnce(t *testing.T, messageID string, attempt int) {
	t.Helper()
	testenv.WaitFor(t, messageID+" to be sent", testenv.Patience, func() bool {
		d, err := w.store.DeliveryGet(w.ctx, messageID)
		return err == nil && d.State == heraldtype.DeliveryProviderAccepted
	})
	if n, all := w.sim.CallCount(messageID), w.sim.Total(); n != 1 || all != 1 {
		t.Fatalf("%d provider calls for %s, %d in all; want exactly one", n, messageID, all)
	}
	if d := w.delivery(t, messageID); d.Attempts != attempt {
		t.Fatalf("sent as attempt %d, want %d", d.Attempts, attempt)
	}
}

// wantRedriven runs one round and checks that it moved on exactly one row
// of kind.
func wantRedriven(t *testing.T, wd *watchdog.Watchdog, ctx context.Context, kind store.UnownedKind) {
	t.Helper()
	r := round(t, wd, ctx)
	if r.Redriven[kind] != 1 || len(r.Redriven) != 1 {
		t.Fatalf("round moved on %v, want one %s row", r.Redriven, kind)
	}
}

// wantNothing runs one round and checks that it found nothing.
func wantNothing(t *testing.T, wd *watchdog.Watchdog, ctx context.Context, when string) {
	t.Helper()
	if r := round(t, wd, ctx); len(r.Found) != 0 {
		t.Fatalf("%s the round found %v, want nothing", when, r.Found)
	}
}

// The db transport: a delivery left in RETRY_WAIT behind an outbox row that
// is DONE (issue 8, path 1, made by editing the database) is re-driven by
// the watchdog and sent by the claimer and the sender as any due retry:
// one provider call in all, PROVIDER_ACCEPTED.
func TestRedrivenRetrySentOnceByTheClaimer(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, driver string) {
		w := open(t, driver, time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
		id := w.notify(t)
		w.strand(t, id, heraldtype.OutboxDone)
		claimer := dispatch.NewClaimer(dispatch.ClaimerConfig{Lane: lane, Store: w.store, Wake: w.store.Wakeups().C(lane),
			Sender: w.snd, Owner: "c", Concurrency: 2, Lease: time.Minute, PollInterval: 10 * time.Millisecond,
			Logger: quiet, Alerts: w.alerts})
		testenv.Start(t, claimer.Run)
		wd := w.watchdog(false, nil)
		wantNothing(t, wd, w.ctx, "within the grace")
		w.clk.Advance(wd.Config().RetryGrace + time.Millisecond)
		wantRedriven(t, wd, w.ctx, store.UnownedRetryWait)
		w.wantSentOnce(t, id, 2)
		wantNothing(t, wd, w.ctx, "after the send")
	})
}

// The rabbitmq transport with the real broker: a copy lost from its queue
// (purged) leaves a PUBLISHED row with no delivery, or a delivery waiting
// in RETRY_WAIT with no retry copy (issue 8, path 2). Past the broker's
// grace the watchdog re-drives the row, the relay publishes it again, and
// the consumer's sender sends it once.
func TestRedrivenLostCopySentOnceThroughTheBroker(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		kind    store.UnownedKind
		attempt int
		// strand leaves the delivery as the lost copy left it.
		strand func(t *testing.T, w *world, id string)
	}{
		{"PublishedWithoutDelivery", store.UnownedPublished, 1, func(*testing.T, *world, string) {}},
		{"RetryWaitWithoutCopy", store.UnownedRetryWait, 2, func(t *testing.T, w *world, id string) {
			// A copy claimed it, met a definite non-send and recorded the
			// retry, but its retry copy never reached the retry queue.
			res, err := w.store.DeliveryClaim(w.ctx, store.DeliveryClaimParams{MessageID: id, NotificationID: id[:len(id)-len(".webhook")],
				Tenant: "t1", Channel: heraldtype.ChannelWebhook, Provider: "sim", Owner: "lost"})
			if err != nil || !res.Claimed {
				t.Fatalf("delivery claim: %+v (%v)", res, err)
			}
			rec, err := w.store.DeliveryRecord(w.ctx, store.DeliveryRecordParams{MessageID: id, Attempt: 1, State: heraldtype.DeliveryRetryWait,
				Reason: "HTTP_429", RetryDelay: time.Minute, Owner: "lost", Class: "not_sent", StartedAt: w.clk.Now()})
			if err != nil || !rec.Recorded {
				t.Fatalf("record RETRY_WAIT: %+v (%v)", rec, err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := testmq.VHost(t)
			w := open(t, "sqlite", time.Now().UTC().Truncate(time.Millisecond)) // as precise as the store's times
			topo := rabbitmq.Topology{}.WithDefaults()
			pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: url, Name: "watchdog-relay", Topology: topo,
				ConfirmTimeout: testenv.Patience, Logger: quiet})
			testenv.Start(t, pub.Run)
			relay := dispatch.NewRelay(dispatch.RelayConfig{Lane: lane, Store: w.store, Wake: w.store.Wakeups().C(lane), Publisher: pub,
				Owner: "relay", Lease: time.Minute, PollInterval: 20 * time.Millisecond, Logger: quiet, Alerts: w.alerts})
			testenv.Start(t, relay.Run)

			id := w.notify(t)
			testenv.WaitFor(t, "the row to be published", testenv.Patience, func() bool {
				return w.outboxState(t, id) == heraldtype.OutboxPublished
			})
			if n, err := testmq.Channel(t, url).QueuePurge(topo.Queue(lane), false); err != nil || n != 1 {
				t.Fatalf("purge the lane queue: %d messages (%v), want the one copy", n, err)
			}
			c.strand(t, w, id)
			cons := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{URL: url, Name: "watchdog-consumer", Lane: lane, Topology: topo,
				Sender: w.snd, Logger: quiet, Alerts: w.alerts})
			testenv.Start(t, cons.Run)

			wd := w.watchdog(true, nil)
			wantNothing(t, wd, w.ctx, "within the grace")
			w.clk.Advance(time.Minute + max(wd.Config().RetryGrace, wd.Config().PublishedGrace) + time.Millisecond)
			wantRedriven(t, wd, w.ctx, c.kind)
			w.wantSentOnce(t, id, c.attempt)
			w.clk.Advance(2 * time.Hour)
			wantNothing(t, wd, w.ctx, "after the send")
		})
	}
}
