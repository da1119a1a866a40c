package dispatch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// claimTimes wraps the outbox to record when each claim began, its limit
// and how many rows it took.
type claimTimes struct {
	store.Outbox
	mu     sync.Mutex
	claims []timedClaim
}

type timedClaim struct {
	began       time.Time
	limit, took int
}

func (c *claimTimes) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	began := time.Now()
	rows, err := c.Outbox.OutboxClaim(ctx, p)
	c.mu.Lock()
	c.claims = append(c.claims, timedClaim{began: began, limit: p.Limit, took: len(rows)})
	c.mu.Unlock()
	return rows, err
}

func (c *claimTimes) get() []timedClaim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]timedClaim(nil), c.claims...)
}

// tookIt returns the first claim that took a row at or after claim from.
func (c *claimTimes) tookIt(t *testing.T, from int) timedClaim {
	t.Helper()
	var got timedClaim
	testenv.WaitFor(t, "a claim that takes the row", testenv.Patience, func() bool {
		for _, cl := range c.get()[from:] {
			if cl.took > 0 {
				got = cl
				return true
			}
		}
		return false
	})
	return got
}

// cooldownCases runs a loop that claims from out with cooldown: the
// claimer's, then the relay's.
var cooldownCases = []struct {
	name  string
	start func(t *testing.T, b bundle, out store.Outbox, cooldown time.Duration) (stop func())
	done  heraldtype.OutboxState
}{
	{"claimer", func(t *testing.T, b bundle, out store.Outbox, cooldown time.Duration) func() {
		return run(t, dispatch.NewClaimer(dispatch.ClaimerConfig{
			Lane: heraldtype.LaneTransactional, Store: out, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
			Sender: b.sender(sender.Hooks{}), Owner: "c", Concurrency: 4, Cooldown: cooldown,
			Lease: time.Minute, PollInterval: time.Hour, MaxAttempts: 3, Alerts: b.alerts,
		}))
	}, heraldtype.OutboxDone},
	{"relay", func(t *testing.T, b bundle, out store.Outbox, cooldown time.Duration) func() {
		return runRelay(t, dispatch.NewRelay(dispatch.RelayConfig{
			Lane: heraldtype.LaneTransactional, Store: out, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
			Publisher: &fakePublisher{published: map[string]int{}}, Owner: "relay", BatchSize: 4, Cooldown: cooldown,
			Lease: time.Minute, PollInterval: time.Hour, MaxAttempts: 3, Alerts: b.alerts,
		}))
	}, heraldtype.OutboxPublished},
}

// A loop whose claim came back short (the lane caught up) begins its next
// claim no sooner than Cooldown after it, however soon a row and its
// wake-up come; the first claim of a loop waits for nothing.
func TestAClaimThatCameBackShortCoolsDown(t *testing.T) {
	t.Parallel()
	const cooldown = time.Second
	for _, tc := range cooldownCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			out := &claimTimes{Outbox: b.store}
			start := time.Now()
			stop := tc.start(t, b, out, cooldown)
			defer stop()
			testenv.WaitFor(t, "the first claim", testenv.Patience, func() bool { return len(out.get()) == 1 })
			first := out.get()[0]
			if first.took != 0 {
				t.Fatalf("the first claim took %d rows of an empty outbox", first.took)
			}
			if wait := first.began.Sub(start); wait >= cooldown {
				t.Fatalf("the first claim began %s after the start, not at once", wait)
			}
			id := b.notify(t, "pay", heraldtype.LaneTransactional) // wakes the lane
			took := out.tookIt(t, 1)
			if gap := took.began.Sub(first.began); gap < cooldown {
				t.Fatalf("the claim after one that came back short began %s after it, within the cooldown (%s)", gap, cooldown)
			}
			testenv.WaitFor(t, "the row to be handed on", testenv.Patience, func() bool {
				return b.entry(t, id).OutboxState == tc.done
			})
		})
	}
}

// A claim that came back full (a backlog) is followed by the next at once:
// with an hour's cooldown, ten rows go out in claims of four, four and
// two; and the claim that took the last two came back short, so a row
// posted after it waits.
func TestABacklogIsClaimedWithoutCooldown(t *testing.T) {
	t.Parallel()
	for _, tc := range cooldownCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var posted []string
			for range 10 {
				posted = append(posted, b.notify(t, "pay", heraldtype.LaneTransactional))
			}
			out := &claimTimes{Outbox: b.store}
			stop := tc.start(t, b, out, time.Hour)
			defer stop()
			for _, id := range posted {
				testenv.WaitFor(t, "every row of the backlog to be handed on", testenv.Patience, func() bool {
					return b.entry(t, id).OutboxState == tc.done
				})
			}
			took := 0
			for _, cl := range out.get() {
				took += cl.took
			}
			if took != 10 {
				t.Fatalf("claims %+v took %d rows, want 10", out.get(), took)
			}
			// The loop's last claim comes back short (none may be left
			// for it, or it found the outbox empty).
			testenv.WaitFor(t, "a claim that comes back short", testenv.Patience, func() bool {
				all := out.get()
				last := all[len(all)-1]
				return last.took < last.limit
			})
			claims := len(out.get())
			late := b.notify(t, "pay", heraldtype.LaneTransactional)
			// Whatever the loop does next, it is not a claim: the last
			// one came back short an hour's cooldown ago at most.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-t.Context().Done():
			}
			if n := len(out.get()); n != claims {
				t.Fatalf("%d claims after the backlog's last came back short, within the cooldown", n-claims)
			}
			if s := b.entry(t, late).OutboxState; s != heraldtype.OutboxPending {
				t.Fatalf("a row posted within the cooldown is %s, want PENDING", s)
			}
		})
	}
}
