package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/cancel"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// cancelOf runs a cancel of tenant t1's notification id; any error fails
// the test.
func cancelOf(t *testing.T, b bundle, id string) cancel.Result {
	t.Helper()
	res, err := (&cancel.Canceller{Store: b.s}).Cancel(b.ctx, "t1", id)
	if err != nil {
		t.Fatalf("Cancel %s: %v", id, err)
	}
	return res
}

// sendClaim is DeliveryClaim as the sender makes it for a webhook send of
// notification id.
func sendClaim(id string) store.DeliveryClaimParams {
	return store.DeliveryClaimParams{MessageID: store.MessageID(id, heraldtype.ChannelWebhook), NotificationID: id,
		Tenant: "t1", Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w"}
}

// wantNoDelivery fails the test unless notification id's webhook send has
// no delivery row.
func wantNoDelivery(t *testing.T, b bundle, id string) {
	t.Helper()
	if d, err := b.s.DeliveryGet(b.ctx, store.MessageID(id, heraldtype.ChannelWebhook)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a delivery row was written: %+v (%v)", d, err)
	}
}

func testCancel(t *testing.T, h Harness) {
	t.Run("WaitingSendsEndSuppressedCancelledTheRestAreReported", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		later := Epoch.Add(time.Hour)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelPush, heraldtype.ChannelSMS,
				heraldtype.ChannelEmail, heraldtype.ChannelAlimTalk}
			p.SendAt = &later
		})
		msg := func(ch heraldtype.Channel) string { return store.MessageID(p.ID, ch) }
		claimOn := func(ch heraldtype.Channel) {
			t.Helper()
			res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: msg(ch), NotificationID: p.ID, Tenant: "t1",
				Channel: ch, Provider: "p", Owner: "w"})
			if !res.Claimed {
				t.Fatalf("claim %s: %+v", ch, res)
			}
		}
		// webhook SCHEDULED; push SENDING; sms RETRY_WAIT; email
		// PROVIDER_ACCEPTED; alimtalk PARKED.
		claimOn(heraldtype.ChannelPush)
		claimOn(heraldtype.ChannelSMS)
		if !record(t, b, msg(heraldtype.ChannelSMS), 1, heraldtype.DeliveryRetryWait, time.Minute) {
			t.Fatal("record RETRY_WAIT")
		}
		claimOn(heraldtype.ChannelEmail)
		if !record(t, b, msg(heraldtype.ChannelEmail), 1, heraldtype.DeliveryProviderAccepted, 0) {
			t.Fatal("record PROVIDER_ACCEPTED")
		}
		if ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: msg(heraldtype.ChannelAlimTalk), NotificationID: p.ID,
			Tenant: "t1", Channel: heraldtype.ChannelAlimTalk, State: heraldtype.DeliveryParked, Reason: heraldtype.ReasonTemplateMissing}); err != nil || !ok {
			t.Fatalf("park: %v %v", ok, err)
		}
		want := map[heraldtype.Channel]cancel.Entry{
			heraldtype.ChannelWebhook:  {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Cancelled: true},
			heraldtype.ChannelPush:     {State: "SENDING"},
			heraldtype.ChannelSMS:      {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Cancelled: true},
			heraldtype.ChannelEmail:    {State: "PROVIDER_ACCEPTED"},
			heraldtype.ChannelAlimTalk: {State: "SUPPRESSED", Reason: cancel.ReasonCancelled, Cancelled: true},
		}
		first := cancelOf(t, b, p.ID)
		if first.ID != p.ID || len(first.Deliveries) != len(want) {
			t.Fatalf("cancel = %+v", first)
		}
		for _, e := range first.Deliveries {
			w := want[heraldtype.Channel(e.Channel)]
			w.MessageID, w.Channel = msg(heraldtype.Channel(e.Channel)), e.Channel
			if e != w {
				t.Errorf("%s: %+v, want %+v", e.Channel, e, w)
			}
		}
		// Idempotent: the same answer again, nothing rewritten.
		before := delivery(t, b, msg(heraldtype.ChannelSMS))
		b.clk.Advance(time.Second)
		again := cancelOf(t, b, p.ID)
		if again.ID != first.ID || !slices.Equal(again.Deliveries, first.Deliveries) {
			t.Errorf("second cancel = %+v, want %+v", again, first)
		}
		if after := delivery(t, b, msg(heraldtype.ChannelSMS)); !after.UpdatedAt.Equal(before.UpdatedAt) || after.Attempts != 1 {
			t.Errorf("second cancel rewrote the row: %+v, was %+v", after, before)
		}
		// The SENDING claim is untouched and its result still records.
		if !record(t, b, msg(heraldtype.ChannelPush), 1, heraldtype.DeliveryProviderAccepted, 0) {
			t.Error("the claim's result could not be recorded after the cancel")
		}
	})
	// A send in flight at the cancel is left alone, but not tried again:
	// a call that then failed for now (RETRY_WAIT), or a send PARKED and
	// requeued by a person, ends SUPPRESSED(CANCELLED) at its retry's
	// claim, without a call, due or not.
	t.Run("ASendInFlightAtTheCancelIsNotTriedAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, end := range []heraldtype.DeliveryState{heraldtype.DeliveryRetryWait, heraldtype.DeliveryParked} {
			p, _ := create(t, b, nil)
			mid := store.MessageID(p.ID, heraldtype.ChannelWebhook)
			if res := claimDelivery(t, b, sendClaim(p.ID)); !res.Claimed {
				t.Fatalf("claim: %+v", res)
			}
			if e := cancelOf(t, b, p.ID).Deliveries[0]; e.State != "SENDING" || e.Cancelled {
				t.Fatalf("%s: the cancel answered %+v; want the send in flight, not cancelled", end, e)
			}
			if !record(t, b, mid, 1, end, time.Minute) {
				t.Fatalf("record %s after the cancel: not recorded", end)
			}
			if end == heraldtype.DeliveryParked {
				if got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{Tenant: "t1", MessageID: mid}); err != nil || len(got) != 1 {
					t.Fatalf("ParkedRequeue = %+v, %v", got, err)
				}
			}
			got := claimDelivery(t, b, sendClaim(p.ID))
			if got.Claimed || !got.Cancelled || got.Current == nil || got.Current.State != heraldtype.DeliverySuppressed || got.Current.Reason != cancel.ReasonCancelled {
				t.Fatalf("%s: the retry's claim after the cancel = %+v; want no claim, SUPPRESSED(CANCELLED) by the claim", end, got)
			}
			// A copy after that finds it ended, by someone else.
			if again := claimDelivery(t, b, sendClaim(p.ID)); again.Claimed || again.Cancelled || again.Current == nil {
				t.Fatalf("%s: a claim after the retry's = %+v; want the ended row, not ended by this claim", end, again)
			}
			if d := delivery(t, b, mid); d.State != heraldtype.DeliverySuppressed || d.Attempts != 1 {
				t.Fatalf("%s: %s after %d attempts; want SUPPRESSED after the one", end, d.State, d.Attempts)
			}
			if e := cancelOf(t, b, p.ID).Deliveries[0]; !e.Cancelled {
				t.Fatalf("%s: a cancel after the retry's claim answered %+v", end, e)
			}
		}
		// A notification never cancelled is retried as before.
		p, _ := create(t, b, nil)
		mid := store.MessageID(p.ID, heraldtype.ChannelWebhook)
		claimDelivery(t, b, sendClaim(p.ID))
		record(t, b, mid, 1, heraldtype.DeliveryRetryWait, time.Minute)
		b.clk.Advance(time.Minute)
		if got := claimDelivery(t, b, sendClaim(p.ID)); !got.Claimed || got.Attempt != 2 {
			t.Fatalf("the retry of a notification never cancelled = %+v; want attempt 2", got)
		}
	})
	// The mark alone is the cancel: a send claimed after it (a cancel
	// that failed before its decisions, or a claim between the cancel's
	// read and its decision) is ended SUPPRESSED(CANCELLED) by its claim,
	// with no call and no event key taken, on every claim statement: one
	// alone, and several at once (which PostgreSQL merges), with and
	// without a key.
	t.Run("AFirstClaimAfterTheMarkEndsTheSend", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const sends = 24
		type send struct {
			id     string
			marked bool
			key    *store.EventKeyTakeParams
		}
		var all []send
		for i := range sends {
			p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Recipient = fmt.Sprintf("r%d", i) })
			s := send{id: p.ID, marked: i%3 != 0}
			if i%2 == 0 {
				s.key = &store.EventKeyTakeParams{Key: store.EventKey{Tenant: "t1", Recipient: p.Recipient, EventID: p.EventID, Kind: p.Kind},
					Owner: p.ID, Lease: time.Hour}
			}
			if s.marked {
				if err := b.s.NotificationCancelMark(b.ctx, "t1", p.ID); err != nil {
					t.Fatal(err)
				}
			}
			all = append(all, s)
		}
		claimOf := func(s send) store.DeliveryClaimParams {
			c := sendClaim(s.id)
			c.Event = s.key
			return c
		}
		// Two marked sends' claims alone, one under a key, then the rest
		// at once.
		got := make([]store.DeliveryClaimResult, sends)
		got[1], got[2] = claimDelivery(t, b, claimOf(all[1])), claimDelivery(t, b, claimOf(all[2]))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range all {
			if i == 1 || i == 2 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := b.s.DeliveryClaim(b.ctx, claimOf(s))
				if err != nil {
					t.Error(err)
				}
				got[i] = res
			}()
		}
		close(start)
		wait(t, &wg, "the claims returned")
		for i, s := range all {
			res := got[i]
			if !s.marked {
				if !res.Claimed || res.Attempt != 1 || res.Cancelled {
					t.Errorf("%d, never cancelled: the claim = %+v; want attempt 1", i, res)
				}
				continue
			}
			if res.Claimed || !res.Cancelled || res.Current == nil || res.Current.State != heraldtype.DeliverySuppressed ||
				res.Current.Reason != cancel.ReasonCancelled || res.Current.Attempts != 0 || res.Event.Outcome != 0 {
				t.Errorf("%d, marked cancelled: the claim = %+v; want no claim, SUPPRESSED(CANCELLED) by it, no attempt, no key", i, res)
			}
			if again := claimDelivery(t, b, claimOf(s)); again.Claimed || again.Cancelled || again.Current == nil ||
				again.Current.Reason != cancel.ReasonCancelled {
				t.Errorf("%d: a second claim = %+v; want the ended row, not ended by it", i, again)
			}
			// The outbox row is its owner's still, and the cancel's
			// repeat finds the send cancelled.
			if e := entry(t, b, s.id); e.OutboxState != heraldtype.OutboxPending {
				t.Errorf("%d: the claim wrote the outbox row: %+v", i, e)
			}
			if e := cancelOf(t, b, s.id).Deliveries[0]; !e.Cancelled {
				t.Errorf("%d: the cancel's repeat answered %+v", i, e)
			}
		}
		// Copies of one marked send claimed at once (a redelivery beside
		// the first copy; merged into one statement on PostgreSQL, where
		// each finds no row): one ends it, the others find it ended.
		p, _ := create(t, b, nil)
		if err := b.s.NotificationCancelMark(b.ctx, "t1", p.ID); err != nil {
			t.Fatal(err)
		}
		const copies = 4
		var ended, claimedCopies atomic.Int32
		start = make(chan struct{})
		for range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := b.s.DeliveryClaim(b.ctx, sendClaim(p.ID))
				switch {
				case err != nil:
					t.Error(err)
				case res.Claimed:
					claimedCopies.Add(1)
				case res.Cancelled:
					ended.Add(1)
				case res.Current == nil || res.Current.Reason != cancel.ReasonCancelled:
					t.Errorf("a copy's claim = %+v; want the row another copy ended", res)
				}
			}()
		}
		close(start)
		wait(t, &wg, "the copies' claims returned")
		if claimedCopies.Load() != 0 || ended.Load() != 1 {
			t.Errorf("%d copies claimed the send and %d ended it; want none and one", claimedCopies.Load(), ended.Load())
		}
		// A marked send took no key: another notification takes it.
		for i, s := range all {
			if s.key == nil {
				continue
			}
			want := store.EventKeyHeld
			if s.marked {
				want = store.EventKeyTaken
			}
			other := *s.key
			other.Owner = "ntf_other"
			if res, err := b.s.EventKeyTake(b.ctx, other); err != nil || res.Outcome != want {
				t.Errorf("%d (marked %v): another notification's take of its key = %+v, %v; want outcome %v", i, s.marked, res, err, want)
			}
		}
	})
	t.Run("TheClaimerReadsTheMark", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		marked, _ := create(t, b, nil)
		plain, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Recipient, p.EventID = "r2", "e2" })
		if err := b.s.NotificationCancelMark(b.ctx, "t1", marked.ID); err != nil {
			t.Fatal(err)
		}
		// Read alone (a decision to park reads it so).
		for id, want := range map[string]bool{marked.ID: true, plain.ID: false, "ntf_nope": false} {
			if got, err := b.s.NotificationCancelled(b.ctx, id); err != nil || got != want {
				t.Errorf("NotificationCancelled(%s) = %v, %v; want %v", id, got, err, want)
			}
		}
		wantMarks := func(rows []store.Claimed, want map[string]bool) {
			t.Helper()
			if len(rows) != len(want) {
				t.Fatalf("claimed %d rows, want %d", len(rows), len(want))
			}
			for _, r := range rows {
				if r.Known == nil || r.Known.Cancelled != want[r.NotificationID] {
					t.Errorf("%s: known %+v, want Cancelled %v", r.NotificationID, r.Known, want[r.NotificationID])
				}
			}
		}
		wantMarks(claim(t, b, heraldtype.LaneTransactional, 10), map[string]bool{marked.ID: true, plain.ID: false})
		// A mark made after a claim is read by the next one (the lease ran
		// out).
		if err := b.s.NotificationCancelMark(b.ctx, "t1", plain.ID); err != nil {
			t.Fatal(err)
		}
		b.clk.Advance(2 * time.Minute)
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 2 {
			t.Fatalf("reclaimed %d (%v)", n, err)
		}
		wantMarks(claim(t, b, heraldtype.LaneTransactional, 10), map[string]bool{marked.ID: true, plain.ID: true})
		// The relay's claim reads no mark, with profiles for its gate or
		// without (a broker's copy carries none).
		b.clk.Advance(2 * time.Minute)
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 2 {
			t.Fatalf("reclaimed %d (%v)", n, err)
		}
		pub, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "r", Limit: 10, Lease: time.Minute,
			Publishing: true, Profiles: true})
		if err != nil || len(pub) != 2 {
			t.Fatalf("the relay claimed %d (%v), want 2", len(pub), err)
		}
		for _, r := range pub {
			if r.Known != nil && r.Known.Cancelled {
				t.Errorf("%s: the relay's claim read the mark: %+v", r.NotificationID, r.Known)
			}
		}
	})
	t.Run("TheMarkIsTheTenantsOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, _ := create(t, b, nil)
		for _, c := range []struct{ tenant, id string }{{"t2", p.ID}, {"t1", "ntf_none"}} {
			if err := b.s.NotificationCancelMark(b.ctx, c.tenant, c.id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("NotificationCancelMark(%s, %s) = %v; want ErrNotFound", c.tenant, c.id, err)
			}
		}
		// Another tenant's mark did not take: the retry goes on.
		mid := store.MessageID(p.ID, heraldtype.ChannelWebhook)
		claimDelivery(t, b, sendClaim(p.ID))
		record(t, b, mid, 1, heraldtype.DeliveryRetryWait, time.Minute)
		b.clk.Advance(time.Minute)
		if got := claimDelivery(t, b, sendClaim(p.ID)); !got.Claimed {
			t.Fatalf("the retry after another tenant's mark = %+v; want it claimed", got)
		}
		// Marked twice: still found, the retry still ended.
		for range 2 {
			if err := b.s.NotificationCancelMark(b.ctx, "t1", p.ID); err != nil {
				t.Fatalf("NotificationCancelMark: %v", err)
			}
		}
		record(t, b, mid, 2, heraldtype.DeliveryRetryWait, time.Minute)
		if got := claimDelivery(t, b, sendClaim(p.ID)); got.Claimed || got.Current == nil || got.Current.Reason != cancel.ReasonCancelled {
			t.Fatalf("the retry after two marks = %+v; want SUPPRESSED(CANCELLED)", got)
		}
	})
	t.Run("LeavesTheOutboxToItsOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, _ := create(t, b, nil)
		cancelOf(t, b, p.ID)
		e := entry(t, b, p.ID)
		if e.OutboxState != heraldtype.OutboxPending || !e.OutboxUpdated.Equal(Epoch) {
			t.Fatalf("the cancel wrote the outbox row: %+v", e)
		}
		// Its owner still claims it, learns a delivery row exists (the
		// sender then acks without a call) and finishes it.
		rows := claim(t, b, heraldtype.LaneTransactional, 1)
		if len(rows) != 1 || rows[0].Known == nil || !rows[0].Known.Delivery {
			t.Fatalf("claimed %+v, want the row knowing its delivery exists", rows)
		}
		if res := claimDelivery(t, b, sendClaim(p.ID)); res.Claimed || res.Cancelled || res.Current == nil || res.Current.Reason != cancel.ReasonCancelled {
			t.Fatalf("a claim after the cancel: %+v", res)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, rows[0].Fence, heraldtype.OutboxDone, cancel.ReasonCancelled); err != nil || !ok {
			t.Fatalf("complete: %v %v", ok, err)
		}
		if e := entry(t, b, p.ID); e.OutboxState != heraldtype.OutboxDone {
			t.Fatalf("outbox row %s, want DONE", e.OutboxState)
		}
	})
	t.Run("ExpiredIsReportedNotTouched", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		soon := Epoch.Add(time.Second)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.ExpiresAt = &soon })
		b.clk.Advance(time.Second)
		if expired, err := b.s.OutboxExpire(b.ctx, 1000); err != nil || len(expired) != 1 {
			t.Fatalf("expire: %+v %v", expired, err)
		}
		res := cancelOf(t, b, p.ID)
		if e := res.Deliveries[0]; e.State != "EXPIRED" || e.Cancelled {
			t.Fatalf("cancel of an expired send: %+v", e)
		}
		wantNoDelivery(t, b, p.ID)
	})
	t.Run("AnotherTenantsIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Tenant = "t2" })
		if _, err := (&cancel.Canceller{Store: b.s}).Cancel(b.ctx, "t1", p.ID); !errors.Is(err, cancel.ErrNotFound) {
			t.Fatalf("cancel of t2's notification as t1: %v, want ErrNotFound", err)
		}
		wantNoDelivery(t, b, p.ID)
	})
	t.Run("RacingTheClaimOneWinsPerMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const messages, racers = 16, 4
		var ids []string
		for range messages {
			p, _ := create(t, b, nil)
			ids = append(ids, p.ID)
		}
		// Half the messages wait in RETRY_WAIT, due now: there the claim is
		// the conditional RETRY_WAIT → SENDING update, not the insert.
		for _, id := range ids[:messages/2] {
			if res := claimDelivery(t, b, sendClaim(id)); !res.Claimed {
				t.Fatalf("first claim of %s: %+v", id, res)
			}
			if !record(t, b, store.MessageID(id, heraldtype.ChannelWebhook), 1, heraldtype.DeliveryRetryWait, 0) {
				t.Fatal("record RETRY_WAIT")
			}
		}
		type outcome struct {
			// claimEnds counts the claims that found the cancel's mark
			// and ended the send themselves.
			claimWins, claimEnds, decideWins atomic.Int32
			answers                          sync.Map // cancel answers: *cancel.Entry
		}
		out := make([]outcome, messages)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, id := range ids {
			for r := range racers {
				wg.Add(3)
				go func() { // the sender's claim
					defer wg.Done()
					<-start
					res, err := b.s.DeliveryClaim(b.ctx, sendClaim(id))
					if err != nil {
						t.Error(err)
						return
					}
					if res.Claimed {
						out[i].claimWins.Add(1)
					}
					if res.Cancelled {
						out[i].claimEnds.Add(1)
					}
				}()
				go func() { // the cancel's own write, counted
					defer wg.Done()
					<-start
					c := sendClaim(id)
					ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: c.MessageID, NotificationID: id,
						Tenant: "t1", Channel: c.Channel, State: heraldtype.DeliverySuppressed, Reason: cancel.ReasonCancelled})
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						out[i].decideWins.Add(1)
					}
				}()
				go func() { // the whole cancel
					defer wg.Done()
					<-start
					res, err := (&cancel.Canceller{Store: b.s}).Cancel(b.ctx, "t1", id)
					if err != nil {
						t.Error(err)
						return
					}
					out[i].answers.Store(r, &res.Deliveries[0])
				}()
			}
		}
		close(start)
		wait(t, &wg, "the racing claims and cancels returned")
		for i, id := range ids {
			d := delivery(t, b, store.MessageID(id, heraldtype.ChannelWebhook))
			claims, ends, decides := out[i].claimWins.Load(), out[i].claimEnds.Load(), out[i].decideWins.Load()
			cancelled := d.State == heraldtype.DeliverySuppressed && d.Reason == cancel.ReasonCancelled
			switch {
			case claims > 1:
				t.Errorf("%s: %d claims won", id, claims)
			case claims == 1 && (d.State != heraldtype.DeliverySending || decides != 0):
				t.Errorf("%s: a claim won, yet the row is %s/%s and %d cancel writes took", id, d.State, d.Reason, decides)
			case claims == 0 && !cancelled:
				t.Errorf("%s: no claim won, yet the row is %s/%s", id, d.State, d.Reason)
			case decides+ends > 1:
				t.Errorf("%s: %d cancel writes and %d claims ended the send, want one at most", id, decides, ends)
			case ends == 1 && !cancelled:
				t.Errorf("%s: a claim ended the send, yet the row is %s/%s", id, d.State, d.Reason)
			}
			out[i].answers.Range(func(_, v any) bool {
				if e := v.(*cancel.Entry); e.Cancelled != cancelled || e.State != string(d.State) {
					t.Errorf("%s: a cancel answered %+v, but the row is %s/%s", id, *e, d.State, d.Reason)
				}
				return true
			})
		}
	})
}
