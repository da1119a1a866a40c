package rabbitmq_test

// Nothing stranded (issue 8, paths 2 and 3 on the rabbitmq transport): a
// consumer whose copy finds another copy's SENDING claim, or whose result
// write has an unknown outcome, sends its copy to the retry queue (a
// recheck) instead of acking it away, so a RETRY_WAIT recorded by an owner
// that can no longer publish still has a copy to carry it out.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/storefault"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/reconcile"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/watchdog"
)

// settle is what a consumer did with one message.
type settle struct {
	res    sender.Result
	action string
}

// settles returns hooks that hand every settle to the channel returned.
func settles() (rabbitmq.ConsumerHooks, <-chan settle) {
	ch := make(chan settle, 16)
	return rabbitmq.ConsumerHooks{AfterSettle: func(_ heraldtype.Job, res sender.Result, action string) {
		ch <- settle{res, action}
	}}, ch
}

// firstCallNotSent makes the provider's first call a definite non-send,
// held until release is called, and every later call accepted.
func (e *env) firstCallNotSent() (inCall <-chan struct{}, release func(), calls *atomic.Int32) {
	began, free := make(chan struct{}), make(chan struct{})
	var once sync.Once
	calls = &atomic.Int32{}
	e.sim.OnCall(func(context.Context, provider.Message) provider.Outcome {
		if calls.Add(1) > 1 {
			return provider.AcceptedOutcome("")
		}
		close(began)
		<-free
		return provider.NotSentOutcome("HTTP_429", 0)
	})
	return began, func() { once.Do(func() { close(free) }) }, calls
}

// wantSentOnceMore waits for the message to be accepted on its second
// attempt and checks that the provider was called once per attempt.
func (e *env) wantSentOnceMore(t *testing.T, id string, calls *atomic.Int32) {
	t.Helper()
	e.waitFor(t, "the retry to be sent", func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
	if d := e.delivery(t, id); d.Attempts != 2 {
		t.Fatalf("delivery %+v, want PROVIDER_ACCEPTED on attempt 2", d)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d provider calls, want 2 (one per attempt)", n)
	}
	// As the e2e tests end: nothing for a reconciliation to repair, with
	// graces of a millisecond so a row stranded a moment ago counts.
	rec := reconcile.New(reconcile.Config{Store: e.store, Grace: time.Millisecond, Clock: e.clk,
		Watchdog: watchdog.Config{Broker: true, RetryGrace: time.Millisecond, PublishedGrace: time.Millisecond,
			SweepGrace: time.Millisecond, StaleClaimAfter: 10 * time.Minute}})
	rep, err := rec.Run(e.ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for kind, n := range rep.Found {
		if n != 0 {
			t.Errorf("reconciliation found %d %s: a row was left with no owner", n, kind)
		}
	}
	if rep.Unowned != 0 {
		t.Errorf("reconciliation: %d unowned %v", rep.Unowned, rep.UnownedByKind)
	}
}

// Path 2: consumer A is in a call that will end in a definite non-send when
// its connection drops; the broker redelivers the message to consumer B,
// which finds the delivery SENDING. A then records RETRY_WAIT but can
// neither publish a retry copy nor nack on its dead connection: B's copy is
// the only one left, and B must keep it.
func TestRedeliveryThatFindsAClaimKeepsItsCopy(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	inCall, release, calls := e.firstCallNotSent()
	hooksA, settledA := settles()
	e.consumer(t, rabbitmq.ConsumerConfig{Name: "consumer-a", Sender: e.sender(t), Concurrency: 1, Hooks: hooksA})
	t.Cleanup(release) // after A starts: a failing test lets the call go before it stops A
	e.startRelay(t, relayOpts{})
	id := e.notify(t, "pay")
	testenv.Recv(t, inCall, "consumer A's provider call")

	// A's connection drops mid-call (so does the relay's, which
	// reconnects; A cannot until its send returns). B starts after it: had
	// it started before, the broker could hand it the redelivered message
	// on a connection the same close was about to end, and its ack would
	// be lost (seen once in CI). B gets the message.
	testmq.CloseConnections(t, e.url)
	hooksB, settledB := settles()
	e.consumer(t, rabbitmq.ConsumerConfig{Name: "consumer-b", Sender: e.sender(t), Concurrency: 1, Hooks: hooksB})
	b := testenv.Recv(t, settledB, "consumer B to settle the redelivered copy")
	if b.action != rabbitmq.ActionRetryQueued || b.res.State != heraldtype.DeliverySending || b.res.Reason != heraldtype.ReasonClaimHeld {
		t.Fatalf("B found %+v and %s its copy; want a recheck in the retry queue", b.res, b.action)
	}

	release() // A's call ends: a definite non-send, recorded, its copy lost
	if a := testenv.Recv(t, settledA, "consumer A to settle"); a.res.State != heraldtype.DeliveryRetryWait || a.action != rabbitmq.ActionAckLost {
		t.Fatalf("A: %+v, %s; want RETRY_WAIT recorded and its ack lost", a.res, a.action)
	}
	e.wantSentOnceMore(t, id, calls)
}

// Path 3: a RETRY_WAIT write that committed and whose answer was lost, for
// good or because the row could not be read back. Nothing else holds a
// copy of the message: the consumer must send its own to the retry queue.
func TestRetryWaitWrittenWithItsAnswerLostGoesToTheRetryQueue(t *testing.T) {
	t.Parallel()
	for _, c := range storefault.Unknown {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, options{})
			_, release, calls := e.firstCallNotSent()
			release() // not held
			seam := storefault.LoseRecord(e.store, c.Options)
			snd := e.sender(t)
			snd.Store, snd.RecordTimeout = seam, 100*time.Millisecond
			hooks, settled := settles()
			e.consumer(t, rabbitmq.ConsumerConfig{Sender: snd, Concurrency: 1, Hooks: hooks})
			e.startRelay(t, relayOpts{})
			id := e.notify(t, "pay")

			first := testenv.Recv(t, settled, "the first copy to settle")
			if first.action != rabbitmq.ActionRetryQueued || first.res.Verdict != sender.Retry {
				t.Fatalf("first copy: %+v, %s; want a recheck in the retry queue", first.res, first.action)
			}
			if d := e.delivery(t, id); d.State != heraldtype.DeliveryRetryWait {
				t.Fatalf("delivery %+v, want the committed RETRY_WAIT", d)
			}
			seam.Heal()
			e.wantSentOnceMore(t, id, calls)
		})
	}
}
