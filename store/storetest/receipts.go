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

// pushFor creates a notification of tenant for recipient with one push
// send on the alert lane and returns its message id (not yet claimed).
func pushFor(t *testing.T, b bundle, tenant, recipient string) (notificationID, messageID string) {
	t.Helper()
	p, _ := create(t, b, func(p *store.NotificationCreateParams) {
		p.Tenant, p.Recipient, p.Lane = tenant, recipient, heraldtype.LaneAlert
		p.Channels = []heraldtype.Channel{heraldtype.ChannelPush}
	})
	return p.ID, store.MessageID(p.ID, heraldtype.ChannelPush)
}

// sentPush is pushFor with the send claimed as the sender claims it and,
// unless state is SENDING, its first attempt recorded as state.
func sentPush(t *testing.T, b bundle, tenant, recipient string, state heraldtype.DeliveryState) string {
	t.Helper()
	nid, mid := pushFor(t, b, tenant, recipient)
	claimPush(t, b, tenant, nid, mid)
	if state != heraldtype.DeliverySending && !record(t, b, mid, 1, state, time.Minute) {
		t.Fatalf("record %s for %s", state, mid)
	}
	return mid
}

// unknownPush is sentPush left SENDING until the stale sweep ends it
// UNKNOWN (its claim 11 minutes old, the sweep's limit 10).
func unknownPush(t *testing.T, b bundle) string {
	t.Helper()
	mid := sentPush(t, b, "t1", "r1", heraldtype.DeliverySending)
	b.clk.Advance(11 * time.Minute)
	if stale, err := b.s.DeliverySweepStale(b.ctx, 10*time.Minute); err != nil || len(stale) != 1 {
		t.Fatalf("stale sweep: %+v (%v)", stale, err)
	}
	return mid
}

// claimPush claims messageID of notification nid as the sender does.
func claimPush(t *testing.T, b bundle, tenant, nid, mid string) {
	t.Helper()
	if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: mid, NotificationID: nid, Tenant: tenant,
		Channel: heraldtype.ChannelPush, Provider: "p", Owner: "w"}); !res.Claimed {
		t.Fatalf("claim %s: %+v", mid, res)
	}
}

// receipt runs DeliveryReceipt for recipient r1 of t1; an error fails the
// test.
func receipt(t *testing.T, b bundle, messageID string) store.ReceiptOutcome {
	t.Helper()
	out, err := b.s.DeliveryReceipt(b.ctx, "t1", "r1", messageID)
	if err != nil {
		t.Fatalf("DeliveryReceipt %s: %v", messageID, err)
	}
	return out
}

// wantRow fails the test unless messageID's delivery is in state with
// reason and was last written at updated.
func wantRow(t *testing.T, b bundle, messageID string, state heraldtype.DeliveryState, reason string, updated time.Time) {
	t.Helper()
	d := delivery(t, b, messageID)
	if d.State != state || d.Reason != reason || !d.UpdatedAt.Equal(updated) {
		t.Fatalf("delivery %s is %s(%s) written at %s; want %s(%s) at %s", messageID, d.State, d.Reason, d.UpdatedAt, state, reason, updated)
	}
}

func testReceipts(t *testing.T, h Harness) {
	t.Run("AcceptedBecomesDeliveredOnceThenNoChange", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mid := sentPush(t, b, "t1", "r1", heraldtype.DeliveryProviderAccepted)
		b.clk.Advance(time.Minute)
		at := b.clk.Now()
		want := store.ReceiptOutcome{Result: store.ReceiptDelivered, From: heraldtype.DeliveryProviderAccepted,
			Lane: heraldtype.LaneAlert, Channel: heraldtype.ChannelPush}
		if got := receipt(t, b, mid); got != want {
			t.Fatalf("first receipt: %+v, want %+v", got, want)
		}
		wantRow(t, b, mid, heraldtype.DeliveryDelivered, store.ReasonReceipt, at)
		// Again, later: nothing changes, not even the time.
		b.clk.Advance(time.Minute)
		want.Result, want.From = store.ReceiptAlready, heraldtype.DeliveryDelivered
		if got := receipt(t, b, mid); got != want {
			t.Fatalf("second receipt: %+v, want %+v", got, want)
		}
		wantRow(t, b, mid, heraldtype.DeliveryDelivered, store.ReasonReceipt, at)
	})
	t.Run("UnknownIsSettledAndReconciliationNoLongerListsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mid := unknownPush(t, b)
		before := count(t, b, time.Minute, 0)
		if before.Unknown.Count != 1 || len(before.Unknown.Sample) != 1 || before.Unknown.Sample[0].MessageID != mid {
			t.Fatalf("before the receipt: unknown %+v, want %s", before.Unknown, mid)
		}
		if got := receipt(t, b, mid); got.Result != store.ReceiptDelivered || got.From != heraldtype.DeliveryUnknown {
			t.Fatalf("receipt: %+v, want delivered from UNKNOWN", got)
		}
		wantRow(t, b, mid, heraldtype.DeliveryDelivered, store.ReasonReceiptAfterUnknown, b.clk.Now())
		after := count(t, b, time.Minute, 0)
		if after.Unknown.Count != 0 || len(after.Unknown.Sample) != 0 || after.ByState[string(heraldtype.DeliveryDelivered)] != 1 ||
			after.ByState[string(heraldtype.DeliveryUnknown)] != 0 {
			t.Fatalf("after the receipt: unknown %+v, by state %v; want none unknown and one DELIVERED", after.Unknown, after.ByState)
		}
	})
	t.Run("NeverBackwards", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, state := range []heraldtype.DeliveryState{
			heraldtype.DeliveryPermanentFailure, heraldtype.DeliveryRetryExhausted, heraldtype.DeliveryStored,
			heraldtype.DeliverySuppressed,
		} {
			var mid string
			if state == heraldtype.DeliverySuppressed {
				var nid string
				nid, mid = pushFor(t, b, "t1", "r1")
				if ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: mid, NotificationID: nid, Tenant: "t1",
					Channel: heraldtype.ChannelPush, State: state, Reason: heraldtype.ReasonConsentDenied}); err != nil || !ok {
					t.Fatalf("decide SUPPRESSED: %v, %v", ok, err)
				}
			} else {
				mid = sentPush(t, b, "t1", "r1", state)
			}
			was := delivery(t, b, mid)
			b.clk.Advance(time.Minute)
			if got := receipt(t, b, mid); got.Result != store.ReceiptRefused || got.From != state {
				t.Fatalf("receipt for %s: %+v, want refused from %s", state, got, state)
			}
			wantRow(t, b, mid, state, was.Reason, was.UpdatedAt)
		}
	})
	t.Run("NotSettledYetChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, state := range []heraldtype.DeliveryState{heraldtype.DeliverySending, heraldtype.DeliveryRetryWait} {
			mid := sentPush(t, b, "t1", "r1", state)
			was := delivery(t, b, mid)
			b.clk.Advance(time.Minute)
			if got := receipt(t, b, mid); got.Result != store.ReceiptNotYet || got.From != state {
				t.Fatalf("receipt for %s: %+v, want not yet from %s", state, got, state)
			}
			wantRow(t, b, mid, state, was.Reason, was.UpdatedAt)
		}
		// A planned send with no delivery row yet.
		_, mid := pushFor(t, b, "t1", "r1")
		want := store.ReceiptOutcome{Result: store.ReceiptNotYet, Lane: heraldtype.LaneAlert, Channel: heraldtype.ChannelPush}
		if got := receipt(t, b, mid); got != want {
			t.Fatalf("receipt before any delivery row: %+v, want %+v", got, want)
		}
		if _, err := b.s.DeliveryGet(b.ctx, mid); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the receipt wrote a delivery row: %v", err)
		}
	})
	t.Run("OnlyAPush", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// A receipt is the app's word that it showed a push. A send key
		// can mint a recipient token, so a receipt that settled an SMS's
		// or a webhook's UNKNOWN would be a settle without the admin
		// scope or an audit entry: whatever their state, nothing moves.
		p, _ := create(t, b, func(p *store.NotificationCreateParams) {
			p.Lane, p.Channels = heraldtype.LaneAlert, []heraldtype.Channel{heraldtype.ChannelSMS, heraldtype.ChannelWebhook, heraldtype.ChannelEmail}
		})
		sms, hook, mail := store.MessageID(p.ID, heraldtype.ChannelSMS), store.MessageID(p.ID, heraldtype.ChannelWebhook), store.MessageID(p.ID, heraldtype.ChannelEmail)
		for _, c := range []struct {
			mid string
			ch  heraldtype.Channel
		}{{sms, heraldtype.ChannelSMS}, {hook, heraldtype.ChannelWebhook}} {
			if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: c.mid, NotificationID: p.ID, Tenant: "t1",
				Channel: c.ch, Provider: "p", Owner: "w"}); !res.Claimed {
				t.Fatalf("claim %s: %+v", c.mid, res)
			}
		}
		if !record(t, b, hook, 1, heraldtype.DeliveryProviderAccepted, 0) {
			t.Fatal("record the webhook")
		}
		b.clk.Advance(11 * time.Minute)
		if stale, err := b.s.DeliverySweepStale(b.ctx, 10*time.Minute); err != nil || len(stale) != 1 || stale[0].MessageID != sms {
			t.Fatalf("stale sweep: %+v (%v), want the SMS", stale, err)
		}
		for _, c := range []struct {
			mid  string
			ch   heraldtype.Channel
			from heraldtype.DeliveryState
		}{
			{sms, heraldtype.ChannelSMS, heraldtype.DeliveryUnknown},
			{hook, heraldtype.ChannelWebhook, heraldtype.DeliveryProviderAccepted},
			{mail, heraldtype.ChannelEmail, ""}, // planned, no delivery row yet
		} {
			var was store.Delivery
			if c.from != "" {
				was = delivery(t, b, c.mid)
			}
			got := receipt(t, b, c.mid)
			if got.Result != store.ReceiptNotPush || got.From != c.from || got.Channel != c.ch || got.Lane != heraldtype.LaneAlert {
				t.Fatalf("receipt for the %s send: %+v, want not a push from %q", c.ch, got, c.from)
			}
			if c.from != "" {
				wantRow(t, b, c.mid, c.from, was.Reason, was.UpdatedAt)
			} else if _, err := b.s.DeliveryGet(b.ctx, c.mid); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the receipt wrote a delivery row for the planned %s: %v", c.ch, err)
			}
		}
		if _, err := b.s.DeliveryReceipt(b.ctx, "t1", "r2", sms); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another recipient's receipt for the SMS: %v, want ErrNotFound", err)
		}
	})
	t.Run("OnlyTheRecipientsOwnMessages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		accepted := sentPush(t, b, "t1", "r1", heraldtype.DeliveryProviderAccepted)
		_, planned := pushFor(t, b, "t1", "r1")
		was := delivery(t, b, accepted)
		for _, c := range []struct{ name, tenant, recipient, messageID string }{
			{"OtherRecipient", "t1", "r2", accepted},
			{"OtherTenant", "t2", "r1", accepted},
			{"OtherRecipientPlanned", "t1", "r2", planned},
			{"OtherTenantPlanned", "t2", "r1", planned},
			{"Missing", "t1", "r1", accepted + "x"},
			{"MissingDevice", "t1", "r1", accepted + ".dev"},
			{"NoDot", "t1", "r1", "nothing"},
			{"Empty", "t1", "r1", ""},
		} {
			if got, err := b.s.DeliveryReceipt(b.ctx, c.tenant, c.recipient, c.messageID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s: %+v, %v; want ErrNotFound", c.name, got, err)
			}
		}
		wantRow(t, b, accepted, heraldtype.DeliveryProviderAccepted, was.Reason, was.UpdatedAt)
	})
	t.Run("KeysOnTheMessageIDAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// Per-device message ids (one notification's push to two devices)
		// have no outbox row of their own: the delivery row is the key.
		nid, mid := pushFor(t, b, "t1", "r1")
		for _, dev := range []string{".dev-a", ".dev-b"} {
			claimPush(t, b, "t1", nid, mid+dev)
		}
		if !record(t, b, mid+".dev-a", 1, heraldtype.DeliveryProviderAccepted, 0) {
			t.Fatal("record dev-a")
		}
		if got := receipt(t, b, mid+".dev-a"); got.Result != store.ReceiptDelivered {
			t.Fatalf("receipt for dev-a: %+v", got)
		}
		if got := receipt(t, b, mid+".dev-b"); got.Result != store.ReceiptNotYet || got.From != heraldtype.DeliverySending {
			t.Fatalf("receipt for dev-b (still SENDING): %+v", got)
		}
		if d := delivery(t, b, mid+".dev-b"); d.State != heraldtype.DeliverySending {
			t.Fatalf("dev-b is %s", d.State)
		}
	})
	t.Run("ConcurrentReceiptsAndALateSenderOnUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mid := unknownPush(t, b)
		// The sender that claimed it comes back with its answer while
		// receipts for it arrive: its write is conditional on SENDING and
		// takes nothing, whichever runs first.
		const receipts = 8
		results := make(chan store.ReceiptResult, receipts)
		late := make(chan bool, 1)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range receipts {
			wg.Go(func() {
				<-start
				out, err := b.s.DeliveryReceipt(b.ctx, "t1", "r1", mid)
				if err != nil {
					t.Error(err)
				}
				results <- out.Result
			})
		}
		wg.Go(func() {
			<-start
			res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1,
				State: heraldtype.DeliveryProviderAccepted, Owner: "w", Class: "accepted", StartedAt: b.clk.Now()})
			if err != nil {
				t.Error(err)
			}
			late <- res.Recorded
		})
		close(start)
		wait(t, &wg, "the receipts and the late record returned")
		close(results)
		tally := map[store.ReceiptResult]int{}
		for r := range results {
			tally[r]++
		}
		if tally[store.ReceiptDelivered] != 1 || tally[store.ReceiptAlready] != receipts-1 {
			t.Fatalf("receipts: %v; want one delivered, %d already", tally, receipts-1)
		}
		if <-late {
			t.Fatal("the late sender's record was written over UNKNOWN/DELIVERED")
		}
		wantRow(t, b, mid, heraldtype.DeliveryDelivered, store.ReasonReceiptAfterUnknown, b.clk.Now())
	})
	t.Run("ReceiptRacingTheSendersRecordNeverLosesIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// From SENDING, a receipt and the sender's own PROVIDER_ACCEPTED
		// race: a receipt before the record is "not yet" and writes
		// nothing, one after it settles DELIVERED, which the record never
		// overwrites. Either way the row ends where the answers say.
		for i := range 10 {
			mid := sentPush(t, b, "t1", "r1", heraldtype.DeliverySending)
			var wg sync.WaitGroup
			start := make(chan struct{})
			var got store.ReceiptOutcome
			var rec store.RecordResult
			var rerr, derr error
			wg.Go(func() { <-start; got, derr = b.s.DeliveryReceipt(b.ctx, "t1", "r1", mid) })
			wg.Go(func() {
				<-start
				rec, rerr = b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1,
					State: heraldtype.DeliveryProviderAccepted, Owner: "w", Class: "accepted", StartedAt: b.clk.Now()})
			})
			close(start)
			wait(t, &wg, fmt.Sprintf("round %d: the receipt and the record returned", i))
			if derr != nil || rerr != nil {
				t.Fatalf("round %d: receipt %v, record %v", i, derr, rerr)
			}
			if !rec.Recorded {
				t.Fatalf("round %d: the sender's record from SENDING was refused (receipt: %+v)", i, got)
			}
			want := heraldtype.DeliveryProviderAccepted
			switch got.Result {
			case store.ReceiptDelivered:
				want = heraldtype.DeliveryDelivered
			case store.ReceiptNotYet:
			default:
				t.Fatalf("round %d: receipt %+v", i, got)
			}
			if d := delivery(t, b, mid); d.State != want {
				t.Fatalf("round %d: receipt said %+v, the row is %s; want %s", i, got, d.State, want)
			}
			// The app's retry settles it.
			if again := receipt(t, b, mid); again.Result != store.ReceiptDelivered && again.Result != store.ReceiptAlready {
				t.Fatalf("round %d: retried receipt %+v", i, again)
			}
			if d := delivery(t, b, mid); d.State != heraldtype.DeliveryDelivered {
				t.Fatalf("round %d: after the retry the row is %s", i, d.State)
			}
		}
	})
}
