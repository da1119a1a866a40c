package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// keyLease is the lease of the suite's takes.
const keyLease = 10 * time.Minute

// eventKey is t1's recipient r1's event e1 of kind k, on ch ("": every
// channel).
func eventKey(ch heraldtype.Channel) store.EventKey {
	return store.EventKey{Tenant: "t1", Recipient: "r1", EventID: "e1", Kind: "k", Channel: ch}
}

// takeKey runs EventKeyTake for owner with keyLease; an error fails the
// test.
func takeKey(t *testing.T, b bundle, k store.EventKey, owner string) store.EventKeyTakeResult {
	t.Helper()
	res, err := b.s.EventKeyTake(b.ctx, store.EventKeyTakeParams{Key: k, Owner: owner, Lease: keyLease})
	if err != nil {
		t.Fatalf("EventKeyTake %+v for %s: %v", k, owner, err)
	}
	return res
}

// wantTake fails the test unless got is want, its lease to the
// millisecond (SQLite keeps milliseconds).
func wantTake(t *testing.T, what string, got, want store.EventKeyTakeResult) {
	t.Helper()
	if got.Outcome != want.Outcome || got.Owner != want.Owner || got.Previous != want.Previous ||
		got.LeaseUntil.Sub(want.LeaseUntil).Abs() >= time.Millisecond {
		t.Fatalf("%s: %s owner %q previous %q lease until %s; want %s owner %q previous %q lease until %s", what,
			got.Outcome, got.Owner, got.Previous, got.LeaseUntil, want.Outcome, want.Owner, want.Previous, want.LeaseUntil)
	}
}

// takenOver counts the keys taken over since; an error fails the test.
func takenOver(t *testing.T, b bundle, since time.Time) int {
	t.Helper()
	n, err := b.s.EventKeysTakenOver(b.ctx, since)
	if err != nil {
		t.Fatalf("EventKeysTakenOver: %v", err)
	}
	return n
}

// purgeKeys runs EventKeyPurge; an error fails the test.
func purgeKeys(t *testing.T, b bundle, keep time.Duration, limit int) int {
	t.Helper()
	n, err := b.s.EventKeyPurge(b.ctx, store.EventKeyPurgeParams{Keep: keep, Limit: limit})
	if err != nil {
		t.Fatalf("EventKeyPurge: %v", err)
	}
	return n
}

// owning creates a notification of t1's r1 planning sends on chs, moves
// each planned send to state(its channel) as the sender would ("": no
// delivery row), and returns the notification's id.
func owning(t *testing.T, b bundle, chs []heraldtype.Channel, state func(heraldtype.Channel) heraldtype.DeliveryState) string {
	t.Helper()
	p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Channels = chs })
	v, err := b.s.NotificationGet(b.ctx, "t1", p.ID)
	if err != nil {
		t.Fatalf("NotificationGet: %v", err)
	}
	for _, d := range v.Deliveries {
		moveTo(t, b, p.ID, d, state(d.Channel))
	}
	return p.ID
}

// moveTo writes planned send d of notification id into state as the
// sender (and its provider's report, for DELIVERED) would.
func moveTo(t *testing.T, b bundle, id string, d store.DeliveryView, state heraldtype.DeliveryState) {
	t.Helper()
	switch state {
	case "":
		return
	case heraldtype.DeliverySuppressed, heraldtype.DeliveryParked:
		ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: d.MessageID, NotificationID: id, Tenant: "t1",
			Channel: d.Channel, State: state, Reason: "R"})
		if err != nil || !ok {
			t.Fatalf("decide %s for %s: %v %v", state, d.MessageID, ok, err)
		}
		return
	}
	if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: d.MessageID, NotificationID: id, Tenant: "t1",
		Channel: d.Channel, Provider: "p", Owner: "w"}); !res.Claimed {
		t.Fatalf("claim %s: %+v", d.MessageID, res)
	}
	recorded := state
	if state == heraldtype.DeliveryDelivered {
		recorded = heraldtype.DeliveryProviderAccepted
	}
	if state != heraldtype.DeliverySending && !record(t, b, d.MessageID, 1, recorded, time.Minute) {
		t.Fatalf("record %s for %s", recorded, d.MessageID)
	}
	if state == heraldtype.DeliveryDelivered {
		out, err := b.s.DeliveryReport(b.ctx, store.ReportParams{Provider: "p", MessageID: d.MessageID,
			From: []heraldtype.DeliveryState{heraldtype.DeliveryProviderAccepted}, To: heraldtype.DeliveryDelivered, Reason: "REPORT"})
		if err != nil || !out.Moved {
			t.Fatalf("the provider's report for %s did not settle it: %+v, %v", d.MessageID, out, err)
		}
	}
}

func testEventKeys(t *testing.T, h Harness) {
	t.Run("TakenThenTheOwnersRetryGoesOnAndAnotherIsHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		k := eventKey("")
		wantTake(t, "first take", takeKey(t, b, k, "n1"),
			store.EventKeyTakeResult{Outcome: store.EventKeyTaken, Owner: "n1", LeaseUntil: Epoch.Add(keyLease)})
		b.clk.Advance(time.Minute)
		wantTake(t, "the owner again", takeKey(t, b, k, "n1"),
			store.EventKeyTakeResult{Outcome: store.EventKeyOwned, Owner: "n1", LeaseUntil: b.clk.Now().Add(keyLease)})
		wantTake(t, "another notification", takeKey(t, b, k, "n2"),
			store.EventKeyTakeResult{Outcome: store.EventKeyHeld, Owner: "n1", LeaseUntil: b.clk.Now().Add(keyLease)})
		// An extension never shortens the lease.
		res, err := b.s.EventKeyTake(b.ctx, store.EventKeyTakeParams{Key: k, Owner: "n1", Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wantTake(t, "the owner with a shorter lease", res,
			store.EventKeyTakeResult{Outcome: store.EventKeyOwned, Owner: "n1", LeaseUntil: b.clk.Now().Add(keyLease)})
		if n := takenOver(t, b, Epoch); n != 0 {
			t.Fatalf("%d keys taken over, want 0", n)
		}
	})
	t.Run("EveryPartOfTheKeyCounts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		base := eventKey("")
		takeKey(t, b, base, "n1")
		for _, k := range []store.EventKey{
			{Tenant: "t2", Recipient: "r1", EventID: "e1", Kind: "k"},
			{Tenant: "t1", Recipient: "r2", EventID: "e1", Kind: "k"},
			{Tenant: "t1", Recipient: "r1", EventID: "e2", Kind: "k"},
			{Tenant: "t1", Recipient: "r1", EventID: "e1", Kind: "k2"},
			eventKey(heraldtype.ChannelPush),
			eventKey(heraldtype.ChannelSMS),
		} {
			wantTake(t, fmt.Sprintf("key %+v", k), takeKey(t, b, k, "n2"),
				store.EventKeyTakeResult{Outcome: store.EventKeyTaken, Owner: "n2", LeaseUntil: Epoch.Add(keyLease)})
		}
	})
	t.Run("AnExpiredLeaseWithNothingSentIsTakenOverOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		k := eventKey("")
		takeKey(t, b, k, "n1")
		b.clk.Advance(keyLease - time.Millisecond)
		if res := takeKey(t, b, k, "n2"); res.Outcome != store.EventKeyHeld {
			t.Fatalf("a millisecond before the lease ends: %s, want held", res.Outcome)
		}
		b.clk.Advance(time.Millisecond)
		at := b.clk.Now()
		wantTake(t, "at the lease's end, its owner having no send", takeKey(t, b, k, "n2"),
			store.EventKeyTakeResult{Outcome: store.EventKeyTakenOver, Owner: "n2", Previous: "n1", LeaseUntil: at.Add(keyLease)})
		wantTake(t, "the old owner comes back", takeKey(t, b, k, "n1"),
			store.EventKeyTakeResult{Outcome: store.EventKeyHeld, Owner: "n2", LeaseUntil: at.Add(keyLease)})
		wantTake(t, "the new owner again", takeKey(t, b, k, "n2"),
			store.EventKeyTakeResult{Outcome: store.EventKeyOwned, Owner: "n2", LeaseUntil: at.Add(keyLease)})
		if n := takenOver(t, b, at); n != 1 {
			t.Fatalf("%d keys taken over since the takeover, want 1", n)
		}
		if n := takenOver(t, b, at.Add(time.Millisecond)); n != 0 {
			t.Fatalf("%d keys taken over after the takeover, want 0", n)
		}
	})
	t.Run("TheOwnersSendsHoldTheKeyAfterItsLeaseByState", func(t *testing.T) {
		t.Parallel()
		for _, state := range []heraldtype.DeliveryState{
			"", heraldtype.DeliverySending, heraldtype.DeliveryRetryWait, heraldtype.DeliveryProviderAccepted,
			heraldtype.DeliveryDelivered, heraldtype.DeliveryUnknown, heraldtype.DeliveryPermanentFailure,
			heraldtype.DeliveryRetryExhausted, heraldtype.DeliverySuppressed, heraldtype.DeliveryParked,
		} {
			t.Run(fmt.Sprintf("%q", state), func(t *testing.T) {
				t.Parallel()
				b := setup(t, h)
				k := eventKey("")
				owner := owning(t, b, []heraldtype.Channel{heraldtype.ChannelWebhook},
					func(heraldtype.Channel) heraldtype.DeliveryState { return state })
				takeKey(t, b, k, owner)
				b.clk.Advance(keyLease)
				want := store.EventKeyTakeResult{Outcome: store.EventKeyTakenOver, Owner: "n2", Previous: owner, LeaseUntil: b.clk.Now().Add(keyLease)}
				if store.EventKeyHolding(state) {
					want = store.EventKeyTakeResult{Outcome: store.EventKeyHeld, Owner: owner, LeaseUntil: Epoch.Add(keyLease)}
				}
				wantTake(t, "after the lease", takeKey(t, b, k, "n2"), want)
			})
		}
	})
	t.Run("OnlyTheOwnersSendsUnderTheKeyHoldIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		device := putDevice(t, b, "r1", "token-1", store.PlatformAPNs)
		// The push went to the recipient's device; the SMS was refused.
		owner := owning(t, b, []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelSMS}, func(ch heraldtype.Channel) heraldtype.DeliveryState {
			if ch == heraldtype.ChannelSMS {
				return heraldtype.DeliveryPermanentFailure
			}
			if ch != heraldtype.DeviceSend(heraldtype.ChannelPush, device) {
				t.Fatalf("planned send on %s, want the device's", ch)
			}
			return heraldtype.DeliveryProviderAccepted
		})
		keys := []store.EventKey{eventKey(""), eventKey(heraldtype.ChannelPush), eventKey(heraldtype.ChannelSMS)}
		for _, k := range keys {
			takeKey(t, b, k, owner)
		}
		b.clk.Advance(keyLease)
		for _, k := range keys {
			want := store.EventKeyHeld
			if k.Channel == heraldtype.ChannelSMS {
				want = store.EventKeyTakenOver
			}
			if res := takeKey(t, b, k, "n2"); res.Outcome != want {
				t.Fatalf("key on %q after the lease: %s, want %s", k.Channel, res.Outcome, want)
			}
		}
	})
	t.Run("ConcurrentTakesOfOneKeyHaveOneWinner", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		k := eventKey("")
		const n = 12
		race := func(round string, want store.EventKeyOutcome) string {
			t.Helper()
			results := make([]store.EventKeyTakeResult, n)
			errs := make([]error, n)
			var ready, done sync.WaitGroup
			ready.Add(n)
			start := make(chan struct{})
			for i := range n {
				done.Go(func() {
					ready.Done()
					<-start
					results[i], errs[i] = b.s.EventKeyTake(b.ctx, store.EventKeyTakeParams{Key: k, Owner: fmt.Sprintf("%s-%d", round, i), Lease: keyLease})
				})
			}
			ready.Wait()
			close(start)
			wait(t, &done, "the takes")
			winner := ""
			for i, res := range results {
				switch {
				case errs[i] != nil:
					t.Fatalf("%s: EventKeyTake: %v", round, errs[i])
				case res.Outcome == want && winner == "":
					winner = res.Owner
				case res.Outcome != store.EventKeyHeld:
					t.Fatalf("%s: take %d is %s (owner %s), want held after %s", round, i, res.Outcome, res.Owner, winner)
				}
			}
			for i, res := range results {
				if res.Outcome == store.EventKeyHeld && res.Owner != winner {
					t.Fatalf("%s: take %d was held by %q, want the winner %q", round, i, res.Owner, winner)
				}
			}
			if winner == "" {
				t.Fatalf("%s: no take won", round)
			}
			return winner
		}
		first := race("first", store.EventKeyTaken)
		b.clk.Advance(keyLease)
		if second := race("second", store.EventKeyTakenOver); second == first {
			t.Fatalf("the takeover's winner is the first owner %q", first)
		}
		if got := takenOver(t, b, Epoch); got != 1 {
			t.Fatalf("%d keys taken over, want 1", got)
		}
	})
	t.Run("PurgeDeletesKeysKeepPastTheirLeaseOldestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const keep = time.Hour
		for i := range 5 {
			takeKey(t, b, store.EventKey{Tenant: "t1", Recipient: "r1", EventID: fmt.Sprintf("old-%d", i), Kind: "k"}, "n1")
			b.clk.Advance(time.Second)
		}
		b.clk.Advance(keep + keyLease)
		fresh := eventKey("")
		takeKey(t, b, fresh, "n2")
		if n := purgeKeys(t, b, keep, 3); n != 3 {
			t.Fatalf("first batch deleted %d, want 3", n)
		}
		// The three oldest went: old-3 and old-4 are still there.
		for i, want := range []store.EventKeyOutcome{store.EventKeyTaken, store.EventKeyTaken, store.EventKeyTaken, store.EventKeyOwned, store.EventKeyOwned} {
			k := store.EventKey{Tenant: "t1", Recipient: "r1", EventID: fmt.Sprintf("old-%d", i), Kind: "k"}
			if res := takeKey(t, b, k, "n1"); res.Outcome != want {
				t.Fatalf("old-%d after the first batch: %s, want %s", i, res.Outcome, want)
			}
		}
		// Those takes gave every old key a new lease: nothing is due.
		if n := purgeKeys(t, b, keep, 3); n != 0 {
			t.Fatalf("purged %d keys whose lease just began, want 0", n)
		}
		b.clk.Advance(keep + keyLease)
		if n := purgeKeys(t, b, keep, 10); n != 0 {
			t.Fatalf("purged %d keys whose lease ended exactly keep ago, want 0", n)
		}
		b.clk.Advance(time.Millisecond)
		if n := purgeKeys(t, b, keep, 10); n != 6 {
			t.Fatalf("purged %d, want all 6", n)
		}
		wantTake(t, "the fresh key after its purge", takeKey(t, b, fresh, "n3"),
			store.EventKeyTakeResult{Outcome: store.EventKeyTaken, Owner: "n3", LeaseUntil: b.clk.Now().Add(keyLease)})
	})
}

// testClaimTakes: a claim with an event key (store.DeliveryClaimParams.
// Event) takes it first, by EventKeyTake's rule; a key another
// notification holds claims nothing, and a key that cannot be taken
// fails the claim with store.ErrEventKeys and writes nothing.
func testClaimTakes(t *testing.T, h Harness) {
	webhook := []heraldtype.Channel{heraldtype.ChannelWebhook}
	none := func(heraldtype.Channel) heraldtype.DeliveryState { return "" }
	withKey := func(id string) store.DeliveryClaimParams {
		p := sendClaim(id)
		p.Event = &store.EventKeyTakeParams{Key: eventKey(""), Owner: id, Lease: keyLease}
		return p
	}
	t.Run("TheClaimTakesTheKeyFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		n1, n2 := owning(t, b, webhook, none), owning(t, b, webhook, none)
		res := claimDelivery(t, b, withKey(n1))
		if !res.Claimed || res.Attempt != 1 {
			t.Fatalf("the first claim with the key: %+v", res)
		}
		wantTake(t, "the first claim's take", res.Event,
			store.EventKeyTakeResult{Outcome: store.EventKeyTaken, Owner: n1, LeaseUntil: Epoch.Add(keyLease)})
		res = claimDelivery(t, b, withKey(n2))
		if res.Claimed || res.Current != nil {
			t.Fatalf("another notification's claim under the key: %+v, want nothing claimed", res)
		}
		wantTake(t, "another notification's take", res.Event,
			store.EventKeyTakeResult{Outcome: store.EventKeyHeld, Owner: n1, LeaseUntil: Epoch.Add(keyLease)})
		wantNoDelivery(t, b, n2)
		// The owner's retry takes its own key again with the claim.
		if !record(t, b, store.MessageID(n1, heraldtype.ChannelWebhook), 1, heraldtype.DeliveryRetryWait, time.Minute) {
			t.Fatal("record RETRY_WAIT")
		}
		b.clk.Advance(time.Minute)
		res = claimDelivery(t, b, withKey(n1))
		if !res.Claimed || res.Attempt != 2 {
			t.Fatalf("the owner's retry: %+v", res)
		}
		wantTake(t, "the owner's retry's take", res.Event,
			store.EventKeyTakeResult{Outcome: store.EventKeyOwned, Owner: n1, LeaseUntil: b.clk.Now().Add(keyLease)})
		// A claim without a key takes none.
		if res := claimDelivery(t, b, sendClaim(n2)); !res.Claimed || res.Event.Outcome != 0 {
			t.Fatalf("a claim without a key: %+v", res)
		}
	})
	t.Run("AKeyThatCannotBeTakenFailsTheClaimWithNothingWritten", func(t *testing.T) {
		if h.Exec == nil {
			t.Skip("the harness runs no statements")
		}
		t.Parallel()
		b := setup(t, h)
		n1 := owning(t, b, webhook, none)
		h.Exec(t, b.s, "ALTER TABLE event_keys RENAME TO event_keys_away")
		_, err := b.s.DeliveryClaim(b.ctx, withKey(n1))
		if !errors.Is(err, store.ErrEventKeys) {
			t.Fatalf("a claim whose key cannot be taken: %v, want store.ErrEventKeys", err)
		}
		wantNoDelivery(t, b, n1)
		if res := claimDelivery(t, b, sendClaim(n1)); !res.Claimed {
			t.Fatalf("the claim again without the key: %+v", res)
		}
	})
}
