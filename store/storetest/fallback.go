package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/cancel"
	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The channels of the chains below: push (with the recipient's devices),
// then AlimTalk, then SMS, the inbox apart.
var chainChannels = []heraldtype.Channel{heraldtype.ChannelInbox, heraldtype.ChannelPush, heraldtype.ChannelAlimTalk, heraldtype.ChannelSMS}

// chainCreate writes a notification of a first kind for recipient (t1)
// over chainChannels, after registering one push device per token.
func chainCreate(t *testing.T, b bundle, recipient string, mutate func(p *store.NotificationCreateParams), tokens ...string) store.NotificationCreateParams {
	t.Helper()
	for _, tok := range tokens {
		putDevice(t, b, recipient, tok, store.PlatformFCM)
	}
	p, res := create(t, b, func(p *store.NotificationCreateParams) {
		p.Recipient, p.Channels, p.Fallback = recipient, chainChannels, true
		p.Inbox = []store.InboxText{{Title: "t", Body: "b"}}
		if mutate != nil {
			mutate(p)
		}
	})
	if res.Outcome != store.Created {
		t.Fatalf("create: %+v", res)
	}
	return p
}

// step is one planned send as a test states it: the read API's state and
// reason, and the chain's decision and after.
type step struct {
	State, Reason, Decision, After string
}

func (s step) String() string {
	return fmt.Sprintf("%s(%s) %s after %q", s.State, s.Reason, s.Decision, s.After)
}

// steps reads notification id's planned sends by message id.
func steps(t *testing.T, b bundle, id string) map[string]step {
	t.Helper()
	v, err := b.s.NotificationGet(b.ctx, "t1", id)
	if err != nil {
		t.Fatalf("NotificationGet %s: %v", id, err)
	}
	out := map[string]step{}
	for _, dv := range v.Deliveries {
		s := step{Decision: dv.FallbackDecision()}
		s.State, s.Reason, _ = v.EntryState(dv)
		if dv.Fallback != nil {
			s.After = dv.Fallback.After
		}
		out[dv.MessageID] = s
	}
	return out
}

// wantSteps fails unless the sends named in want are as stated.
func wantSteps(t *testing.T, b bundle, id string, want map[string]step) {
	t.Helper()
	got := steps(t, b, id)
	for mid, w := range want {
		if g, ok := got[mid]; !ok || g != w {
			t.Errorf("%s: %v, want %v", mid, g, w)
		}
	}
}

// claimed claims the lane's due rows and returns them by message id.
func claimed(t *testing.T, b bundle, publishing bool) map[string]store.Claimed {
	t.Helper()
	rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w1", Limit: 100,
		Lease: time.Minute, Publishing: publishing})
	if err != nil {
		t.Fatalf("OutboxClaim: %v", err)
	}
	out := map[string]store.Claimed{}
	for _, r := range rows {
		out[r.MessageID] = r
	}
	return out
}

// endSend ends the claimed row as the sender would, in one store call: a
// provider call's result (claim, then DeliveryRecord settling the outbox
// row) or a pre-check's decision (DeliveryDecide).
func endSend(t *testing.T, b bundle, row store.Claimed, state heraldtype.DeliveryState, reason string) {
	t.Helper()
	if state == heraldtype.DeliverySuppressed || state == heraldtype.DeliveryParked {
		if !decideOnJob(t, b, row, state, reason) {
			t.Fatalf("decide %s %s: not written", row.MessageID, state)
		}
		return
	}
	res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
		Tenant: row.Tenant, Channel: row.Channel, Provider: "p", Owner: "w"})
	if !res.Claimed {
		t.Fatalf("claim %s: %+v", row.MessageID, res)
	}
	rec, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: res.Attempt, State: state,
		Reason: reason, RetryDelay: time.Minute, Owner: "w", Class: "x", StartedAt: b.clk.Now(), Outbox: &row.Fence})
	if err != nil || !rec.Recorded || !rec.OutboxSettled {
		t.Fatalf("record %s %s: %+v (%v)", row.MessageID, state, rec, err)
	}
}

// cancelWhileSending creates a chain for r1, claims its push row and
// delivery (SENDING), and cancels the notification; it returns the
// notification, push's claimed row and its delivery claim.
func cancelWhileSending(t *testing.T, b bundle) (store.NotificationCreateParams, store.Claimed, store.DeliveryClaimResult) {
	t.Helper()
	p := chainCreate(t, b, "r1", nil)
	push := store.MessageID(p.ID, heraldtype.ChannelPush)
	row := claimed(t, b, false)[push]
	res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: push, NotificationID: p.ID, Tenant: "t1", Channel: heraldtype.ChannelPush, Provider: "p", Owner: "w"})
	cancelOf(t, b, p.ID)
	return p, row, res
}

// cancelWhileSendingThen is cancelWhileSending, then push's call ends in
// state (a retry a minute later for RETRY_WAIT), recorded under the claim
// it had before the cancel, settling its outbox row.
func cancelWhileSendingThen(t *testing.T, b bundle, state heraldtype.DeliveryState) store.NotificationCreateParams {
	t.Helper()
	p, row, res := cancelWhileSending(t, b)
	if rec, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: res.Attempt, State: state,
		RetryDelay: time.Minute, Owner: "w", Class: "x", StartedAt: b.clk.Now(), Outbox: &row.Fence}); err != nil || !rec.Recorded || !rec.OutboxSettled {
		t.Fatalf("record %s: %+v (%v)", state, rec, err)
	}
	return p
}

// claimEndsTheChain claims the first step's claimed row of notification
// p, whose cancel the claim must find, ending the send
// SUPPRESSED(CANCELLED) without claiming it; it finishes the outbox row
// as its owner does, and fails unless the later sends are then as later
// and nothing waits.
func claimEndsTheChain(t *testing.T, b bundle, p store.NotificationCreateParams, row store.Claimed, later step, laterSends ...string) {
	t.Helper()
	if c := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: p.ID, Tenant: "t1", Channel: row.Channel,
		Provider: "p", Owner: "w"}); c.Claimed || !c.Cancelled {
		t.Fatalf("the claim after the cancel = %+v; want the send ended by it", c)
	}
	if ok, err := b.s.OutboxComplete(b.ctx, row.Fence, heraldtype.OutboxDone, cancel.ReasonCancelled); err != nil || !ok {
		t.Fatalf("complete: %v %v", ok, err)
	}
	want := map[string]step{row.MessageID: {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Decision: fallback.DecisionFirst}}
	for _, mid := range laterSends {
		want[mid] = later
	}
	wantSteps(t, b, p.ID, want)
	wantChainEnded(t, b)
}

// wantChainEnded fails unless, an hour on, the watchdog finds no WAITING
// row without an owner and nothing of the lane is due.
func wantChainEnded(t *testing.T, b bundle) {
	t.Helper()
	b.clk.Advance(time.Hour)
	if got := findAll(t, b, store.UnownedWaiting, 5*time.Minute); len(got) != 0 {
		t.Fatalf("the watchdog found %+v", got)
	}
	if got := claimed(t, b, false); len(got) != 0 {
		t.Fatalf("claimed %v after the chain ended", got)
	}
}

// ending is how a test ends a send, and the cause the next step records.
type ending struct {
	state  heraldtype.DeliveryState
	reason string
	after  string
}

func testFallback(t *testing.T, h Harness) {
	t.Run("IntakeWritesTheFirstStepPendingAndTheRestWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := chainCreate(t, b, "r1", nil, "tok-a", "tok-b")
		devA, devB := store.DeviceID("t1", "r1", "tok-a"), store.DeviceID("t1", "r1", "tok-b")
		pushA := store.MessageID(p.ID, heraldtype.DeviceSend(heraldtype.ChannelPush, devA))
		pushB := store.MessageID(p.ID, heraldtype.DeviceSend(heraldtype.ChannelPush, devB))
		alim, sms := store.MessageID(p.ID, heraldtype.ChannelAlimTalk), store.MessageID(p.ID, heraldtype.ChannelSMS)
		inbox := store.MessageID(p.ID, heraldtype.ChannelInbox)
		wantSteps(t, b, p.ID, map[string]step{
			inbox: {State: "STORED", Reason: "STORED"},
			pushA: {State: "PENDING", Decision: fallback.DecisionFirst},
			pushB: {State: "PENDING", Decision: fallback.DecisionFirst},
			alim:  {State: "WAITING", Decision: fallback.DecisionWaiting},
			sms:   {State: "WAITING", Decision: fallback.DecisionWaiting},
		})
		// Neither the relay's claim nor a claimer's takes a WAITING row.
		for _, publishing := range []bool{true, false} {
			got := claimed(t, b, publishing)
			if len(got) != 2 || got[pushA].MessageID == "" || got[pushB].MessageID == "" {
				t.Fatalf("claim (publishing %v) took %v, want the two push rows", publishing, got)
			}
			b.clk.Advance(2 * time.Minute) // the leases run out
			if _, err := b.s.OutboxReclaimExpired(b.ctx); err != nil {
				t.Fatal(err)
			}
		}
		// The listing's state filter computes WAITING as the view does.
		if got := idsOf(list(t, b, store.NotificationListParams{Tenant: "t1", State: "WAITING", Limit: 10})); len(got) != 1 || got[0] != p.ID {
			t.Fatalf("listed WAITING: %v, want %s", got, p.ID)
		}
	})

	t.Run("DefiniteFailureReleasesTheNextStepInTheRecordsWrite", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, end := range []ending{
			{heraldtype.DeliveryPermanentFailure, "UNREGISTERED", "PERMANENT_FAILURE"},
			{heraldtype.DeliveryRetryExhausted, "HTTP_503", "RETRY_EXHAUSTED"},
			{heraldtype.DeliverySuppressed, heraldtype.ReasonDestinationUnavailable, heraldtype.ReasonDestinationUnavailable},
			{heraldtype.DeliverySuppressed, heraldtype.ReasonConsentDenied, heraldtype.ReasonConsentDenied},
		} {
			p := chainCreate(t, b, "r-"+end.after, nil)
			push, alim, sms := store.MessageID(p.ID, heraldtype.ChannelPush), store.MessageID(p.ID, heraldtype.ChannelAlimTalk), store.MessageID(p.ID, heraldtype.ChannelSMS)
			rows := claimed(t, b, false)
			endSend(t, b, rows[push], end.state, end.reason)
			// The write that ended push released AlimTalk: it is due now,
			// and the next claim takes it.
			wantSteps(t, b, p.ID, map[string]step{
				alim: {State: "PENDING", Decision: fallback.DecisionUsed, After: end.after},
				sms:  {State: "WAITING", Decision: fallback.DecisionWaiting},
			})
			next := claimed(t, b, false)
			if len(next) != 1 || next[alim].MessageID == "" {
				t.Fatalf("after push %s: claimed %v, want AlimTalk", end.state, next)
			}
			// AlimTalk accepted: SMS is not needed.
			endSend(t, b, next[alim], heraldtype.DeliveryProviderAccepted, "")
			wantSteps(t, b, p.ID, map[string]step{
				alim: {State: "PROVIDER_ACCEPTED", Decision: fallback.DecisionUsed, After: end.after},
				sms:  {State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"},
			})
			if got := claimed(t, b, false); len(got) != 0 {
				t.Fatalf("claimed %v after the chain ended", got)
			}
		}
	})

	// The dispatcher that gives a step's row up (FAILED, its attempts
	// spent) before any delivery row made no call: a definite failure,
	// whose write releases the next step as a send's does, for the
	// claimers (CLAIMED) and the relay (PUBLISHING) alike. A row whose
	// message has a delivery leaves the chain to that delivery's end.
	t.Run("TheDispatchersFailedReleasesTheNextStepInItsWrite", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, publishing := range []bool{false, true} {
			p := chainCreate(t, b, fmt.Sprintf("r-failed-%v", publishing), nil)
			push, alim, sms := store.MessageID(p.ID, heraldtype.ChannelPush), store.MessageID(p.ID, heraldtype.ChannelAlimTalk), store.MessageID(p.ID, heraldtype.ChannelSMS)
			rows := claimed(t, b, publishing)
			if ok, err := b.s.OutboxComplete(b.ctx, rows[push].Fence, heraldtype.OutboxFailed, heraldtype.ReasonStoreUnavailable); err != nil || !ok {
				t.Fatalf("fail push: %v %v", ok, err)
			}
			wantSteps(t, b, p.ID, map[string]step{
				alim: {State: "PENDING", Decision: fallback.DecisionUsed, After: "FAILED"},
				sms:  {State: "WAITING", Decision: fallback.DecisionWaiting},
			})
			if next := claimed(t, b, publishing); len(next) != 1 || next[alim].MessageID == "" {
				t.Fatalf("after push FAILED: claimed %v, want AlimTalk", next)
			}
		}
		// A step whose send waits for a retry: its row FAILED moves nothing.
		p := chainCreate(t, b, "r-failed-retry", nil)
		push, alim := store.MessageID(p.ID, heraldtype.ChannelPush), store.MessageID(p.ID, heraldtype.ChannelAlimTalk)
		rows := claimed(t, b, false)
		endSend(t, b, rows[push], heraldtype.DeliveryRetryWait, "HTTP_429")
		b.clk.Advance(time.Minute)
		rows = claimed(t, b, false)
		if ok, err := b.s.OutboxComplete(b.ctx, rows[push].Fence, heraldtype.OutboxFailed, heraldtype.ReasonStoreUnavailable); err != nil || !ok {
			t.Fatalf("fail push: %v %v", ok, err)
		}
		wantSteps(t, b, p.ID, map[string]step{alim: {State: "WAITING", Decision: fallback.DecisionWaiting}})
	})

	t.Run("AnyOtherEndSkipsTheRest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, end := range []ending{
			{heraldtype.DeliveryProviderAccepted, "", "PROVIDER_ACCEPTED"},
			{heraldtype.DeliveryUnknown, "TIMEOUT", "UNKNOWN"},
			{heraldtype.DeliverySuppressed, heraldtype.ReasonQuietHours, heraldtype.ReasonQuietHours},
			{heraldtype.DeliverySuppressed, heraldtype.ReasonExpired, heraldtype.ReasonExpired},
		} {
			p := chainCreate(t, b, "r-"+end.after, nil)
			push := store.MessageID(p.ID, heraldtype.ChannelPush)
			endSend(t, b, claimed(t, b, false)[push], end.state, end.reason)
			skipped := step{State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: end.after}
			wantSteps(t, b, p.ID, map[string]step{
				store.MessageID(p.ID, heraldtype.ChannelAlimTalk): skipped,
				store.MessageID(p.ID, heraldtype.ChannelSMS):      skipped,
			})
			if got := claimed(t, b, false); len(got) != 0 {
				t.Fatalf("after push %s: claimed %v, want nothing", end.state, got)
			}
		}
	})

	t.Run("RetryWaitAndParkedHoldTheChainUntilTheyEnd", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := chainCreate(t, b, "r1", nil)
		push, alim := store.MessageID(p.ID, heraldtype.ChannelPush), store.MessageID(p.ID, heraldtype.ChannelAlimTalk)
		endSend(t, b, claimed(t, b, false)[push], heraldtype.DeliveryRetryWait, "HTTP_429")
		wantSteps(t, b, p.ID, map[string]step{alim: {State: "WAITING", Decision: fallback.DecisionWaiting}})
		// The retry (its outbox row due again after a minute) is parked.
		b.clk.Advance(time.Minute)
		row := claimed(t, b, false)[push]
		if row.MessageID == "" {
			t.Fatal("the retry was not offered")
		}
		if !decideOnJob(t, b, row, heraldtype.DeliveryParked, heraldtype.ReasonTemplateMissing) {
			t.Fatal("park: not written")
		}
		wantSteps(t, b, p.ID, map[string]step{alim: {State: "WAITING", Decision: fallback.DecisionWaiting}})
		// A person discards it: not a failure of the recipient's channel,
		// and the discard's write skips the rest.
		if !discard(t, b, store.ParkedDiscardParams{Tenant: "t1", MessageID: push, Reason: "wrong template", Actor: "api:t1"}) {
			t.Fatal("discard: not written")
		}
		wantSteps(t, b, p.ID, map[string]step{
			alim: {State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: heraldtype.ReasonDiscarded},
		})
		// A broker's parked copy discarded: the same.
		q := chainCreate(t, b, "r2", nil)
		qpush := store.MessageID(q.ID, heraldtype.ChannelPush)
		if !decideOnJob(t, b, claimed(t, b, false)[qpush], heraldtype.DeliveryParked, heraldtype.ReasonTemplateMissing) {
			t.Fatal("park: not written")
		}
		if !discard(t, b, store.ParkedDiscardParams{Tenant: "t1", MessageID: qpush, Broker: true, NotificationID: q.ID,
			Channel: heraldtype.ChannelPush, ParkedReason: heraldtype.ReasonTemplateMissing, Reason: "wrong template", Actor: "api:t1"}) {
			t.Fatal("broker discard: not written")
		}
		wantSteps(t, b, q.ID, map[string]step{
			store.MessageID(q.ID, heraldtype.ChannelAlimTalk): {State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: heraldtype.ReasonDiscarded},
		})
	})

	t.Run("APushStepFailsOnlyWhenEveryDeviceFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// Two devices, two outcomes: one dead and one accepted skips the
		// rest; both dead, each in its own write, releases AlimTalk once.
		for i, second := range []heraldtype.DeliveryState{heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryPermanentFailure} {
			r := fmt.Sprintf("r%d", i)
			p := chainCreate(t, b, r, nil, "tok-a", "tok-b")
			alim := store.MessageID(p.ID, heraldtype.ChannelAlimTalk)
			var pushes []store.Claimed
			for _, row := range claimed(t, b, false) {
				pushes = append(pushes, row)
			}
			if len(pushes) != 2 {
				t.Fatalf("claimed %d push rows, want 2", len(pushes))
			}
			endSend(t, b, pushes[0], heraldtype.DeliveryPermanentFailure, "UNREGISTERED")
			wantSteps(t, b, p.ID, map[string]step{alim: {State: "WAITING", Decision: fallback.DecisionWaiting}})
			endSend(t, b, pushes[1], second, "")
			want := step{State: "PENDING", Decision: fallback.DecisionUsed, After: "PERMANENT_FAILURE"}
			if second == heraldtype.DeliveryProviderAccepted {
				want = step{State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"}
			}
			wantSteps(t, b, p.ID, map[string]step{alim: want})
			for _, row := range claimed(t, b, false) {
				endSend(t, b, row, heraldtype.DeliveryProviderAccepted, "")
			}
		}
	})

	t.Run("TwoDevicesFailingAtOnceReleaseTheNextStepOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const n = 10
		var ps []store.NotificationCreateParams
		for i := range n {
			ps = append(ps, chainCreate(t, b, fmt.Sprintf("r%d", i), nil, "tok-a", "tok-b"))
		}
		rows := claimed(t, b, false)
		if len(rows) != 2*n {
			t.Fatalf("claimed %d rows, want %d", len(rows), 2*n)
		}
		for _, row := range rows {
			res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
				Tenant: row.Tenant, Channel: row.Channel, Provider: "p", Owner: "w"})
			if !res.Claimed {
				t.Fatalf("claim %s", row.MessageID)
			}
		}
		// Every push result written at once, each in its own write.
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, len(rows))
		for _, row := range rows {
			wg.Go(func() {
				<-start
				rec, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: 1,
					State: heraldtype.DeliveryPermanentFailure, Reason: "UNREGISTERED", Owner: "w", Class: "permanent",
					StartedAt: b.clk.Now(), Outbox: &row.Fence})
				if err == nil && !rec.Recorded {
					err = fmt.Errorf("%s not recorded", row.MessageID)
				}
				errs <- err
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range ps {
			wantSteps(t, b, p.ID, map[string]step{
				store.MessageID(p.ID, heraldtype.ChannelAlimTalk): {State: "PENDING", Decision: fallback.DecisionUsed, After: "PERMANENT_FAILURE"},
				store.MessageID(p.ID, heraldtype.ChannelSMS):      {State: "WAITING", Decision: fallback.DecisionWaiting},
			})
		}
		if got := claimed(t, b, false); len(got) != n {
			t.Fatalf("claimed %d AlimTalk rows, want %d", len(got), n)
		}
	})

	t.Run("AWriteThatDoesNotTakeMovesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := chainCreate(t, b, "r1", nil)
		push, alim := store.MessageID(p.ID, heraldtype.ChannelPush), store.MessageID(p.ID, heraldtype.ChannelAlimTalk)
		row := claimed(t, b, false)[push]
		if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: push, NotificationID: p.ID, Tenant: "t1",
			Channel: heraldtype.ChannelPush, Provider: "p", Owner: "w"}); !res.Claimed {
			t.Fatal("claim")
		}
		// A result for another attempt, and a decision over the claim:
		// neither takes, and neither moves the chain.
		if record(t, b, push, 2, heraldtype.DeliveryPermanentFailure, 0) {
			t.Fatal("a result for attempt 2 was recorded over attempt 1's claim")
		}
		if decideOnJob(t, b, row, heraldtype.DeliverySuppressed, heraldtype.ReasonDestinationUnavailable) {
			t.Fatal("a decision was written over a claim")
		}
		wantSteps(t, b, p.ID, map[string]step{alim: {State: "WAITING", Decision: fallback.DecisionWaiting}})
		// A second result for the attempt already recorded: no second count.
		if !record(t, b, push, 1, heraldtype.DeliveryPermanentFailure, 0) || record(t, b, push, 1, heraldtype.DeliveryPermanentFailure, 0) {
			t.Fatal("record once")
		}
		wantSteps(t, b, p.ID, map[string]step{alim: {State: "PENDING", Decision: fallback.DecisionUsed, After: "PERMANENT_FAILURE"}})
	})

	t.Run("OffAChainASendEndsAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, res := create(t, b, func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelSMS}
		})
		rows := claimed(t, b, false)
		push, sms := store.MessageID(res.ID, heraldtype.ChannelPush), store.MessageID(res.ID, heraldtype.ChannelSMS)
		if len(rows) != 2 {
			t.Fatalf("claimed %v, want both channels at once", rows)
		}
		endSend(t, b, rows[push], heraldtype.DeliveryPermanentFailure, "BAD")
		wantSteps(t, b, res.ID, map[string]step{sms: {State: "PENDING"}})
	})

	t.Run("ExpirySkipsTheWaitingSteps", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		due := Epoch.Add(time.Hour)
		p := chainCreate(t, b, "r1", func(p *store.NotificationCreateParams) { p.ExpiresAt = &due })
		b.clk.Advance(2 * time.Hour)
		expired, err := b.s.OutboxExpire(b.ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		// Only the step that was due expired (and alerts); the waiting
		// steps end with it, quietly.
		if len(expired) != 1 || expired[0].MessageID != store.MessageID(p.ID, heraldtype.ChannelPush) {
			t.Fatalf("expired %+v, want push alone", expired)
		}
		skipped := step{State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: "EXPIRED"}
		wantSteps(t, b, p.ID, map[string]step{
			store.MessageID(p.ID, heraldtype.ChannelAlimTalk): skipped,
			store.MessageID(p.ID, heraldtype.ChannelSMS):      skipped,
		})
	})

	t.Run("AnErasureEndsTheWaitingSteps", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := chainCreate(t, b, "r1", nil)
		eraseAll(t, b, "t1", "r1", 10)
		erased := step{State: "SUPPRESSED", Reason: store.ReasonErased, Decision: fallback.DecisionSkipped, After: store.ReasonErased}
		wantSteps(t, b, p.ID, map[string]step{
			store.MessageID(p.ID, heraldtype.ChannelPush):     {State: "SUPPRESSED", Reason: store.ReasonErased, Decision: fallback.DecisionFirst},
			store.MessageID(p.ID, heraldtype.ChannelAlimTalk): erased,
			store.MessageID(p.ID, heraldtype.ChannelSMS):      erased,
		})
		// Nothing is left for the watchdog once push's row is finished.
		b.clk.Advance(time.Hour)
		if got := findAll(t, b, store.UnownedWaiting, 5*time.Minute); len(got) != 0 {
			t.Fatalf("found %+v after the erasure", got)
		}
	})

	t.Run("TheWatchdogsUnknownSkipsTheRest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := chainCreate(t, b, "r1", nil)
		push := store.MessageID(p.ID, heraldtype.ChannelPush)
		claimed(t, b, false)
		claimDelivery(t, b, store.DeliveryClaimParams{MessageID: push, NotificationID: p.ID, Tenant: "t1", Channel: heraldtype.ChannelPush, Provider: "p", Owner: "w"})
		b.clk.Advance(time.Hour)
		// The stale sweep did not run: the watchdog's UNKNOWN, the sweep's
		// write, skips the rest of the chain as the sweep's does.
		if moved := redrive(t, b, wantFound(t, b, store.UnownedSending, 10*time.Minute, push)); len(moved) != 1 {
			t.Fatalf("moved %+v, want push", moved)
		}
		skipped := step{State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: "UNKNOWN"}
		wantSteps(t, b, p.ID, map[string]step{
			store.MessageID(p.ID, heraldtype.ChannelAlimTalk): skipped,
			store.MessageID(p.ID, heraldtype.ChannelSMS):      skipped,
		})
	})

	t.Run("AnErasureLeavesASkippedStepSkipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := chainCreate(t, b, "r1", nil)
		push := store.MessageID(p.ID, heraldtype.ChannelPush)
		endSend(t, b, claimed(t, b, false)[push], heraldtype.DeliveryProviderAccepted, "")
		// The steps not needed have ended: the erasure suppresses none of
		// them, and they stay SKIPPED.
		if sum := eraseTotals(eraseAll(t, b, "t1", "r1", 10)); len(sum.Suppressed) != 0 {
			t.Fatalf("the erasure suppressed %+v, want nothing", sum.Suppressed)
		}
		skipped := step{State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"}
		wantSteps(t, b, p.ID, map[string]step{
			store.MessageID(p.ID, heraldtype.ChannelAlimTalk): skipped,
			store.MessageID(p.ID, heraldtype.ChannelSMS):      skipped,
		})
	})

	t.Run("TheStaleSweepsUnknownSkipsTheRest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := chainCreate(t, b, "r1", nil)
		push := store.MessageID(p.ID, heraldtype.ChannelPush)
		claimed(t, b, false)
		claimDelivery(t, b, store.DeliveryClaimParams{MessageID: push, NotificationID: p.ID, Tenant: "t1", Channel: heraldtype.ChannelPush, Provider: "p", Owner: "w"})
		b.clk.Advance(time.Hour)
		if stale, err := b.s.DeliverySweepStale(b.ctx, 10*time.Minute); err != nil || len(stale) != 1 {
			t.Fatalf("stale sweep: %+v (%v)", stale, err)
		}
		wantSteps(t, b, p.ID, map[string]step{
			store.MessageID(p.ID, heraldtype.ChannelAlimTalk): {State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: "UNKNOWN"},
		})
	})

	t.Run("ACancelSuppressesWaitingSteps", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// Push is SENDING when the cancel comes: it is left alone, the
		// waiting steps are suppressed; push then fails and releases
		// AlimTalk's row, which finds its delivery ended and sends nothing.
		p, row, res := cancelWhileSending(t, b)
		push, alim, sms := store.MessageID(p.ID, heraldtype.ChannelPush), store.MessageID(p.ID, heraldtype.ChannelAlimTalk), store.MessageID(p.ID, heraldtype.ChannelSMS)
		// AlimTalk's cancel is its end, and that write skips SMS's row.
		wantSteps(t, b, p.ID, map[string]step{
			push: {State: "SENDING", Decision: fallback.DecisionFirst},
			alim: {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Decision: fallback.DecisionWaiting},
			sms:  {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Decision: fallback.DecisionSkipped, After: cancel.ReasonCancelled},
		})
		if rec, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: push, Attempt: res.Attempt, State: heraldtype.DeliveryPermanentFailure,
			Owner: "w", Class: "permanent", StartedAt: b.clk.Now(), Outbox: &row.Fence}); err != nil || !rec.Recorded {
			t.Fatalf("record: %+v (%v)", rec, err)
		}
		next := claimed(t, b, false)
		if len(next) != 1 || next[alim].MessageID == "" {
			t.Fatalf("claimed %v, want the released AlimTalk row", next)
		}
		if c := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: alim, NotificationID: p.ID, Tenant: "t1", Channel: heraldtype.ChannelAlimTalk, Provider: "p", Owner: "w"}); c.Claimed {
			t.Fatal("a cancelled fallback step was claimed")
		}
		wantSteps(t, b, p.ID, map[string]step{
			alim: {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Decision: fallback.DecisionUsed, After: "PERMANENT_FAILURE"},
			sms:  {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Decision: fallback.DecisionSkipped, After: cancel.ReasonCancelled},
		})

		// Cancelled before push was sent: every step ends at once.
		q := chainCreate(t, b, "r2", nil)
		cancelOf(t, b, q.ID)
		for mid, s := range steps(t, b, q.ID) {
			if mid != store.MessageID(q.ID, heraldtype.ChannelInbox) && (s.State != "SUPPRESSED" || s.Reason != cancel.ReasonCancelled) {
				t.Errorf("%s after the cancel: %v", mid, s)
			}
		}
		if got := claimed(t, b, false); len(got) != 1 || got[store.MessageID(q.ID, heraldtype.ChannelPush)].MessageID == "" {
			t.Fatalf("claimed %v, want only the cancelled push row (to finish it)", got)
		}
	})

	// The send in flight at the cancel fails for now: its retry's claim
	// ends it SUPPRESSED(CANCELLED), and that end skips the steps after
	// it, as any end does, so no WAITING row is left without an owner.
	t.Run("ACancelWhileSendingThenARetryEndsTheChain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := cancelWhileSendingThen(t, b, heraldtype.DeliveryRetryWait)
		push := store.MessageID(p.ID, heraldtype.ChannelPush)
		b.clk.Advance(time.Minute)
		again := claimed(t, b, false)
		if len(again) != 1 || again[push].MessageID == "" {
			t.Fatalf("claimed %v, want push's row at its retry", again)
		}
		claimEndsTheChain(t, b, p, again[push], step{State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Decision: fallback.DecisionSkipped, After: cancel.ReasonCancelled},
			store.MessageID(p.ID, heraldtype.ChannelAlimTalk), store.MessageID(p.ID, heraldtype.ChannelSMS))
	})

	// A cancel that failed after its mark decided nothing: the first
	// step's claim ends it SUPPRESSED(CANCELLED), and that end skips the
	// steps after it, so no WAITING row is left without an owner.
	// Both shapes of chain: one whose later steps are written when
	// needed (fallback.go, "Lazy chains"), and one written whole at
	// intake (a later step is push), whose WAITING rows the end must
	// skip itself.
	t.Run("AMarkAloneEndsTheChainAtTheFirstClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		skipped := step{State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: cancel.ReasonCancelled}
		p := chainCreate(t, b, "r1", nil)
		push := store.MessageID(p.ID, heraldtype.ChannelPush)
		if err := b.s.NotificationCancelMark(b.ctx, "t1", p.ID); err != nil {
			t.Fatal(err)
		}
		rows := claimed(t, b, false)
		if len(rows) != 1 || rows[push].MessageID == "" {
			t.Fatalf("claimed %v, want push's row", rows)
		}
		claimEndsTheChain(t, b, p, rows[push], skipped,
			store.MessageID(p.ID, heraldtype.ChannelAlimTalk), store.MessageID(p.ID, heraldtype.ChannelSMS))

		q := chainCreate(t, b, "r2", func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelInbox, heraldtype.ChannelAlimTalk, heraldtype.ChannelPush, heraldtype.ChannelSMS}
		}, "tok-a")
		if store.LazyPlan(q) != nil {
			t.Fatal("a chain with a later push step is written lazily; this test means one written whole")
		}
		alim := store.MessageID(q.ID, heraldtype.ChannelAlimTalk)
		if err := b.s.NotificationCancelMark(b.ctx, "t1", q.ID); err != nil {
			t.Fatal(err)
		}
		rows = claimed(t, b, false)
		if len(rows) != 1 || rows[alim].MessageID == "" {
			t.Fatalf("claimed %v, want AlimTalk's row", rows)
		}
		claimEndsTheChain(t, b, q, rows[alim], skipped,
			store.MessageID(q.ID, heraldtype.DeviceSend(heraldtype.ChannelPush, store.DeviceID("t1", "r2", "tok-a"))),
			store.MessageID(q.ID, heraldtype.ChannelSMS))
	})

	// A cancel while the first step is being sent suppresses the waiting
	// steps; the send's acceptance, recorded under the claim it had before
	// the cancel, then ends the chain as any acceptance does: nothing is
	// left waiting, for the claim or the watchdog.
	t.Run("ACancelWhileSendingThenAnAcceptanceEndsTheChain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := cancelWhileSendingThen(t, b, heraldtype.DeliveryProviderAccepted)
		push, alim, sms := store.MessageID(p.ID, heraldtype.ChannelPush), store.MessageID(p.ID, heraldtype.ChannelAlimTalk), store.MessageID(p.ID, heraldtype.ChannelSMS)
		wantSteps(t, b, p.ID, map[string]step{
			push: {State: "PROVIDER_ACCEPTED", Decision: fallback.DecisionFirst},
			alim: {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Decision: fallback.DecisionSkipped, After: "PROVIDER_ACCEPTED"},
			sms:  {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Decision: fallback.DecisionSkipped, After: cancel.ReasonCancelled},
		})
		wantChainEnded(t, b)
	})

	// A chain ends with the first end that is not a definite failure; a
	// report or receipt that later moves that send elsewhere, even to a
	// definite failure, does not reopen it: the steps stay skipped after
	// the end they had, and nothing becomes due.
	t.Run("AMoveAfterTheEndKeepsTheChainEnded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		skipped := func(after string) step {
			return step{State: "SKIPPED", Reason: fallback.ReasonNotNeeded, Decision: fallback.DecisionSkipped, After: after}
		}
		for _, c := range []struct {
			name string
			end  heraldtype.DeliveryState
			move func(t *testing.T, mid string)
		}{
			{"ReportFailsAnAcceptedSend", heraldtype.DeliveryProviderAccepted, func(t *testing.T, mid string) {
				out, err := b.s.DeliveryReport(b.ctx, store.ReportParams{Provider: "p", MessageID: mid,
					From: []heraldtype.DeliveryState{heraldtype.DeliveryProviderAccepted}, To: heraldtype.DeliveryPermanentFailure, Reason: "EXPIRED_ON_HANDSET"})
				if err != nil || !out.Moved {
					t.Fatalf("report: %+v (%v)", out, err)
				}
			}},
			{"ReportFailsAnUnknownSend", heraldtype.DeliveryUnknown, func(t *testing.T, mid string) {
				out, err := b.s.DeliveryReport(b.ctx, store.ReportParams{Provider: "p", MessageID: mid,
					From: []heraldtype.DeliveryState{heraldtype.DeliveryUnknown}, To: heraldtype.DeliveryPermanentFailure, Reason: "REJECTED"})
				if err != nil || !out.Moved {
					t.Fatalf("report: %+v (%v)", out, err)
				}
			}},
			{"ReceiptDeliversAnAcceptedSend", heraldtype.DeliveryProviderAccepted, func(t *testing.T, mid string) {
				if out, err := b.s.DeliveryReceipt(b.ctx, "t1", "r-receipt", mid); err != nil || out.Result != store.ReceiptDelivered {
					t.Fatalf("receipt: %+v (%v)", out, err)
				}
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				recipient := "r-" + c.name
				if c.name == "ReceiptDeliversAnAcceptedSend" {
					recipient = "r-receipt"
				}
				p := chainCreate(t, b, recipient, nil)
				push, alim, sms := store.MessageID(p.ID, heraldtype.ChannelPush), store.MessageID(p.ID, heraldtype.ChannelAlimTalk), store.MessageID(p.ID, heraldtype.ChannelSMS)
				endSend(t, b, claimed(t, b, false)[push], c.end, "")
				want := map[string]step{alim: skipped(string(c.end)), sms: skipped(string(c.end))}
				wantSteps(t, b, p.ID, want)
				c.move(t, push)
				wantSteps(t, b, p.ID, want)
				if got := claimed(t, b, false); len(got) != 0 {
					t.Fatalf("claimed %v after the move", got)
				}
				// The listing's state filter computes SKIPPED as the view does.
				found := false
				for _, id := range idsOf(list(t, b, store.NotificationListParams{Tenant: "t1", Recipient: recipient, State: "SKIPPED", Limit: 10})) {
					found = found || id == p.ID
				}
				if !found {
					t.Fatalf("listed SKIPPED for %s: not %s", recipient, p.ID)
				}
				if got := idsOf(list(t, b, store.NotificationListParams{Tenant: "t1", Recipient: recipient, State: "WAITING", Limit: 10})); len(got) != 0 {
					t.Fatalf("listed WAITING: %v, want none", got)
				}
			})
		}
	})

	t.Run("TheWatchdogRepairsAChainWhoseEndDidNotMoveIt", func(t *testing.T) {
		t.Parallel()
		if h.Exec == nil {
			t.Skip("the harness cannot break rows")
		}
		b := setup(t, h)
		grace := 5 * time.Minute
		// lost: push failed, but the release was lost (put back by hand).
		// failed: push's outbox row ended FAILED (the dispatcher gave up
		// before any delivery), its release lost too.
		// busy: push waits for a retry; its chain is owned.
		lost, failed, busy := chainCreate(t, b, "r1", nil), chainCreate(t, b, "r2", nil), chainCreate(t, b, "r3", nil)
		pushOf := func(p store.NotificationCreateParams) string { return store.MessageID(p.ID, heraldtype.ChannelPush) }
		alimOf := func(p store.NotificationCreateParams) string {
			return store.MessageID(p.ID, heraldtype.ChannelAlimTalk)
		}
		rows := claimed(t, b, false)
		endSend(t, b, rows[pushOf(lost)], heraldtype.DeliveryPermanentFailure, "UNREGISTERED")
		h.Exec(t, b.s, "UPDATE outbox SET state = 'WAITING', fallback_fails = 0, fallback_after = NULL WHERE message_id = '"+alimOf(lost)+"'")
		if ok, err := b.s.OutboxComplete(b.ctx, rows[pushOf(failed)].Fence, heraldtype.OutboxFailed, heraldtype.ReasonStoreUnavailable); err != nil || !ok {
			t.Fatalf("fail push: %v %v", ok, err)
		}
		h.Exec(t, b.s, "UPDATE outbox SET state = 'WAITING', fallback_fails = 0, fallback_after = NULL WHERE message_id = '"+alimOf(failed)+"'")
		endSend(t, b, rows[pushOf(busy)], heraldtype.DeliveryRetryWait, "HTTP_429")

		// Within the grace of those ends, every chain is still owned.
		if got := findAll(t, b, store.UnownedWaiting, grace); len(got) != 0 {
			t.Fatalf("found %+v within the grace", got)
		}
		b.clk.Advance(grace + time.Second)
		// Each SMS row waits for its AlimTalk row, which is still WAITING:
		// owned by it. busy's push waits for its retry however long.
		found := wantFound(t, b, store.UnownedWaiting, grace, alimOf(lost), alimOf(failed))
		if moved := redrive(t, b, found); len(moved) != 2 {
			t.Fatalf("moved %+v, want both", moved)
		}
		wantSteps(t, b, lost.ID, map[string]step{
			alimOf(lost): {State: "PENDING", Decision: fallback.DecisionUsed, After: "PERMANENT_FAILURE"},
			store.MessageID(lost.ID, heraldtype.ChannelSMS): {State: "WAITING", Decision: fallback.DecisionWaiting},
		})
		wantSteps(t, b, failed.ID, map[string]step{
			alimOf(failed): {State: "PENDING", Decision: fallback.DecisionUsed, After: "FAILED"},
			store.MessageID(failed.ID, heraldtype.ChannelSMS): {State: "WAITING", Decision: fallback.DecisionWaiting},
		})
		wantSteps(t, b, busy.ID, map[string]step{alimOf(busy): {State: "WAITING", Decision: fallback.DecisionWaiting}})
		// Moved once: the same rows again move nothing, and nothing is left.
		if again := redrive(t, b, found); len(again) != 0 {
			t.Fatalf("moved again: %+v", again)
		}
		if got := findAll(t, b, store.UnownedWaiting, grace); len(got) != 0 {
			t.Fatalf("found %+v after the repair", got)
		}
	})
}
