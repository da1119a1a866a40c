package inbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/store"
)

// pushOf is the push message id of notification id.
func pushOf(id string) string { return store.MessageID(id, heraldtype.ChannelPush) }

// sendPush moves notification id's push (tenant a) as the sender would:
// claimed (SENDING) and, unless state is SENDING, recorded as state.
func (b *bundle) sendPush(t *testing.T, id string, state heraldtype.DeliveryState) {
	t.Helper()
	ctx := context.Background()
	res, err := b.store.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: pushOf(id), NotificationID: id, Tenant: "a",
		Channel: heraldtype.ChannelPush, Provider: "sim-push", Owner: "test"})
	if err != nil || !res.Claimed {
		t.Fatalf("claim the push of %s: %+v, %v", id, res, err)
	}
	if state == heraldtype.DeliverySending {
		return
	}
	rec, err := b.store.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: pushOf(id), Attempt: 1, State: state,
		Reason: "R", Owner: "test", Class: "x", StartedAt: b.clock.Now()})
	if err != nil || !rec.Recorded {
		t.Fatalf("record %s for the push of %s: %+v, %v", state, id, rec, err)
	}
}

// pushState reads notification id's push entry through GET
// /v1/notifications/{id} (tenant a's API key).
func (b *bundle) pushState(t *testing.T, id string) (state, reason string) {
	t.Helper()
	var v struct {
		Deliveries []struct{ MessageID, Channel, State, Reason string } `json:"deliveries"`
	}
	b.do(t, http.MethodGet, "/v1/notifications/"+id, keyA, nil).decode(t, http.StatusOK, &v)
	for _, d := range v.Deliveries {
		if d.Channel == string(heraldtype.ChannelPush) {
			return d.State, d.Reason
		}
	}
	t.Fatalf("notification %s has no push entry: %+v", id, v)
	return "", ""
}

// receipt posts a receipt for messageID with token.
func (b *bundle) receipt(t *testing.T, token, messageID string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/me/receipts", token, map[string]string{"message_id": messageID})
}

// receipts reads herald_receipts_total by from.
func (b *bundle) receipts(t *testing.T) map[string]float64 {
	t.Helper()
	return metricstest.Series(t, b.metrics, "herald_receipts_total", "from")
}

// TestReceipts runs every receipt transition through HTTP on both stores.
func TestReceipts(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			testReceipts(t, d.open)
		})
	}
}

func testReceipts(t *testing.T, open opener) {
	fresh := func(t *testing.T) *bundle {
		t.Helper()
		clk := clock.NewFake(epoch)
		return setup(t, options{store: open(t, clk), clock: clk})
	}
	delivered := "transactional/push/" + string(heraldtype.DeliveryDelivered)
	t.Run("AcceptedBecomesDeliveredOnce", func(t *testing.T) {
		t.Parallel()
		b := fresh(t)
		ids := b.notify(t, keyA, "user-1", 1)
		b.sendPush(t, ids[0], heraldtype.DeliveryProviderAccepted)
		tok := b.mint(t, keyA, "user-1")
		for range 2 { // the second changes nothing and counts nothing
			b.receipt(t, tok, pushOf(ids[0])).decode(t, http.StatusNoContent, nil)
			if s, r := b.pushState(t, ids[0]); s != "DELIVERED" || r != store.ReasonReceipt {
				t.Fatalf("push %s(%s), want DELIVERED(RECEIPT)", s, r)
			}
			if got := b.receipts(t); got["PROVIDER_ACCEPTED"] != 1 || got["UNKNOWN"] != 0 {
				t.Fatalf("herald_receipts_total %v", got)
			}
			if got := metricstest.Deliveries(t, b.metrics)[delivered]; got != 1 {
				t.Fatalf("herald_deliveries_total{%s} = %v, want 1", delivered, got)
			}
		}
	})
	t.Run("UnknownIsSettledByItsReceipt", func(t *testing.T) {
		t.Parallel()
		b := fresh(t)
		ids := b.notify(t, keyA, "user-1", 1)
		b.sendPush(t, ids[0], heraldtype.DeliverySending)
		b.clock.Advance(11 * time.Minute)
		if stale, err := b.store.DeliverySweepStale(context.Background(), 10*time.Minute); err != nil || len(stale) != 1 {
			t.Fatalf("stale sweep: %+v, %v", stale, err)
		}
		tok := b.mint(t, keyA, "user-1")
		b.receipt(t, tok, pushOf(ids[0])).decode(t, http.StatusNoContent, nil)
		if s, r := b.pushState(t, ids[0]); s != "DELIVERED" || r != store.ReasonReceiptAfterUnknown {
			t.Fatalf("push %s(%s), want DELIVERED(RECEIPT_AFTER_UNKNOWN)", s, r)
		}
		if got := b.receipts(t); got["UNKNOWN"] != 1 || got["PROVIDER_ACCEPTED"] != 0 {
			t.Fatalf("herald_receipts_total %v", got)
		}
	})
	t.Run("NotSettledYetIs409WithRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := fresh(t)
		ids := b.notify(t, keyA, "user-1", 3)
		b.sendPush(t, ids[0], heraldtype.DeliverySending)
		b.sendPush(t, ids[1], heraldtype.DeliveryRetryWait)
		tok := b.mint(t, keyA, "user-1")
		// ids[2]'s push has no delivery row at all yet.
		for _, id := range ids {
			was, _ := b.pushState(t, id)
			res := b.receipt(t, tok, pushOf(id))
			wantProblem(t, res, http.StatusConflict)
			if ra := res.header.Get("Retry-After"); ra != "5" {
				t.Fatalf("%s: Retry-After %q, want 5", was, ra)
			}
			if s, _ := b.pushState(t, id); s != was {
				t.Fatalf("the receipt moved %s to %s", was, s)
			}
		}
		// Once the sender records its answer, the app's retry settles it.
		if rec, err := b.store.DeliveryRecord(context.Background(), store.DeliveryRecordParams{MessageID: pushOf(ids[0]), Attempt: 1,
			State: heraldtype.DeliveryProviderAccepted, Owner: "test", Class: "accepted", StartedAt: b.clock.Now()}); err != nil || !rec.Recorded {
			t.Fatalf("record: %+v, %v", rec, err)
		}
		b.receipt(t, tok, pushOf(ids[0])).decode(t, http.StatusNoContent, nil)
		if got := b.receipts(t); got["PROVIDER_ACCEPTED"] != 1 {
			t.Fatalf("herald_receipts_total %v", got)
		}
	})
	t.Run("EndedWithoutASendIs409ForGood", func(t *testing.T) {
		t.Parallel()
		b := fresh(t)
		ids := b.notify(t, keyA, "user-1", 2)
		b.sendPush(t, ids[0], heraldtype.DeliveryPermanentFailure)
		b.sendPush(t, ids[1], heraldtype.DeliveryRetryExhausted)
		tok := b.mint(t, keyA, "user-1")
		for _, mid := range []string{pushOf(ids[0]), pushOf(ids[1])} {
			res := b.receipt(t, tok, mid)
			wantProblem(t, res, http.StatusConflict)
			if ra := res.header.Get("Retry-After"); ra != "" {
				t.Fatalf("%s: Retry-After %q on an ended delivery", mid, ra)
			}
		}
		if s, _ := b.pushState(t, ids[0]); s != string(heraldtype.DeliveryPermanentFailure) {
			t.Fatalf("push %s", s)
		}
		if got := b.receipts(t); got["PROVIDER_ACCEPTED"]+got["UNKNOWN"] != 0 {
			t.Fatalf("herald_receipts_total %v", got)
		}
	})
	t.Run("AnotherChannelIs422", func(t *testing.T) {
		t.Parallel()
		b := fresh(t)
		ids := b.notify(t, keyA, "user-1", 1)
		tok := b.mint(t, keyA, "user-1")
		// The inbox item's own message (STORED): the recipient's, but no
		// push (the store's conformance suite has SMS, e-mail, webhook).
		res := b.receipt(t, tok, itemID(ids[0]))
		if p := wantProblem(t, res, http.StatusUnprocessableEntity); p.Param != "message_id" ||
			p.Detail != "message_id names this recipient's inbox send: a receipt confirms a push the app showed, and no other channel" {
			t.Fatalf("problem %+v", p)
		}
		if got := b.receipts(t); got["PROVIDER_ACCEPTED"]+got["UNKNOWN"] != 0 {
			t.Fatalf("herald_receipts_total %v", got)
		}
	})
	t.Run("OnlyTheTokensOwnMessages", func(t *testing.T) {
		t.Parallel()
		b := fresh(t)
		ids := b.notify(t, keyA, "user-1", 1)
		b.sendPush(t, ids[0], heraldtype.DeliveryProviderAccepted)
		for _, tok := range []string{b.mint(t, keyA, "user-2"), b.mint(t, keyB, "user-1")} {
			for _, mid := range []string{pushOf(ids[0]), pushOf(ids[0]) + "x", "nothing"} {
				if p := wantProblem(t, b.receipt(t, tok, mid), http.StatusNotFound); p.Detail != "no such message for this recipient" {
					t.Fatalf("detail %q", p.Detail)
				}
			}
		}
		if s, _ := b.pushState(t, ids[0]); s != string(heraldtype.DeliveryProviderAccepted) {
			t.Fatalf("another recipient's receipt moved the push to %s", s)
		}
		tok := b.mint(t, keyA, "user-1")
		for _, body := range []string{`{}`, `{"message_id":""}`} {
			wantProblem(t, b.do(t, http.MethodPost, "/v1/me/receipts", tok, body), http.StatusUnprocessableEntity)
		}
		for _, body := range []string{`{"message_id":1}`, `{"id":"x"}`, `nope`} {
			wantProblem(t, b.do(t, http.MethodPost, "/v1/me/receipts", tok, body), http.StatusBadRequest)
		}
	})
}
