package storetest

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// park creates a notification for tenant, claims its outbox row, parks its
// delivery as the sender would and, with done, completes the row as the db
// transport's claimer would.
func park(t *testing.T, b bundle, tenant, reason string, done bool) store.Claimed {
	t.Helper()
	create(t, b, func(p *store.NotificationCreateParams) { p.Tenant = tenant })
	rows := claim(t, b, heraldtype.LaneTransactional, 1)
	if len(rows) != 1 {
		t.Fatalf("claimed %d rows", len(rows))
	}
	row := rows[0]
	ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{
		MessageID: row.MessageID, NotificationID: row.NotificationID, Tenant: tenant, Channel: row.Channel,
		State: heraldtype.DeliveryParked, Reason: reason,
	})
	if err != nil || !ok {
		t.Fatalf("park: %v %v", ok, err)
	}
	if done {
		if ok, err := b.s.OutboxComplete(b.ctx, row.Fence, heraldtype.OutboxDone, reason); err != nil || !ok {
			t.Fatalf("complete: %v %v", ok, err)
		}
	}
	return row
}

func testParked(t *testing.T, h Harness) {
	t.Run("ListShowsParkedWithReasonPerTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		a := park(t, b, "t1", heraldtype.ReasonTemplateMissing, true)
		b.clk.Advance(time.Second)
		park(t, b, "t2", heraldtype.ReasonUnknownKind, true)
		got, err := b.s.ParkedList(b.ctx, store.ParkedListParams{Tenant: "t1"})
		if err != nil || len(got) != 1 {
			t.Fatalf("t1 sees %d (%v), want 1", len(got), err)
		}
		e := got[0]
		if e.MessageID != a.MessageID || e.Reason != heraldtype.ReasonTemplateMissing || e.Lane != heraldtype.LaneTransactional ||
			e.Tenant != "t1" || e.NotificationID != a.NotificationID || e.Channel != a.Channel {
			t.Fatalf("entry %+v", e)
		}
		all, err := b.s.ParkedList(b.ctx, store.ParkedListParams{})
		if err != nil || len(all) != 2 || all[0].MessageID != a.MessageID {
			t.Fatalf("every tenant: %+v (%v)", all, err)
		}
	})
	t.Run("RequeueMakesTheDeliveryClaimableOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		row := park(t, b, "t1", heraldtype.ReasonTemplateMissing, false)
		if got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{Tenant: "t2", MessageID: row.MessageID}); err != nil || len(got) != 0 {
			t.Fatalf("another tenant requeued the message: %+v (%v)", got, err)
		}
		got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{Tenant: "t1", MessageID: row.MessageID})
		if err != nil || len(got) != 1 || got[0].Reason != heraldtype.ReasonTemplateMissing {
			t.Fatalf("requeued %+v (%v)", got, err)
		}
		d := delivery(t, b, row.MessageID)
		if d.State != heraldtype.DeliveryRetryWait || d.Reason != heraldtype.ReasonRequeued {
			t.Fatalf("delivery %+v, want RETRY_WAIT REQUEUED", d)
		}
		if got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{Tenant: "t1", MessageID: row.MessageID}); err != nil || len(got) != 0 {
			t.Fatalf("requeued a message that is no longer parked: %+v (%v)", got, err)
		}
		p := claimParams(row.MessageID)
		p.Tenant = "t1"
		c1, err := b.s.DeliveryClaim(b.ctx, p)
		if err != nil || !c1.Claimed || c1.Attempt != 1 {
			t.Fatalf("claim after requeue: %+v %v", c1, err)
		}
		if c2 := claimDelivery(t, b, p); c2.Claimed {
			t.Fatal("a second copy claimed the requeued message")
		}
	})
	t.Run("RequeueWithOutboxReoffersTheDoneRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		row := park(t, b, "t1", heraldtype.ReasonTemplateMissing, true)
		other := park(t, b, "t1", heraldtype.ReasonUnknownKind, false) // its outbox row is still CLAIMED
		got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{Tenant: "t1", Outbox: true})
		if err != nil || len(got) != 1 || got[0].MessageID != row.MessageID {
			t.Fatalf("requeued %+v (%v), want only the DONE one", got, err)
		}
		rows := claim(t, b, heraldtype.LaneTransactional, 10)
		if len(rows) != 1 || rows[0].MessageID != row.MessageID || rows[0].Fence.Token <= row.Fence.Token {
			t.Fatalf("claimable after requeue: %+v", rows)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, row.Fence, heraldtype.OutboxDone, ""); err != nil || ok {
			t.Fatalf("the old fence still writes (ok %v, err %v)", ok, err)
		}
		if d := delivery(t, b, other.MessageID); d.State != heraldtype.DeliveryParked {
			t.Fatalf("delivery with a claimed outbox row became %s", d.State)
		}
	})
}
