package dispatch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// beats is the claimer's outbox with its heartbeat observed: every lease
// extension is reported on extended (the rows it took), and stop makes the
// extensions do nothing, as a claimer that froze or died would.
type beats struct {
	store.Outbox
	extended chan int
	mu       sync.Mutex
	stopped  bool
}

func (b *beats) OutboxExtend(ctx context.Context, fences []store.Fence, lease time.Duration) (int, error) {
	b.mu.Lock()
	stopped := b.stopped
	b.mu.Unlock()
	n := 0
	var err error
	if !stopped {
		n, err = b.Outbox.OutboxExtend(ctx, fences, lease)
	}
	if err == nil {
		select {
		case b.extended <- n:
		default:
		}
	}
	return n, err
}

func (b *beats) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
}

// next waits for a heartbeat that starts after the call and returns how
// many rows it extended: it drops the report of a beat that may have been
// in flight, then takes the next one.
func (b *beats) next(t *testing.T) int {
	t.Helper()
	select {
	case <-b.extended:
	default:
	}
	testenv.Recv(t, b.extended, "a heartbeat")
	return testenv.Recv(t, b.extended, "the heartbeat after it")
}

// A send that outlasts its lease (held in the provider call) keeps its row
// for as long as the claimer's heartbeat extends it; once the heartbeat
// stops (the claimer froze or died), the row is offered again a lease
// later. On SQLite and PostgreSQL, with the lease measured by the store's
// clock.
func TestHeartbeatKeepsTheRowOfASendInFlight(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		inCall, release := b.holdFirstCall(t, provider.AcceptedOutcome(""))
		out := &beats{Outbox: b.store, extended: make(chan int, 1)}
		const lease = time.Minute
		run(t, dispatch.NewClaimer(dispatch.ClaimerConfig{
			Lane: lane, Store: out, Wake: b.store.Wakeups().C(lane), Sender: b.sender(sender.Hooks{}), Owner: "a",
			// A beat's write may take as long as the interval between beats:
			// 100 ms, not 5, so that a loaded machine's slow round trip to
			// PostgreSQL does not time every beat out.
			Concurrency: 1, Lease: lease, Heartbeat: 100 * time.Millisecond, PollInterval: 5 * time.Millisecond, Alerts: b.alerts,
		}))
		t.Cleanup(release)
		id := b.notify(t, "pay", lane)
		testenv.Recv(t, inCall, "the provider call")

		// Three times two thirds of the lease pass during the call; a beat
		// in each keeps the row.
		for i := range 3 {
			b.clk.Advance(2 * lease / 3)
			if n := out.next(t); n != 1 {
				t.Fatalf("beat %d extended %d rows, want the one in flight", i+1, n)
			}
			if n, err := b.store.OutboxReclaimExpired(b.ctx); err != nil || n != 0 {
				t.Fatalf("after %s in flight the sweep reclaimed %d rows (%v), want none", 2*lease/3*time.Duration(i+1), n, err)
			}
		}
		if e := b.entry(t, id); e.OutboxState != heraldtype.OutboxClaimed {
			t.Fatalf("outbox %s, want still CLAIMED", e.OutboxState)
		}

		// The claimer freezes: its heartbeat no longer extends anything.
		out.stop()
		if n := out.next(t); n != 0 {
			t.Fatalf("a stopped heartbeat extended %d rows", n)
		}
		b.clk.Advance(lease - time.Second)
		if n, err := b.store.OutboxReclaimExpired(b.ctx); err != nil || n != 0 {
			t.Fatalf("a second before the lease ran out the sweep reclaimed %d rows (%v)", n, err)
		}
		b.clk.Advance(2 * time.Second)
		if n, err := b.store.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("after the lease ran out the sweep reclaimed %d rows (%v), want the frozen claimer's", n, err)
		}
		if e := b.entry(t, id); e.OutboxState != heraldtype.OutboxPending || e.OutboxReason != heraldtype.ReasonClaimExpired {
			t.Fatalf("outbox %s (%s), want PENDING (CLAIM_EXPIRED)", e.OutboxState, e.OutboxReason)
		}
	})
}

// Without a row in flight the heartbeat writes nothing.
func TestIdleHeartbeatWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := &beats{Outbox: b.store, extended: make(chan int, 1)}
	run(t, dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: lane, Store: out, Wake: b.store.Wakeups().C(lane), Sender: b.sender(sender.Hooks{}), Owner: "a",
		Concurrency: 4, Lease: time.Minute, Heartbeat: time.Millisecond, PollInterval: 5 * time.Millisecond, Alerts: b.alerts,
	}))
	id := b.notify(t, "pay", lane)
	testenv.WaitFor(t, "the send", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxDone })
	// Beats that raced the send may have been made (the row is held until
	// the claimer has settled it, after the result write); then the
	// heartbeat goes quiet: 50 beats in a row write nothing.
	testenv.WaitFor(t, "the heartbeat to go quiet", testenv.Patience, func() bool {
		select {
		case <-out.extended:
			return false
		case <-time.After(50 * time.Millisecond):
			return true
		}
	})
}
