package storetest

import (
	"errors"
	"slices"
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
			e.Tenant != "t1" || e.NotificationID != a.NotificationID || e.Channel != a.Channel || e.Kind != "k" {
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
	t.Run("RestoreParksARequeuedDeliveryAgainUnlessItMovedOn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		row := park(t, b, "t1", heraldtype.ReasonUnknownKind, false)
		restore := func() bool {
			t.Helper()
			ok, err := b.s.ParkedRestore(b.ctx, store.ParkedRestoreParams{MessageID: row.MessageID, Reason: heraldtype.ReasonUnknownKind})
			if err != nil {
				t.Fatalf("ParkedRestore: %v", err)
			}
			return ok
		}
		if restore() {
			t.Fatal("restored a delivery that was never requeued")
		}
		if got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{Tenant: "t1", MessageID: row.MessageID}); err != nil || len(got) != 1 {
			t.Fatalf("requeued %+v (%v)", got, err)
		}
		if !restore() {
			t.Fatal("did not restore the requeued delivery")
		}
		if d := delivery(t, b, row.MessageID); d.State != heraldtype.DeliveryParked || d.Reason != heraldtype.ReasonUnknownKind || d.NextAttemptAt != nil {
			t.Fatalf("delivery %+v, want PARKED UNKNOWN_KIND with no next attempt", d)
		}
		// Requeued again, and this time a copy claimed it: a restore must
		// not take the claim back.
		if got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{Tenant: "t1", MessageID: row.MessageID}); err != nil || len(got) != 1 {
			t.Fatalf("requeued %+v (%v)", got, err)
		}
		p := claimParams(row.MessageID)
		if c := claimDelivery(t, b, p); !c.Claimed {
			t.Fatal("the requeued delivery could not be claimed")
		}
		if restore() {
			t.Fatal("restore took a SENDING claim back")
		}
		if d := delivery(t, b, row.MessageID); d.State != heraldtype.DeliverySending {
			t.Fatalf("delivery %s after a refused restore, want SENDING", d.State)
		}
	})
	t.Run("DiscardEndsTheParkedDeliveryAndAuditsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		row := park(t, b, "t1", heraldtype.ReasonUnknownKind, true)
		b.clk.Advance(time.Minute)
		p := store.ParkedDiscardParams{Tenant: "t2", MessageID: row.MessageID, Reason: "kind retired", Actor: "api:t2"}
		if discard(t, b, p) {
			t.Fatal("another tenant discarded the message")
		}
		p.Tenant, p.Actor = "t1", "api:t1"
		if !discard(t, b, p) {
			t.Fatal("the PARKED delivery was not discarded")
		}
		d := delivery(t, b, row.MessageID)
		if d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonDiscarded || !d.State.Terminal() {
			t.Fatalf("delivery %s(%s), want SUPPRESSED(DISCARDED)", d.State, d.Reason)
		}
		if e := entry(t, b, row.NotificationID); e.OutboxState != heraldtype.OutboxDone {
			t.Fatalf("outbox row %s, want DONE", e.OutboxState)
		}
		wantAudit(t, b, row.MessageID, []store.ParkedDiscardEntry{{
			DiscardedAt: b.clk.Now(), Actor: "api:t1", MessageID: row.MessageID, Tenant: "t1",
			ParkedReason: heraldtype.ReasonUnknownKind, Reason: "kind retired",
		}})
		if got := parkedList(t, b, ""); len(got) != 0 {
			t.Fatalf("still listed as parked: %+v", got)
		}
		// Again: nothing is parked, nothing is written.
		p.Tenant = ""
		if discard(t, b, p) {
			t.Fatal("a second discard discarded again")
		}
		wantAudit(t, b, row.MessageID, wantAuditLen(1))
		// A requeue does not bring it back, and no copy can claim it.
		if got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{MessageID: row.MessageID, Outbox: true}); err != nil || len(got) != 0 {
			t.Fatalf("requeue after the discard: %+v (%v)", got, err)
		}
		if c := claimDelivery(t, b, claimParams(row.MessageID)); c.Claimed {
			t.Fatal("a copy claimed a discarded message")
		}
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
			t.Fatalf("outbox rows offered again after the discard: %+v", rows)
		}
	})
	t.Run("DiscardSettlesAnOutboxRowNoOneHolds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// The claimer parked the delivery and died before it finished its
		// outbox row: the lease runs out and the row is PENDING again.
		row := park(t, b, "t1", heraldtype.ReasonTemplateMissing, false)
		b.clk.Advance(2 * time.Minute)
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("reclaimed %d (%v), want 1", n, err)
		}
		// The operator's discard names no tenant: the store answers the
		// delivery's, which its audit entry is written under.
		res, err := b.s.ParkedDiscard(b.ctx, store.ParkedDiscardParams{MessageID: row.MessageID, Reason: "template gone", Actor: "cli:ops"})
		if err != nil || !res.Discarded || res.Tenant != "t1" {
			t.Fatalf("ParkedDiscard = %+v, %v; want discarded, tenant t1", res, err)
		}
		if e := entry(t, b, row.NotificationID); e.OutboxState != heraldtype.OutboxDone || e.OutboxReason != heraldtype.ReasonDiscarded {
			t.Fatalf("outbox row %s(%s), want DONE(DISCARDED)", e.OutboxState, e.OutboxReason)
		}
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
			t.Fatalf("the discarded message's outbox row was offered again: %+v", rows)
		}
	})
	t.Run("DiscardLeavesADeliveryThatIsNoLongerParked", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		row := park(t, b, "t1", heraldtype.ReasonUnknownKind, true)
		if got, err := b.s.ParkedRequeue(b.ctx, store.ParkedRequeueParams{MessageID: row.MessageID, Outbox: true}); err != nil || len(got) != 1 {
			t.Fatalf("requeued %+v (%v)", got, err)
		}
		if discard(t, b, store.ParkedDiscardParams{MessageID: row.MessageID, Reason: "too late", Actor: "cli:ops"}) {
			t.Fatal("discarded a requeued delivery")
		}
		if d := delivery(t, b, row.MessageID); d.State != heraldtype.DeliveryRetryWait {
			t.Fatalf("delivery %s, want the requeue's RETRY_WAIT", d.State)
		}
		wantAudit(t, b, row.MessageID, wantAuditLen(0))
	})
	t.Run("BrokerDiscardSuppressesWhatNoCopyOwns", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		copyOf := func(id string) store.ParkedDiscardParams {
			return store.ParkedDiscardParams{
				Broker: true, Tenant: "t1", MessageID: id + ".sms", NotificationID: id, Channel: heraldtype.ChannelSMS,
				ParkedReason: "DELIVERY_LIMIT", Reason: "poison", Actor: "cli:ops",
			}
		}
		// No delivery row yet (a copy that kept killing its consumer before
		// any write): the discard writes SUPPRESSED(DISCARDED), so no other
		// copy can claim it.
		if !discard(t, b, copyOf("n-none")) {
			t.Fatal("not discarded")
		}
		// A second copy's discard is audited, but the delivery had already
		// ended: the answer says it entered nothing.
		if discard(t, b, copyOf("n-none")) {
			t.Fatal("a second discard reported ending the delivery again")
		}
		wantAudit(t, b, "n-none.sms", wantAuditLen(2))
		if d := delivery(t, b, "n-none.sms"); d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonDiscarded ||
			d.Tenant != "t1" || d.NotificationID != "n-none" || d.Channel != heraldtype.ChannelSMS {
			t.Fatalf("delivery %+v, want SUPPRESSED(DISCARDED) of t1's n-none on sms", d)
		}
		if c := claimDelivery(t, b, claimParams("n-none.sms")); c.Claimed {
			t.Fatal("a copy claimed a discarded message")
		}
		// Attempted once: claimed, then its result recorded.
		attempted := func(id string, state heraldtype.DeliveryState, delay time.Duration) {
			t.Helper()
			if c := claimDelivery(t, b, claimParams(id)); !c.Claimed {
				t.Fatalf("claim %s", id)
			}
			if !record(t, b, id, 1, state, delay) {
				t.Fatalf("record %s %s", id, state)
			}
		}
		// Waiting (RETRY_WAIT): suppressed too.
		attempted("n-wait.sms", heraldtype.DeliveryRetryWait, time.Minute)
		if !discard(t, b, copyOf("n-wait")) {
			t.Fatal("not discarded")
		}
		if d := delivery(t, b, "n-wait.sms"); d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonDiscarded {
			t.Fatalf("delivery %s(%s), want SUPPRESSED(DISCARDED)", d.State, d.Reason)
		}
		// Already sent by another copy: the delivery keeps its result (the
		// answer is false); the copy's discard is still recorded.
		attempted("n-sent.sms", heraldtype.DeliveryProviderAccepted, 0)
		if discard(t, b, copyOf("n-sent")) {
			t.Fatal("the discard reported ending a delivery another copy finished")
		}
		if d := delivery(t, b, "n-sent.sms"); d.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("delivery %s, want PROVIDER_ACCEPTED kept", d.State)
		}
		wantAudit(t, b, "n-sent.sms", []store.ParkedDiscardEntry{{
			DiscardedAt: b.clk.Now(), Actor: "cli:ops", MessageID: "n-sent.sms", Tenant: "t1", ParkedReason: "DELIVERY_LIMIT", Reason: "poison",
		}})
		// A body that is not a job names no notification and no tenant:
		// only the audit row, and no delivery entered anything.
		if discard(t, b, store.ParkedDiscardParams{Broker: true, MessageID: "garbage-1", ParkedReason: "MALFORMED_BODY", Reason: "junk", Actor: "cli:ops"}) {
			t.Fatal("the discard reported ending a delivery for a message with no notification")
		}
		if _, err := b.s.DeliveryGet(b.ctx, "garbage-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a delivery row for a message with no notification: %v", err)
		}
		wantAudit(t, b, "garbage-1", []store.ParkedDiscardEntry{{
			DiscardedAt: b.clk.Now(), Actor: "cli:ops", MessageID: "garbage-1", ParkedReason: "MALFORMED_BODY", Reason: "junk",
		}})
	})
	t.Run("DiscardListFiltersByTenantAndMessageOldestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for _, c := range []struct{ tenant, id string }{{"t1", "m1"}, {"t2", "m2"}, {"t1", "m3"}, {"", "m4"}} {
			discard(t, b, store.ParkedDiscardParams{Broker: true, Tenant: c.tenant, MessageID: c.id, Reason: "r", Actor: "cli:ops"})
			b.clk.Advance(time.Second)
		}
		ids := func(p store.ParkedDiscardListParams) []string {
			t.Helper()
			rows, err := b.s.ParkedDiscardList(b.ctx, p)
			if err != nil {
				t.Fatalf("ParkedDiscardList: %v", err)
			}
			var out []string
			for i, r := range rows {
				if i > 0 && (r.ID <= rows[i-1].ID || r.DiscardedAt.Before(rows[i-1].DiscardedAt)) {
					t.Fatalf("rows out of order: %+v", rows)
				}
				out = append(out, r.MessageID)
			}
			return out
		}
		for _, c := range []struct {
			p    store.ParkedDiscardListParams
			want []string
		}{
			{store.ParkedDiscardListParams{}, []string{"m1", "m2", "m3", "m4"}},
			{store.ParkedDiscardListParams{Tenant: "t1"}, []string{"m1", "m3"}},
			{store.ParkedDiscardListParams{MessageID: "m2"}, []string{"m2"}},
			{store.ParkedDiscardListParams{Tenant: "t1", MessageID: "m2"}, nil},
			{store.ParkedDiscardListParams{Limit: 2}, []string{"m1", "m2"}},
		} {
			if got := ids(c.p); !slices.Equal(got, c.want) {
				t.Errorf("ParkedDiscardList(%+v) = %v, want %v", c.p, got, c.want)
			}
		}
	})
}

// discard runs ParkedDiscard; any error fails the test, and so does a
// discard of a tenant's message that names another tenant.
func discard(t *testing.T, b bundle, p store.ParkedDiscardParams) bool {
	t.Helper()
	res, err := b.s.ParkedDiscard(b.ctx, p)
	if err != nil {
		t.Fatalf("ParkedDiscard %s: %v", p.MessageID, err)
	}
	if res.Discarded && p.Tenant != "" && res.Tenant != p.Tenant {
		t.Fatalf("ParkedDiscard %s of tenant %s names tenant %q", p.MessageID, p.Tenant, res.Tenant)
	}
	return res.Discarded
}

// parkedList runs ParkedList for tenant; any error fails the test.
func parkedList(t *testing.T, b bundle, tenant string) []store.ParkedEntry {
	t.Helper()
	got, err := b.s.ParkedList(b.ctx, store.ParkedListParams{Tenant: tenant})
	if err != nil {
		t.Fatalf("ParkedList: %v", err)
	}
	return got
}

// wantAuditLen is a want for wantAudit that checks only the count.
func wantAuditLen(n int) []store.ParkedDiscardEntry { return make([]store.ParkedDiscardEntry, n) }

// wantAudit checks the audit rows of messageID against want, ignoring IDs;
// rows of want with no Actor are only counted.
func wantAudit(t *testing.T, b bundle, messageID string, want []store.ParkedDiscardEntry) {
	t.Helper()
	got, err := b.s.ParkedDiscardList(b.ctx, store.ParkedDiscardListParams{MessageID: messageID})
	if err != nil {
		t.Fatalf("ParkedDiscardList: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d audit rows for %s, want %d: %+v", len(got), messageID, len(want), got)
	}
	for i, w := range want {
		if w.Actor == "" {
			continue
		}
		g := got[i]
		g.ID = 0
		if !g.DiscardedAt.Equal(w.DiscardedAt) {
			t.Errorf("audit row %d discarded at %s, want %s", i, g.DiscardedAt, w.DiscardedAt)
		}
		g.DiscardedAt = w.DiscardedAt
		if g != w {
			t.Errorf("audit row %d = %+v, want %+v", i, g, w)
		}
	}
}
