package dispatch_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// tookIt returns the first claim that took a row at or after claim from.
func (c *claimLog) tookIt(t *testing.T, from int) loggedClaim {
	t.Helper()
	var got loggedClaim
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

// A loop whose claim took two rows (CoolAfter) but came back short (the
// lane caught up) begins its next claim no sooner than Cooldown after it,
// however soon the next row and its wake-up come; the first claim of a
// loop waits for nothing.
func TestAClaimThatCameBackShortCoolsDown(t *testing.T) {
	t.Parallel()
	const cooldown = time.Second
	for _, tc := range cooldownCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			first := []string{b.notify(t, "pay", heraldtype.LaneTransactional), b.notify(t, "pay", heraldtype.LaneTransactional)}
			out := &claimLog{Outbox: b.store}
			start := time.Now()
			stop := tc.start(t, b, out, cooldown)
			defer stop()
			took := out.tookIt(t, 0)
			if wait := took.began.Sub(start); wait >= cooldown {
				t.Fatalf("the first claim began %s after the start, not at once", wait)
			}
			if took.took != dispatch.CoolAfter || took.limit <= dispatch.CoolAfter {
				t.Fatalf("the first claim took %d of %d rows, want %d of more", took.took, took.limit, dispatch.CoolAfter)
			}
			for _, id := range first {
				testenv.WaitFor(t, "the first rows to be handed on", testenv.Patience, func() bool {
					return b.entry(t, id).OutboxState == tc.done
				})
			}
			claims := out.count()
			next := b.notify(t, "pay", heraldtype.LaneTransactional) // wakes the lane
			again := out.tookIt(t, claims)
			if gap := again.began.Sub(took.began); gap < cooldown {
				t.Fatalf("the claim after one that came back short began %s after it, within the cooldown (%s)", gap, cooldown)
			}
			testenv.WaitFor(t, "the next row to be handed on", testenv.Patience, func() bool {
				return b.entry(t, next).OutboxState == tc.done
			})
		})
	}
}

// A claim that took fewer than CoolAfter rows starts no cooldown: with an
// hour's, a row posted after a loop's first claim found the outbox empty
// is claimed on its wake-up, and so is one posted after that row's claim.
// And a claim that came back full (a backlog) is followed by the next at
// once: ten rows go out in claims of at most four.
func TestASmallClaimOrABacklogHasNoCooldown(t *testing.T) {
	t.Parallel()
	for _, tc := range cooldownCases {
		t.Run(tc.name+", small", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			out := &claimLog{Outbox: b.store}
			stop := tc.start(t, b, out, time.Hour)
			defer stop()
			testenv.WaitFor(t, "the first claim", testenv.Patience, func() bool { return out.count() > 0 })
			if c := out.get()[0]; c.took != 0 {
				t.Fatalf("the first claim took %d rows of an empty outbox", c.took)
			}
			for _, after := range []string{"an empty claim", "a claim of one row"} {
				id := b.notify(t, "pay", heraldtype.LaneTransactional)
				testenv.WaitFor(t, "the row posted after "+after+" to be handed on", testenv.Patience, func() bool {
					return b.entry(t, id).OutboxState == tc.done
				})
			}
		})
		t.Run(tc.name+", backlog", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var posted []string
			for range 10 {
				posted = append(posted, b.notify(t, "pay", heraldtype.LaneTransactional))
			}
			out := &claimLog{Outbox: b.store}
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
				if cl.took > 4 {
					t.Fatalf("a claim took %d rows, more than the loop's limit of 4", cl.took)
				}
			}
			if took != 10 {
				t.Fatalf("claims %+v took %d rows, want 10", out.get(), took)
			}
		})
	}
}
