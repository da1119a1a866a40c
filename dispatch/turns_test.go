package dispatch_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// senderFunc is a dispatch.Sender made of a function.
type senderFunc func(ctx context.Context, job heraldtype.Job) sender.Result

func (f senderFunc) Send(ctx context.Context, job heraldtype.Job) sender.Result { return f(ctx, job) }

// A consumer that frees one slot of the window at a time makes every claim
// a claim of one row, and a relay's published rows are no longer in
// flight, so both tenants wait at the same turn. The ties go round the
// tenants ("Tenants take turns"): the small tenant's row is claimed at the
// next top-up and comes out right behind the window's messages. Broken by
// age, every tie went to the big tenant's older rows and the small
// tenant's row came out after all 100 of them. Each message is taken only
// once every batch published is settled, so no claim finds a row in
// flight.
func TestRelayWindowToppedUpOneRowAtATimeTakesTheTenantsInTurn(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		const window = 10
		notify := func(tenant string) string { return b.notifyAs(t, tenant, "pay", heraldtype.LaneTransactional) }
		for range 100 {
			notify("big")
		}
		var settled atomic.Int64
		q := &queuePublisher{}
		r := dispatch.NewRelay(dispatch.RelayConfig{
			Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
			Publisher: q, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: 5 * time.Millisecond,
			MaxAttempts: 3, Alerts: b.alerts, Window: window, Backlog: q.Backlog, WindowPoll: time.Millisecond,
			Hooks: countSettled(&settled),
		})
		defer runRelay(t, r)()

		testenv.WaitFor(t, "the window filled", testenv.Patience, func() bool { return q.depth() >= window })
		small := store.MessageID(notify("small"), heraldtype.ChannelWebhook)
		consumed, at := 0, -1
		for consumed < 101 && at < 0 {
			var got []heraldtype.Job
			testenv.WaitFor(t, "the window topped up and settled", testenv.Patience, func() bool {
				left := 101 - consumed
				if q.depth() < min(window, left) || settled.Load() < int64(consumed+q.depth()) {
					return false
				}
				got = q.consume(1)
				return len(got) > 0
			})
			if got[0].MessageID == small {
				at = consumed
			}
			consumed++
		}
		if at < 0 || at > window+1 {
			t.Fatalf("the small tenant's message came out after %d of the big tenant's (want at most the window's %d and one)", at, window)
		}
	})
}

// A claimer of one slot often claims after its last send was settled
// (always on SQLite), and then both tenants wait at the same turn. The
// ties go round the tenants: the big tenant's oldest row first ("big"
// comes first in byte order, and the loop has served nobody yet), then the
// small tenant's. Broken by age, the small tenant's row was sent after all
// 60 of the big tenant's. The test frees the slot only once the send is
// settled (no early sender.CallEnded), so on PostgreSQL too no claim
// finds a row in flight.
func TestAClaimerOfOneSlotTakesTheTenantsInTurn(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		for range 60 {
			b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
		}
		small := b.notifyAs(t, "small", "pay", heraldtype.LaneTransactional)
		var mu sync.Mutex
		var order []string
		snd := b.sender(sender.Hooks{})
		rec := senderFunc(func(ctx context.Context, job heraldtype.Job) sender.Result {
			mu.Lock()
			order = append(order, job.NotificationID)
			mu.Unlock()
			return snd.Send(sender.WithCallEnded(ctx, func() {}), job)
		})
		stop := run(t, b.claimer(heraldtype.LaneTransactional, b.store, rec, 1))
		defer stop()
		testenv.WaitFor(t, "the small tenant's row sent", testenv.Patience, func() bool {
			return b.entryOf(t, "small", small).OutboxState == heraldtype.OutboxDone
		})
		mu.Lock()
		defer mu.Unlock()
		if at := slices.Index(order, small); at != 1 {
			t.Fatalf("the small tenant's row was sent after %d of the big tenant's, want right after the first", at)
		}
	})
}

// With Express, a slow consumer lets the window through one row at a time
// for longer than ExpressHold. Each of those full one-row claims gives
// the marked big tenant a row and renews its mark, so its rows keep going
// to the lane queue within the window, and a small tenant's row committed
// while the window is full still goes to the express queue on its
// wake-up, leaving the big tenant's rows. Without the renewal the mark
// lapsed: the big tenant's rows went to the express queue, and with nobody
// marked the small tenant's wake-up took nothing past the window. The test
// gives the wake-ups itself, and the marks' clock: each top-up comes half
// an ExpressHold after the last, six of them, however slow the machine
// (on the wall clock, a loaded CI host once took longer than the hold
// between two top-ups, and the mark rightly lapsed). A row is consumed
// only once every row published is settled: a published row counts
// against the window until its settle, so a consumption taken before it
// could leave the window full at the wake-up's look, with no poll (an
// hour) to look again.
func TestRelayExpressOneRowTopUpsKeepABacklogsMark(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		const window, hold = 4, time.Minute
		for range 60 {
			b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
		}
		wake := make(chan struct{}, 1)
		var settled atomic.Int64
		q := &queuePublisher{}
		r := dispatch.NewRelay(dispatch.RelayConfig{
			Lane: heraldtype.LaneTransactional, Store: b.store, Wake: wake,
			Publisher: q, Owner: "relay", BatchSize: window, Lease: time.Minute, PollInterval: time.Hour,
			MaxAttempts: 3, Alerts: b.alerts, Window: window, Backlog: q.Backlog, WindowPoll: time.Hour,
			Express: true, ExpressHold: hold,
			Hooks: countSettled(&settled),
		})
		var clock atomic.Int64 // the marks' clock, in nanoseconds past start
		start := time.Now()
		dispatch.SetMarkClock(r, func() time.Time { return start.Add(time.Duration(clock.Load())) })
		defer runRelay(t, r)()
		// A full claim of the window's four rows marks the big tenant.
		testenv.WaitFor(t, "the window filled and settled", testenv.Patience, func() bool {
			return q.depth() == window && settled.Load() == window
		})
		const topUps = 6 // three holds past the mark
		for i := range topUps {
			clock.Add(int64(hold / 2))
			q.consume(1)
			wake <- struct{}{}
			testenv.WaitFor(t, "the window topped up and settled", testenv.Patience, func() bool {
				return q.depth() == window && settled.Load() == int64(window+i+1)
			})
		}
		if x := q.tenants(dispatch.ExpressQueue); len(x) != 0 {
			t.Fatalf("after %d one-row top-ups the express queue holds %v, want the big tenant's rows in the lane queue", topUps, x)
		}
		b.notifyAs(t, "small", "pay", heraldtype.LaneTransactional)
		wake <- struct{}{}
		testenv.WaitFor(t, "the small tenant's row in the express queue", testenv.Patience, func() bool {
			return len(q.tenants(dispatch.ExpressQueue)) == 1
		})
		if x := q.tenants(dispatch.ExpressQueue); x[0] != "small" {
			t.Fatalf("express queue holds %v, want the small tenant's row", x)
		}
		if lane := q.tenants(dispatch.LaneQueue); len(lane) != window {
			t.Fatalf("lane queue holds %d messages, want the window's %d", len(lane), window)
		}
	})
}

// A claim of one row shows no backlog (the ties going round, any tenant
// may get it), so one-row claims that go round the tenants mark nobody:
// two tenants with rows due take turns, and every row goes to the express
// queue. (Two one-row claims in a row for the same tenant do mark it:
// TestRelayMarksABacklogSeenOnlyByOneRowClaims.)
func TestRelayExpressClaimsOfOneRowMarkNobody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 3 {
		b.notifyAs(t, "a", "pay", heraldtype.LaneTransactional)
		b.notifyAs(t, "b", "pay", heraldtype.LaneTransactional)
	}
	q := &queuePublisher{}
	r := dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Publisher: q, Owner: "relay", BatchSize: 1, Lease: time.Minute, PollInterval: 5 * time.Millisecond,
		MaxAttempts: 3, Alerts: b.alerts, Express: true, ExpressHold: time.Hour,
	})
	defer runRelay(t, r)()
	testenv.WaitFor(t, "all 6 published", testenv.Patience, func() bool { return q.depth() == 6 })
	if x := q.tenants(dispatch.ExpressQueue); len(x) != 6 {
		t.Fatalf("express queue holds %v, want all 6 rows (lane queue %v)", x, q.tenants(dispatch.LaneQueue))
	}
}
