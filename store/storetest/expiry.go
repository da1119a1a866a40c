package storetest

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

func testExpiry(t *testing.T, h Harness) {
	// Issue 8, path 4: with the db transport a delivery waits in RETRY_WAIT
	// behind its PENDING outbox row, due at the retry time. When the row
	// expires first, nothing will ever claim it again: the expiry must end
	// the waiting delivery too, or it stays RETRY_WAIT for good.
	t.Run("ExpiryEndsAWaitingRetryAndNothingElse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		soon, later := Epoch.Add(5*time.Minute), Epoch.Add(time.Hour)
		// job creates a notification expiring at exp and claims its outbox
		// row and its delivery, as the db transport's claimer and sender do.
		job := func(exp time.Time) store.Claimed {
			t.Helper()
			create(t, b, func(p *store.NotificationCreateParams) { p.ExpiresAt = &exp })
			row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
			if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
				Tenant: "t1", Channel: row.Channel, Provider: "p", Owner: "w"}); !res.Claimed {
				t.Fatalf("delivery claim %+v", res)
			}
			return row
		}
		// retryWait records a definite non-send that settles the outbox row
		// back to PENDING, due in 10 minutes.
		retryWait := func(row store.Claimed) {
			t.Helper()
			res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: 1,
				State: heraldtype.DeliveryRetryWait, Reason: "HTTP_429", RetryDelay: 10 * time.Minute, Owner: "w", Class: "not_sent",
				StartedAt: b.clk.Now(), Outbox: &row.Fence})
			if err != nil || !res.Recorded || !res.OutboxSettled {
				t.Fatalf("record RETRY_WAIT %+v (%v)", res, err)
			}
		}
		waiting := job(soon)
		retryWait(waiting)
		waitingLater := job(later)
		retryWait(waitingLater)
		// A send in flight whose outbox lease ran out: the stale sweep's.
		sending := job(soon)
		// A parked message whose claimer's lease ran out before it finished
		// the outbox row: a person's (below).
		create(t, b, func(p *store.NotificationCreateParams) { p.ExpiresAt = &soon })
		parked := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		if !decideOnJob(t, b, parked, heraldtype.DeliveryParked, heraldtype.ReasonTemplateMissing) {
			t.Fatal("park")
		}

		b.clk.Advance(5 * time.Minute)
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 2 {
			t.Fatalf("reclaimed %d leases (%v), want 2", n, err)
		}
		expired, err := b.s.OutboxExpire(b.ctx, 1000)
		if err != nil {
			t.Fatalf("OutboxExpire: %v", err)
		}
		got := map[string]store.Expired{}
		for _, e := range expired {
			got[e.MessageID] = e
		}
		if len(expired) != 3 || len(got) != 3 {
			t.Fatalf("expired %+v, want the 3 rows due by now, once each", expired)
		}
		for _, row := range []store.Claimed{waiting, sending, parked} {
			e := got[row.MessageID]
			want := store.Expired{ID: row.OutboxID, MessageID: row.MessageID, Tenant: "t1", Lane: heraldtype.LaneTransactional,
				Channel: row.Channel, DeliveryEnded: row.MessageID == waiting.MessageID}
			if e != want {
				t.Errorf("expired %+v, want %+v", e, want)
			}
		}
		// The waiting retry ended with its outbox row, and the view agrees.
		d := delivery(t, b, waiting.MessageID)
		if d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonExpired || d.NextAttemptAt != nil || d.Attempts != 1 {
			t.Fatalf("waiting retry after expiry: %s(%s) next %v attempts %d, want SUPPRESSED(EXPIRED), no next attempt, 1 attempt",
				d.State, d.Reason, d.NextAttemptAt, d.Attempts)
		}
		v, err := b.s.NotificationGet(b.ctx, "t1", waiting.NotificationID)
		if err != nil {
			t.Fatal(err)
		}
		if state, reason, _ := v.EntryState(v.Deliveries[0]); state != string(heraldtype.DeliverySuppressed) || reason != heraldtype.ReasonExpired {
			t.Fatalf("view shows %s(%s), want SUPPRESSED(EXPIRED)", state, reason)
		}
		// Nothing else moved: a retry not yet expired waits, a claim stays
		// the stale sweep's, a parked message its person's.
		for id, want := range map[string]heraldtype.DeliveryState{
			waitingLater.MessageID: heraldtype.DeliveryRetryWait,
			sending.MessageID:      heraldtype.DeliverySending,
			parked.MessageID:       heraldtype.DeliveryParked,
		} {
			if d := delivery(t, b, id); d.State != want {
				t.Errorf("%s is %s after the expiry, want %s", id, d.State, want)
			}
		}
		if again, err := b.s.OutboxExpire(b.ctx, 1000); err != nil || len(again) != 0 {
			t.Fatalf("second expiry %+v (%v), want nothing", again, err)
		}
		// Past its retry time the ended delivery is not claimed again.
		b.clk.Advance(10 * time.Minute)
		if res := claimDelivery(t, b, claimParams(waiting.MessageID)); res.Claimed || res.Current == nil || res.Current.State != heraldtype.DeliverySuppressed {
			t.Fatalf("claim after expiry %+v, want refused by SUPPRESSED", res)
		}
		// The parked message is still listed, and its person can end it.
		if l := parkedList(t, b, "t1"); len(l) != 1 || l[0].MessageID != parked.MessageID {
			t.Fatalf("parked list %+v, want the expired parked message", l)
		}
		if !discard(t, b, store.ParkedDiscardParams{Tenant: "t1", MessageID: parked.MessageID, Reason: "expired", Actor: "api:t1"}) {
			t.Fatal("could not discard the expired parked message")
		}
	})
	// Issue 13: the expiry takes at most its limit's rows, the earliest
	// due-by first, so a flood of expired rows is expired in short
	// transactions; the rest wait for the next call.
	t.Run("ExpiryTakesAtMostItsLimitEarliestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		due := map[string]time.Time{}
		for i := range 5 {
			exp := Epoch.Add(time.Duration(5-i) * time.Minute) // the last created is due first
			p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.ExpiresAt = &exp })
			due[store.MessageID(p.ID, heraldtype.ChannelWebhook)] = exp
		}
		b.clk.Advance(10 * time.Minute)
		var last time.Time // the latest due-by of the calls before
		for _, want := range []int{2, 2, 1, 0} {
			expired, err := b.s.OutboxExpire(b.ctx, 2)
			if err != nil || len(expired) != want {
				t.Fatalf("OutboxExpire(2) = %d rows (%v), want %d", len(expired), err, want)
			}
			var latest time.Time
			for _, e := range expired {
				if due[e.MessageID].Before(last) {
					t.Fatalf("%s (due %s) expired after a row due %s: want the earliest first", e.MessageID, due[e.MessageID], last)
				}
				if due[e.MessageID].After(latest) {
					latest = due[e.MessageID]
				}
				delete(due, e.MessageID)
			}
			last = latest
		}
		if len(due) != 0 {
			t.Fatalf("rows never expired: %v", due)
		}
	})
}

// decideOnJob runs DeliveryDecide for a claimed job and reports whether it
// was written; an error fails the test.
func decideOnJob(t *testing.T, b bundle, row store.Claimed, state heraldtype.DeliveryState, reason string) bool {
	t.Helper()
	ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
		Tenant: row.Tenant, Channel: row.Channel, State: state, Reason: reason})
	if err != nil {
		t.Fatalf("DeliveryDecide %s %s: %v", row.MessageID, state, err)
	}
	return ok
}
