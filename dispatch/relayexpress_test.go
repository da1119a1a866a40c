package dispatch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/store"
)

// With Express, a tenant whose full claims give it the most rows (a
// backlog) is published to the lane queue, within the window; a tenant
// without one is published to the express queue, and a row it commits
// while the window is full goes at once, on its wake-up, without the
// window's next look (an hour here) and without taking the backlogged
// tenant's rows past the window. Inside a tenant the same holds between
// its scopes: a clinic's rows go to the express queue beside another
// clinic's backlog. Without Express everything goes to the lane queue.
func TestRelayExpressQueueTakesTenantsWithoutABacklog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		big, small party
	}{
		{"tenants", party{"big", ""}, party{"small", ""}},
		{"scopes of a tenant", party{"t1", "clinic-a"}, party{"t1", "clinic-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, b bundle) {
				const window = 7 // one full claim: the big party's mark
				notify := func(p party) string {
					return b.notifyIn(t, p.tenant, p.scope, "r1", "pay", heraldtype.LaneTransactional)
				}
				for range 100 {
					notify(tc.big)
				}
				q := &queuePublisher{}
				r := dispatch.NewRelay(dispatch.RelayConfig{
					Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
					Publisher: q, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: time.Hour,
					MaxAttempts: 3, Alerts: b.alerts, Window: window, Backlog: q.Backlog, WindowPoll: time.Hour,
					Express: true, ExpressHold: time.Hour,
				})
				defer runRelay(t, r)()
				testenv.WaitFor(t, "the window filled", testenv.Patience, func() bool { n, _ := q.Backlog(b.ctx); return n >= window })

				notify(tc.small)
				notify(tc.small)
				testenv.WaitFor(t, "the small party's two rows in the express queue", testenv.Patience, func() bool {
					return len(q.parties(dispatch.ExpressQueue)) == 2
				})
				for _, p := range q.parties(dispatch.ExpressQueue) {
					if p != tc.small {
						t.Fatalf("express queue holds %v, want only the small party's rows", q.parties(dispatch.ExpressQueue))
					}
				}
				lane := q.parties(dispatch.LaneQueue)
				if len(lane) != window {
					t.Fatalf("lane queue holds %d messages, want the window's %d (the backlogged party's rows past it stay in the outbox)", len(lane), window)
				}
				for _, p := range lane {
					if p != tc.big {
						t.Fatalf("lane queue holds %v, want only the big party's rows", lane)
					}
				}
			})
		})
	}
}

// A backlog that only one-row claims ever see (a relay started during a
// drain behind a full window, taking one row a claim) is still marked:
// from the tenant's second row in a row on its rows go to the lane queue,
// not all of them to the express queue, and a small tenant's row still
// goes to the express queue.
func TestRelayMarksABacklogSeenOnlyByOneRowClaims(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		notify := func(tenant string) string { return b.notifyAs(t, tenant, "pay", heraldtype.LaneTransactional) }
		const n = 20
		for range n {
			notify("big")
		}
		q := &queuePublisher{}
		defer runRelay(t, oneRowRelay(b, q, b.store))()
		testenv.WaitFor(t, "the big tenant's rows published", testenv.Patience, func() bool { n2, _ := q.Backlog(b.ctx); return n2 == n })
		if express := q.tenants(dispatch.ExpressQueue); len(express) > 1 {
			t.Fatalf("%d of the big tenant's %d rows went to the express queue; want its first at most", len(express), n)
		}
		notify("small")
		testenv.WaitFor(t, "the small tenant's row in the express queue", testenv.Patience, func() bool {
			for _, tn := range q.tenants(dispatch.ExpressQueue) {
				if tn == "small" {
					return true
				}
			}
			return false
		})
	})
}

// oneRowRelay is a relay with the express queue that claims one row at a
// time (BatchSize 1), with room in its window, publishing to q.
func oneRowRelay(b bundle, q *queuePublisher, st store.Outbox) *dispatch.Relay {
	return dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: st, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Publisher: q, Owner: "relay", BatchSize: 1, Lease: time.Minute, PollInterval: 20 * time.Millisecond,
		MaxAttempts: 3, Alerts: b.alerts, Window: 1000, Backlog: q.Backlog, WindowPoll: time.Hour,
		Express: true, ExpressHold: time.Hour,
	})
}

// emptyClaims counts the claims that found no row due.
type emptyClaims struct {
	store.Outbox
	n atomic.Int64
}

func (e *emptyClaims) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	rows, err := e.Outbox.OutboxClaim(ctx, p)
	if err == nil && len(rows) == 0 {
		e.n.Add(1)
	}
	return rows, err
}

// A tenant's rows claimed one at a time with nothing of its due between
// them (a claim that found nothing came in between) are no backlog: two
// rows of a small tenant sent apart both go to the express queue.
func TestRelayRowsApartAreNoBacklog(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		q := &queuePublisher{}
		st := &emptyClaims{Outbox: b.store}
		defer runRelay(t, oneRowRelay(b, q, st))()
		for i := range 2 {
			b.notifyAs(t, "small", "pay", heraldtype.LaneTransactional)
			testenv.WaitFor(t, "the small tenant's row published", testenv.Patience, func() bool { n, _ := q.Backlog(b.ctx); return n == i+1 })
			// Apart: a claim after it found nothing due.
			seen := st.n.Load()
			testenv.WaitFor(t, "a claim that found nothing", testenv.Patience, func() bool { return st.n.Load() > seen })
		}
		if express := q.tenants(dispatch.ExpressQueue); len(express) != 2 {
			t.Fatalf("express queue holds %v, lane queue %v; want both of the small tenant's rows in the express queue", express, q.tenants(dispatch.LaneQueue))
		}
	})
}

// Without Express, a small tenant's row goes to the lane queue like the
// big tenant's, at the window's next look.
func TestRelayWithoutExpressPublishesToTheLaneQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 30 {
		b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
	}
	b.notifyAs(t, "small", "pay", heraldtype.LaneTransactional)
	q := &queuePublisher{}
	r := dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Publisher: q, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: 5 * time.Millisecond,
		MaxAttempts: 3, Alerts: b.alerts,
	})
	defer runRelay(t, r)()
	testenv.WaitFor(t, "all 31 published", testenv.Patience, func() bool { return len(q.tenants(dispatch.LaneQueue)) == 31 })
	if x := q.tenants(dispatch.ExpressQueue); len(x) != 0 {
		t.Fatalf("express queue holds %v without Express", x)
	}
}

// The wake-up for a small tenant's row may be taken before the relay finds
// the window full: by the wait after a short claim that ended it, and the
// cooldown after. It still sends the row to the express queue at once,
// not at the window's next look (an hour here). The test gives the wake-ups
// itself, and fills the window as another process's relay would. The
// window's rows are consumed once they are settled (a published row counts
// against the window until then, and nothing would look again).
func TestRelayExpressUsesAWakeUpTakenBeforeTheWindowFilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const window = 7
	for range window + 2 {
		b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
	}
	wake := make(chan struct{}, 1)
	var settled atomic.Int64
	q := &queuePublisher{}
	r := dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: wake,
		Publisher: q, Owner: "relay", BatchSize: window, Lease: time.Minute, PollInterval: time.Hour,
		MaxAttempts: 3, Alerts: b.alerts, Window: window, Backlog: q.Backlog, WindowPoll: time.Hour,
		Express: true, ExpressHold: time.Hour, Cooldown: 200 * time.Millisecond,
		Hooks: countSettled(&settled),
	})
	defer runRelay(t, r)()
	// A full claim marks the big tenant and fills the window.
	testenv.WaitFor(t, "the window filled and settled", testenv.Patience, func() bool {
		return q.depth() == window && settled.Load() == window
	})
	q.consume(window)
	// Its last two rows: a claim that comes back short (a cooldown), and
	// the loop waits for a wake-up with the window open.
	wake <- struct{}{}
	testenv.WaitFor(t, "the big tenant's last two rows", testenv.Patience, func() bool {
		return len(q.tenants(dispatch.LaneQueue)) == 2
	})
	q.publishedElsewhere(window-2, "other")
	small := b.notifyAs(t, "small", "pay", heraldtype.LaneTransactional)
	wake <- struct{}{}
	testenv.WaitFor(t, "the small tenant's row in the express queue", testenv.Patience, func() bool {
		return len(q.tenants(dispatch.ExpressQueue)) == 1
	})
	if got := q.tenants(dispatch.ExpressQueue); got[0] != "small" {
		t.Fatalf("express queue holds %v, want the small tenant's row", got)
	}
	testenv.WaitFor(t, "the small tenant's row marked published", testenv.Patience, func() bool {
		return b.entryOf(t, "small", small).OutboxState == heraldtype.OutboxPublished
	})
}
