package dispatch_test

// Nothing stranded (issue 8, paths 1 and 3 on the db transport): a claimer
// whose copy finds another copy's SENDING claim, or whose result write has
// an unknown outcome, keeps its outbox row (back to PENDING for a recheck)
// instead of marking it DONE, so a RETRY_WAIT that the claim's owner records
// later still has an outbox row to carry it out. On SQLite and PostgreSQL.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/storefault"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/reconcile"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/watchdog"
)

const lane = heraldtype.LaneTransactional

// claimerAs is a one-slot claimer of the transactional lane named owner,
// writing the outbox through out.
func (b bundle) claimerAs(owner string, out store.Outbox, snd dispatch.Sender) *dispatch.Claimer {
	return dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: lane, Store: out, Wake: b.store.Wakeups().C(lane), Sender: snd, Owner: owner,
		Concurrency: 1, Lease: time.Minute, PollInterval: 5 * time.Millisecond, MaxAttempts: 3, Alerts: b.alerts,
	})
}

// holdFirstCall holds the provider's first call until release is called
// and answers it with first; later calls are accepted. inCall is closed
// when the first call has begun. A test that holds the call registers
// release as a cleanup after it starts the claimer, so that a failing
// test lets the call go before it stops the claimer.
func (b bundle) holdFirstCall(t *testing.T, first provider.Outcome) (inCall <-chan struct{}, release func()) {
	t.Helper()
	began, free := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(free) }) }
	var mu sync.Mutex
	calls := 0
	b.sim.OnCall(func(context.Context, provider.Message) provider.Outcome {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n > 1 {
			return provider.AcceptedOutcome("")
		}
		close(began)
		<-free
		return first
	})
	return began, release
}

// wantSentOnceMore checks the end of a stranding test: the message ended
// PROVIDER_ACCEPTED on its second attempt, with one provider call and one
// attempt-log row per attempt, and its outbox row DONE; reconciliation
// finds nothing left without an owner.
func (b bundle) wantSentOnceMore(t *testing.T, id string) {
	t.Helper()
	msg := store.MessageID(id, heraldtype.ChannelWebhook)
	e := b.entry(t, id)
	if e.OutboxState != heraldtype.OutboxDone || e.Delivery == nil || e.Delivery.State != heraldtype.DeliveryProviderAccepted || e.Delivery.Attempts != 2 {
		t.Fatalf("outbox %s, delivery %+v; want DONE and PROVIDER_ACCEPTED after 2 attempts", e.OutboxState, e.Delivery)
	}
	if n := b.sim.CallCount(msg); n != 2 {
		t.Fatalf("%d provider calls, want 2 (one per attempt)", n)
	}
	log, err := b.store.AttemptList(b.ctx, []string{msg})
	if err != nil {
		t.Fatalf("AttemptList: %v", err)
	}
	// By attempt: a retried write whose first answer was lost may log an
	// attempt twice, which the store's unique (message_id, attempt) ends.
	class := map[int]string{}
	for _, a := range log {
		class[a.Attempt] = a.Class
	}
	if len(class) != 2 || class[1] != "not_sent" || class[2] != "accepted" {
		t.Fatalf("attempt log %+v, want attempt 1 not_sent and attempt 2 accepted", log)
	}
	b.wantAccounted(t)
}

// wantAccounted ends a stranding test the way the e2e tests end: a
// reconciliation over the store finds nothing to repair and nothing
// unowned. Its graces are a millisecond, so a row stranded a moment ago
// counts; the test's clock is past every deadline it set.
func (b bundle) wantAccounted(t *testing.T) {
	t.Helper()
	rec := reconcile.New(reconcile.Config{Store: b.store, Catalog: b.cat, Grace: time.Millisecond, Clock: b.clk,
		Watchdog: watchdog.Config{RetryGrace: time.Millisecond, PublishedGrace: time.Millisecond, SweepGrace: time.Millisecond,
			StaleClaimAfter: 10 * time.Minute},
		Alerts: b.alerts})
	rep, err := rec.Run(b.ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for kind, n := range rep.Found {
		if n != 0 {
			t.Errorf("reconciliation found %d %s (sample %v): a row was left with no owner", n, kind, rep.UnownedSample[kind])
		}
	}
	if rep.Unowned != 0 {
		t.Errorf("reconciliation: %d unowned %v", rep.Unowned, rep.UnownedByKind)
	}
}

// Path 1: claimer A is in a call that ends in a definite non-send when its
// lease runs out; claimer B takes the row and finds the delivery SENDING;
// then A records RETRY_WAIT, its own outbox write fenced off. B must have
// kept the row (a recheck), or nothing would ever carry the retry out.
func TestLeaseLostDuringANonSendLeavesTheRetryAnOutboxRow(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		inCall, release := b.holdFirstCall(t, provider.NotSentOutcome("HTTP_429", 0))
		a := &settleLog{Outbox: b.store}
		run(t, b.claimerAs("a", a, b.sender(sender.Hooks{})))
		t.Cleanup(release)
		id := b.notify(t, "pay", lane)
		testenv.Recv(t, inCall, "claimer A's provider call")

		b.clk.Advance(2 * time.Minute) // A's lease (1 min) runs out mid-call
		if n, err := b.store.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("reclaimed %d (%v), want A's row", n, err)
		}
		bl := &settleLog{Outbox: b.store}
		run(t, b.claimerAs("b", bl, b.sender(sender.Hooks{})))
		testenv.WaitFor(t, "claimer B to settle its copy", testenv.Patience, func() bool { return len(bl.get()) == 1 })
		if e := b.entry(t, id); e.OutboxState != heraldtype.OutboxPending {
			t.Fatalf("B found the delivery %+v and left its outbox row %s; want PENDING (a recheck)", e.Delivery, e.OutboxState)
		}

		release() // A's call ends: a definite non-send
		testenv.WaitFor(t, "claimer A to settle", testenv.Patience, func() bool { return len(a.get()) == 1 })
		if a.get()[0] {
			t.Fatal("claimer A's outbox write took after its lease ran out")
		}
		if e := b.entry(t, id); e.OutboxState != heraldtype.OutboxPending || e.Delivery.State != heraldtype.DeliveryRetryWait {
			t.Fatalf("after A recorded: outbox %s, delivery %+v; want PENDING and RETRY_WAIT", e.OutboxState, e.Delivery)
		}
		// B's recheck comes due (its claim was 2 min old: the longest
		// recheck), finds the retry due and makes the second attempt.
		b.clk.Advance(sender.MaxRecheck)
		testenv.WaitFor(t, "the second attempt", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxDone })
		b.wantSentOnceMore(t, id)
	})
}

// The recheck loop ends: a claim whose owner died stays SENDING until the
// stale sweep turns it UNKNOWN; the claimer's copy is rechecked meanwhile
// (never sent), and the first recheck after the sweep finishes the row.
func TestRecheckOfADeadClaimEndsAfterTheStaleSweep(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		id := b.notify(t, "pay", lane)
		msg := store.MessageID(id, heraldtype.ChannelWebhook)
		// A process claimed the row and the delivery, and died.
		rows, err := b.store.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: lane, Owner: "dead", Limit: 1, Lease: time.Minute})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim the row: %d rows (%v)", len(rows), err)
		}
		claim, err := b.store.DeliveryClaim(b.ctx, store.DeliveryClaimParams{MessageID: msg, NotificationID: id, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, Provider: "sim", Owner: "dead"})
		if err != nil || !claim.Claimed {
			t.Fatalf("claim the delivery: %+v (%v)", claim, err)
		}
		claimedAt := b.clk.Now()
		b.clk.Advance(time.Minute + time.Second)
		if n, err := b.store.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("reclaimed %d (%v)", n, err)
		}
		log := &settleLog{Outbox: b.store}
		stop := run(t, b.claimerAs("b", log, b.sender(sender.Hooks{})))
		const staleAfter = 10 * time.Minute
		for n := 1; ; n++ {
			testenv.WaitFor(t, "a recheck", testenv.Patience, func() bool { return len(log.get()) == n })
			e := b.entry(t, id)
			if e.OutboxState != heraldtype.OutboxPending || e.Delivery.State != heraldtype.DeliverySending {
				t.Fatalf("recheck %d: outbox %s, delivery %+v; want PENDING while SENDING", n, e.OutboxState, e.Delivery)
			}
			if wait := e.AvailableAt.Sub(b.clk.Now()); wait < sender.MinRecheck || wait > sender.MaxRecheck {
				t.Fatalf("recheck %d due in %s, want %s..%s", n, wait, sender.MinRecheck, sender.MaxRecheck)
			}
			if n > 20 {
				t.Fatalf("%d rechecks before the claim could be stale", n)
			}
			if !e.AvailableAt.Before(claimedAt.Add(staleAfter)) {
				// The next recheck comes when the claim may be stale: the
				// stale sweep runs first (the claimer is stopped meanwhile,
				// so that it cannot take the row before the sweep).
				stop()
				b.clk.Advance(e.AvailableAt.Sub(b.clk.Now()) + time.Second)
				break
			}
			b.clk.Advance(e.AvailableAt.Sub(b.clk.Now()))
		}
		// The stale sweep ends the claim; the next recheck finishes the row.
		stale, err := b.store.DeliverySweepStale(b.ctx, staleAfter)
		if err != nil || len(stale) != 1 {
			t.Fatalf("stale sweep: %v (%v)", stale, err)
		}
		run(t, b.claimerAs("b", log, b.sender(sender.Hooks{})))
		testenv.WaitFor(t, "the recheck after the sweep", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxDone })
		if d := b.entry(t, id).Delivery; d.State != heraldtype.DeliveryUnknown || d.Reason != heraldtype.ReasonStaleClaim {
			t.Fatalf("delivery %+v, want UNKNOWN STALE_CLAIM", d)
		}
		if n := b.sim.Total(); n != 0 {
			t.Fatalf("%d provider calls for a claim nobody knew the outcome of", n)
		}
		for i, ok := range log.get() {
			if !ok {
				t.Fatalf("settle %d of claimer B did not take", i+1)
			}
		}
		b.wantAccounted(t)
	})
}

// Path 3 on the db transport: a RETRY_WAIT write that committed and whose
// answer was lost, for good or because the row could not be read back. The
// write settled the outbox row with it (PENDING until the retry is due), so
// the claimer's own write after the sender's recheck is refused and the row
// stays PENDING; the retry is made once.
func TestRetryWaitWrittenWithItsAnswerLostKeepsItsOutboxRow(t *testing.T) {
	t.Parallel()
	for _, c := range storefault.Unknown {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, b bundle) {
				_, release := b.holdFirstCall(t, provider.NotSentOutcome("HTTP_429", 0))
				release() // not held: the first call is a definite non-send
				seam := storefault.LoseRecord(b.store, c.Options)
				// Windows long enough for a loaded machine's round trip to
				// PostgreSQL to fit several times: with 100 ms the first
				// write could use all of it, and no later try (the thing
				// tested) was made.
				snd := sender.New(sender.Config{Store: seam, Providers: b.reg, Catalog: b.cat, Clock: b.clk, Owner: "a",
					Alerts: b.alerts, StoreRetry: time.Second, RecordTimeout: time.Second})
				recorded := make(chan sender.Result, 2) // one per attempt
				snd.Hooks.AfterRecord = func(_ context.Context, _ heraldtype.Job, r sender.Result) { recorded <- r }
				log := &settleLog{Outbox: b.store}
				run(t, b.claimerAs("a", log, snd))
				id := b.notify(t, "pay", lane)
				res := testenv.Recv(t, recorded, "the result write to be given up")
				testenv.WaitFor(t, "the claimer to settle", testenv.Patience, func() bool { return len(log.get()) == 1 })
				if records, reads := seam.Failures(); records+reads == 0 {
					t.Fatal("no write or read failed after the lost answer; the test proves nothing")
				}
				if res.Verdict != sender.Retry {
					t.Fatalf("sender answered %+v, want a recheck", res)
				}
				e := b.entry(t, id)
				if e.OutboxState != heraldtype.OutboxPending || e.Delivery.State != heraldtype.DeliveryRetryWait {
					t.Fatalf("outbox %s, delivery %+v; want PENDING and RETRY_WAIT", e.OutboxState, e.Delivery)
				}
				seam.Heal()
				b.clk.Advance(e.AvailableAt.Sub(b.clk.Now()))
				testenv.WaitFor(t, "the second attempt", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxDone })
				b.wantSentOnceMore(t, id)
			})
		})
	}
}
