package rabbitmq_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// deferCheck is a rule that defers every send by wait while on.
type deferCheck struct {
	on   atomic.Bool
	wait time.Duration
}

func (c *deferCheck) Check(context.Context, sender.Subject) sender.Ruling {
	if c.on.Load() {
		return sender.DeferFor(c.wait, heraldtype.ReasonQuietHours)
	}
	return sender.Ruling{}
}

// A send the sender defers for longer than the longest retry tier (10
// minutes here) waits in the outbox, not in the broker: the consumer puts
// the row back to PENDING, due at the end of the wait, with the
// deferral's reason, and drops its copy. No delivery row, no call, no
// copy in a retry queue; once due, the relay publishes it again and it is
// sent once.
func TestLongDeferralWaitsInTheOutbox(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now().Truncate(time.Second)) // SQLite keeps milliseconds
	e := setup(t, options{clk: clk})
	rule := &deferCheck{wait: 2 * time.Hour}
	rule.on.Store(true)
	snd := e.sender(t)
	snd.Checks = []sender.Check{rule}
	e.consumer(t, rabbitmq.ConsumerConfig{Sender: snd, Concurrency: 2, Outbox: e.store})
	e.startRelay(t, relayOpts{})
	id := e.notify(t, "pay")
	due := clk.Now().Add(2 * time.Hour)

	e.waitFor(t, "the deferral", func() bool { return slices.Contains(e.actions(id), rabbitmq.ActionDeferred) })
	v := e.view(t, id)
	if v.OutboxState != heraldtype.OutboxPending || v.OutboxReason != heraldtype.ReasonQuietHours || !v.AvailableAt.Equal(due) || v.Delivery != nil {
		t.Fatalf("outbox %s %s due %s, delivery %+v; want PENDING %s due %s and no delivery",
			v.OutboxState, v.OutboxReason, v.AvailableAt, v.Delivery, heraldtype.ReasonQuietHours, due)
	}
	for _, d := range e.topo.RetryDelays {
		if n := e.readyIn(t, e.topo.RetryQueue(lane, d)); n != 0 {
			t.Fatalf("%d copies in %s, want none", n, e.topo.RetryQueue(lane, d))
		}
	}
	if n := e.sim.CallCount(id); n != 0 {
		t.Fatalf("%d provider calls while deferred", n)
	}

	rule.on.Store(false)
	clk.Advance(2 * time.Hour)
	e.waitFor(t, "the send once due", func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
	if n := e.sim.CallCount(id); n != 1 {
		t.Fatalf("%d provider calls, want 1", n)
	}
}

// failingDeferrals is a store.Deferrals whose every write fails.
type failingDeferrals struct{}

func (failingDeferrals) OutboxDefer(context.Context, store.OutboxDeferParams) (store.OutboxDeferResult, error) {
	return store.OutboxDeferResult{}, errors.New("store unavailable")
}

// How the consumer finds the outbox row decides what becomes of a long
// deferral's copy: only a row PUBLISHED by the copy's own publication is
// put back; a newer publication's row is another owner's (the copy is
// dropped); a row the relay has yet to mark PUBLISHED keeps the copy,
// which looks again a second later; a copy without a token, a wait within
// the retry tiers, or a store that fails keep the copy in the broker.
func TestLongDeferralCopyByTheRowItFinds(t *testing.T) {
	t.Parallel()
	const long = 2 * time.Hour
	for _, c := range []struct {
		name string
		// prepare claims the row as the relay would and returns the fence
		// the message carries (nil: no token header).
		prepare func(t *testing.T, e *env, id string) *heraldtype.Fence
		wait    time.Duration
		outbox  store.Deferrals // nil: the test's store
		actions []string
		state   heraldtype.OutboxState // the row afterwards
		queue   time.Duration          // the retry tier holding the kept copy (0: none)
	}{
		{"PublishedByThisCopyWaitsInTheOutbox", publishedOnce, long, nil,
			[]string{rabbitmq.ActionDeferred}, heraldtype.OutboxPending, 0},
		{"NewerPublicationsRowDropsTheCopy", publishedTwice, long, nil,
			[]string{rabbitmq.ActionAcked}, heraldtype.OutboxPublished, 0},
		{"NoTokenKeepsTheCopy", func(t *testing.T, e *env, id string) *heraldtype.Fence { publishedOnce(t, e, id); return nil }, long, nil,
			[]string{rabbitmq.ActionRetryQueued}, heraldtype.OutboxPublished, 10 * time.Minute},
		{"WaitWithinTheTiersKeepsTheCopy", publishedOnce, 5 * time.Minute, nil,
			[]string{rabbitmq.ActionRetryQueued}, heraldtype.OutboxPublished, time.Minute},
		{"StoreFailureBacksOff", publishedOnce, long, failingDeferrals{},
			[]string{rabbitmq.ActionBackoff}, heraldtype.OutboxPublished, dispatch.Backoff(1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, options{})
			// Tiers long enough that a kept copy is still in its queue
			// when the test looks.
			e.topo = rabbitmq.Topology{RetryDelays: []time.Duration{time.Minute, 10 * time.Minute}}.WithDefaults()
			id := e.notify(t, "pay")
			fence := c.prepare(t, e, id)
			outbox := c.outbox
			if outbox == nil {
				outbox = e.store
			}
			_, stop := e.consumer(t, rabbitmq.ConsumerConfig{Concurrency: 1, Outbox: outbox,
				Sender: senderFunc(func(context.Context, heraldtype.Job) sender.Result {
					return sender.Result{Verdict: sender.Retry, Reason: heraldtype.ReasonQuietHours, Delay: c.wait}
				})})
			e.publishJob(t, id, fence)
			e.waitFor(t, "the copy settled", func() bool { return len(e.actions(id)) > 0 })
			stop()
			if a := e.actions(id); !slices.Equal(a, c.actions) {
				t.Fatalf("actions %v, want %v", a, c.actions)
			}
			if s := e.outboxState(t, id); s != c.state {
				t.Fatalf("outbox %s, want %s", s, c.state)
			}
			for _, d := range e.topo.RetryDelays {
				want := 0
				if d == c.queue {
					want = 1
				}
				if n := e.readyIn(t, e.topo.RetryQueue(lane, d)); n != want {
					t.Fatalf("%d copies in %s, want %d", n, e.topo.RetryQueue(lane, d), want)
				}
			}
		})
	}

	// The relay's confirm and the consumer's copy race: the row is still
	// PUBLISHING under the copy's own claim. The copy is kept and looks
	// again; once the relay has marked the row, the copy puts it back.
	t.Run("StillPublishingLooksAgain", func(t *testing.T) {
		t.Parallel()
		e := setup(t, options{})
		id := e.notify(t, "pay")
		row := claimPublishing(t, e)
		e.consumer(t, rabbitmq.ConsumerConfig{Concurrency: 1, Outbox: e.store,
			Sender: senderFunc(func(context.Context, heraldtype.Job) sender.Result {
				return sender.Result{Verdict: sender.Retry, Reason: heraldtype.ReasonQuietHours, Delay: long}
			})})
		e.publishJob(t, id, &row.Fence)
		e.waitFor(t, "the first look", func() bool { return len(e.actions(id)) > 0 })
		if a := e.actions(id); !slices.Equal(a, []string{rabbitmq.ActionRetryQueued}) {
			t.Fatalf("actions %v, want the copy kept", a)
		}
		if n, err := e.store.OutboxMarkPublished(e.ctx, []store.Fence{row.Fence}); err != nil || n != 1 {
			t.Fatalf("the relay's mark: %d (%v)", n, err)
		}
		e.waitFor(t, "the second look", func() bool { return len(e.actions(id)) > 1 })
		if a := e.actions(id); !slices.Equal(a, []string{rabbitmq.ActionRetryQueued, rabbitmq.ActionDeferred}) {
			t.Fatalf("actions %v, want the copy kept, then deferred", a)
		}
		if s := e.outboxState(t, id); s != heraldtype.OutboxPending {
			t.Fatalf("outbox %s, want PENDING", s)
		}
	})
}

// claimPublishing claims the lane's oldest due row as the relay does.
func claimPublishing(t *testing.T, e *env) store.Claimed {
	t.Helper()
	rows, err := e.store.OutboxClaim(e.ctx, store.OutboxClaimParams{Lane: lane, Owner: "relay", Limit: 1, Lease: time.Minute, Publishing: true})
	if err != nil || len(rows) != 1 {
		t.Fatalf("OutboxClaim: %d rows (%v)", len(rows), err)
	}
	return rows[0]
}

// publishedOnce publishes the row as the relay does and returns its fence.
func publishedOnce(t *testing.T, e *env, _ string) *heraldtype.Fence {
	t.Helper()
	row := claimPublishing(t, e)
	if n, err := e.store.OutboxMarkPublished(e.ctx, []store.Fence{row.Fence}); err != nil || n != 1 {
		t.Fatalf("OutboxMarkPublished: %d (%v)", n, err)
	}
	return &row.Fence
}

// publishedTwice publishes the row, loses the confirm, publishes it again,
// and returns the first publication's fence.
func publishedTwice(t *testing.T, e *env, _ string) *heraldtype.Fence {
	t.Helper()
	first := claimPublishing(t, e)
	if ok, err := e.store.OutboxRetry(e.ctx, store.OutboxRetryParams{Fence: first.Fence, Reason: "PUBLISH_FAILED"}); err != nil || !ok {
		t.Fatalf("OutboxRetry: %v (%v)", ok, err)
	}
	// SQLite keeps due times in whole milliseconds, rounded up so that no
	// row falls due early: the row put back "now" is due at the next one.
	testenv.WaitFor(t, "the row put back to fall due", testenv.Patience, func() bool {
		return !e.view(t, first.MessageID).AvailableAt.After(time.Now())
	})
	publishedOnce(t, e, "")
	return &first.Fence
}

// publishJob publishes the job of message id to the lane as the relay
// does, with fence's token (nil: none).
func (e *env) publishJob(t *testing.T, id string, fence *heraldtype.Fence) {
	t.Helper()
	job := heraldtype.Job{MessageID: id, NotificationID: id[:len(id)-len(".webhook")], Tenant: "t1", Recipient: "r1",
		Kind: "pay", Lane: lane, Channel: heraldtype.ChannelWebhook, Outbox: fence}
	if fence != nil {
		job.OutboxID = fence.ID
	}
	msg, err := rabbitmq.JobMessage(job, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !e.publish(t, e.topo.Exchange(), string(lane), msg) {
		t.Fatal("publish: nacked")
	}
}

// A consumer that dies after putting the row back, before its ack: the
// broker redelivers the copy, whose deferral finds the row PENDING (its
// own earlier write) and drops it. The row keeps the first write's due
// time; nothing is left in the broker.
func TestLongDeferralCrashBeforeTheAckDropsTheRedelivery(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now().Truncate(time.Second))
	e := setup(t, options{clk: clk})
	id := e.notify(t, "pay")
	fence := publishedOnce(t, e, id)
	due := clk.Now().Add(2 * time.Hour)
	var killed atomic.Bool
	e.consumer(t, rabbitmq.ConsumerConfig{Concurrency: 1, Outbox: e.store,
		Sender: senderFunc(func(context.Context, heraldtype.Job) sender.Result {
			return sender.Result{Verdict: sender.Retry, Reason: heraldtype.ReasonQuietHours, Delay: 2 * time.Hour}
		}),
		Hooks: rabbitmq.ConsumerHooks{BeforeAck: func(_ heraldtype.Job, _ sender.Result, kill func()) {
			if killed.CompareAndSwap(false, true) {
				clk.Advance(time.Minute) // a second write would move the due time
				kill()
			}
		}}})
	e.publishJob(t, id, fence)
	e.waitFor(t, "the redelivered copy settled", func() bool { return len(e.actions(id)) > 1 })
	if a := e.actions(id); !slices.Equal(a, []string{rabbitmq.ActionAckLost, rabbitmq.ActionAcked}) {
		t.Fatalf("actions %v, want the first ack lost, then the redelivery dropped", a)
	}
	v := e.view(t, id)
	if v.OutboxState != heraldtype.OutboxPending || !v.AvailableAt.Equal(due) {
		t.Fatalf("outbox %s due %s, want PENDING due %s", v.OutboxState, v.AvailableAt, due)
	}
	if n := e.readyIn(t, e.topo.Queue(lane)); n != 0 {
		t.Fatalf("%d messages left in the lane queue", n)
	}
	for _, d := range e.topo.RetryDelays {
		if n := e.readyIn(t, e.topo.RetryQueue(lane, d)); n != 0 {
			t.Fatalf("%d copies in %s, want none", n, e.topo.RetryQueue(lane, d))
		}
	}
}
