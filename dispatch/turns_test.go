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
			Hooks: dispatch.RelayHooks{AfterSettle: func(published, retried int) { settled.Add(int64(published + retried)) }},
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
