package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// count runs ReconcileCount with grace and page size; any error fails the
// test.
func count(t *testing.T, b bundle, grace time.Duration, page int) store.ReconcileCounts {
	t.Helper()
	c, err := b.s.ReconcileCount(b.ctx, store.ReconcileCountParams{Grace: grace, Page: page})
	if err != nil {
		t.Fatalf("ReconcileCount: %v", err)
	}
	return c
}

// readAPIStates tallies the states the read API shows for every planned
// send of the tenants' notifications, and counts the notifications.
func readAPIStates(t *testing.T, b bundle, tenants ...string) (map[string]int64, int64) {
	t.Helper()
	states, n := map[string]int64{}, int64(0)
	for _, tenant := range tenants {
		for _, v := range list(t, b, store.NotificationListParams{Tenant: tenant, Limit: 1000}) {
			n++
			for _, dv := range v.Deliveries {
				s, _, _ := v.EntryState(dv)
				states[s]++
			}
		}
	}
	return states, n
}

// messageIDs are the message ids of findings, in order.
func messageIDs(fs []store.ReconcileFinding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.MessageID)
	}
	return out
}

// recreate runs ReconcileOutboxRecreate; any error fails the test.
func recreate(t *testing.T, b bundle, id string, chs ...heraldtype.Channel) int {
	t.Helper()
	n, err := b.s.ReconcileOutboxRecreate(b.ctx, store.ReconcileOutboxRecreateParams{NotificationID: id, Channels: chs})
	if err != nil {
		t.Fatalf("ReconcileOutboxRecreate %s: %v", id, err)
	}
	return n
}

// noPlannedSends creates a notification of tenant t1 without outbox rows,
// as a lost write would leave it.
func noPlannedSends(t *testing.T, b bundle, mutate func(p *store.NotificationCreateParams)) string {
	t.Helper()
	p, _ := create(t, b, func(p *store.NotificationCreateParams) {
		p.Channels = nil
		if mutate != nil {
			mutate(p)
		}
	})
	return p.ID
}

func testReconcile(t *testing.T, h Harness) {
	t.Run("CountsEveryPlannedSendAsTheReadAPIShowsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		buildStates(t, b)
		create(t, b, func(p *store.NotificationCreateParams) { p.Tenant = "t2" })
		want, accepted := readAPIStates(t, b, "t1", "t2")
		// Every page size, so that pages end inside and between
		// notifications of one and of two planned sends.
		for _, page := range []int{1, 2, 3, 1000} {
			c := count(t, b, time.Hour, page)
			if c.Accepted != accepted || !maps.Equal(c.ByState, want) {
				t.Fatalf("page %d: accepted %d, by state %v; want %d and the read API's %v", page, c.Accepted, c.ByState, accepted, want)
			}
			if c.Unknown.Count != want["UNKNOWN"] || len(c.Unknown.Sample) != int(want["UNKNOWN"]) {
				t.Fatalf("page %d: unknown %+v, want %d UNKNOWN deliveries named", page, c.Unknown, want["UNKNOWN"])
			}
			if c.MissingOutbox.Count+c.NoDelivery.Count+c.Overdue != 0 {
				t.Fatalf("page %d: findings %+v in a store where every send is owned", page, c)
			}
			if !c.Now.Equal(b.clk.Now()) {
				t.Fatalf("Now = %v, want the store's clock %v", c.Now, b.clk.Now())
			}
		}
	})

	t.Run("AnEmptyStoreCountsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if c := count(t, b, time.Hour, 0); c.Accepted != 0 || len(c.ByState) != 0 {
			t.Fatalf("count of an empty store = %+v", c)
		}
	})

	t.Run("FindsANotificationWithoutPlannedSendsAndRecreatesThem", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		id := noPlannedSends(t, b, func(p *store.NotificationCreateParams) { p.Scope = "clinic-7" })
		c := count(t, b, time.Hour, 0)
		if c.MissingOutbox.Count != 1 || len(c.MissingOutbox.Sample) != 1 ||
			c.MissingOutbox.Sample[0] != (store.ReconcileFinding{NotificationID: id, Tenant: "t1", Kind: "k"}) {
			t.Fatalf("missing outbox %+v, want %s named with its tenant and kind", c.MissingOutbox, id)
		}
		if c.Accepted != 2 || c.ByState[heraldtype.ViewPending] != 1 {
			t.Fatalf("accepted %d, by state %v: want 2 notifications and one planned send", c.Accepted, c.ByState)
		}
		if n := recreate(t, b, id, heraldtype.ChannelWebhook, heraldtype.ChannelPush); n != 2 {
			t.Fatalf("recreated %d planned sends, want 2", n)
		}
		if got := entryStates(t, b, id); !slices.Equal(got, []string{heraldtype.ViewPending, heraldtype.ViewPending}) {
			t.Fatalf("recreated sends show %v, want two PENDING", got)
		}
		if n := recreate(t, b, id, heraldtype.ChannelWebhook, heraldtype.ChannelPush); n != 0 {
			t.Fatalf("a second recreate wrote %d rows, want none: the notification has its planned sends", n)
		}
		var claimed []string
		for _, r := range claim(t, b, heraldtype.LaneTransactional, 10) {
			if r.NotificationID == id {
				claimed = append(claimed, r.MessageID)
				if r.Scope != "clinic-7" {
					t.Fatalf("recreated %s with scope %q, want the notification's clinic-7", r.MessageID, r.Scope)
				}
			}
		}
		slices.Sort(claimed)
		if want := []string{store.MessageID(id, heraldtype.ChannelPush), store.MessageID(id, heraldtype.ChannelWebhook)}; !slices.Equal(claimed, want) {
			t.Fatalf("claimed %v of the recreated sends, want %v due now", claimed, want)
		}
		if c := count(t, b, time.Hour, 0); c.MissingOutbox.Count != 0 {
			t.Fatalf("after the repair missing outbox is %+v", c.MissingOutbox)
		}
	})

	// A first kind's planned sends come back as the chain intake writes:
	// step 1 PENDING, the later steps WAITING, each with its step, and
	// the chain moves on as any: a definite failure of step 1 releases
	// step 2, and step 3 waits still.
	t.Run("RecreatesAFallbackChainAsIntakeWritesIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		id := noPlannedSends(t, b, nil)
		chain := []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk}
		n, err := b.s.ReconcileOutboxRecreate(b.ctx, store.ReconcileOutboxRecreateParams{NotificationID: id, Channels: chain, Fallback: true})
		if err != nil || n != 3 {
			t.Fatalf("ReconcileOutboxRecreate of a chain: %d rows, %v; want 3", n, err)
		}
		wantChain := func(states ...string) {
			t.Helper()
			v, err := b.s.NotificationGet(b.ctx, "t1", id)
			if err != nil {
				t.Fatalf("NotificationGet: %v", err)
			}
			var got []string
			for i, dv := range v.Deliveries {
				s, _, _ := v.EntryState(dv)
				got = append(got, s)
				if dv.Fallback == nil || dv.Fallback.Step != i+1 || dv.Channel != chain[i] {
					t.Fatalf("entry %d: %s step %+v, want %s step %d", i, dv.Channel, dv.Fallback, chain[i], i+1)
				}
			}
			if !slices.Equal(got, states) {
				t.Fatalf("recreated chain shows %v, want %v", got, states)
			}
		}
		wantChain(heraldtype.ViewPending, string(heraldtype.OutboxWaiting), string(heraldtype.OutboxWaiting))
		rows := claim(t, b, heraldtype.LaneTransactional, 10)
		if len(rows) != 1 || rows[0].MessageID != store.MessageID(id, heraldtype.ChannelWebhook) {
			t.Fatalf("claimed %+v, want only the first step", rows)
		}
		decideOnJob(t, b, rows[0], heraldtype.DeliverySuppressed, heraldtype.ReasonDestinationUnavailable)
		wantChain(string(heraldtype.DeliverySuppressed), heraldtype.ViewPending, string(heraldtype.OutboxWaiting))
	})

	t.Run("RecreatedSendsWaitForSendAtAndSkipAMessageWithADelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		later := b.clk.Now().Add(time.Hour)
		id := noPlannedSends(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &later })
		// A delivery row for one of its messages, which no planned send
		// can have made: that message is not planned again.
		decideOn(t, b, store.MessageID(id, heraldtype.ChannelWebhook), heraldtype.DeliverySuppressed, heraldtype.ReasonConsentDenied)
		if n := recreate(t, b, id, heraldtype.ChannelWebhook, heraldtype.ChannelPush); n != 1 {
			t.Fatalf("recreated %d planned sends, want only push's", n)
		}
		if got := entryStates(t, b, id); !slices.Equal(got, []string{heraldtype.ViewScheduled}) {
			t.Fatalf("the recreated send shows %v, want SCHEDULED until its send_at", got)
		}
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
			t.Fatalf("claimed %d rows before the send_at", len(rows))
		}
		// An hour ahead, it was written deferred (store/promote.go): the
		// lane's claims take it at its time all the same.
		b.clk.Advance(time.Hour)
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 1 || rows[0].NotificationID != id {
			t.Fatalf("claimed %d rows at the send_at, want the recreated send", len(rows))
		}
		if n := recreate(t, b, "ntf_none", heraldtype.ChannelWebhook); n != 0 {
			t.Fatalf("recreated %d planned sends of a notification that does not exist", n)
		}
	})

	t.Run("FindsAFinishedSendWithoutADeliveryAfterTheGraceAndRedrivesIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		done, _ := create(t, b, nil)
		published, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Lane = heraldtype.LaneAlert })
		delivered, _ := create(t, b, nil)
		for _, r := range claim(t, b, heraldtype.LaneTransactional, 10) {
			if r.NotificationID == delivered.ID {
				decideOn(t, b, r.MessageID, heraldtype.DeliverySuppressed, heraldtype.ReasonConsentDenied)
			}
			if ok, err := b.s.OutboxComplete(b.ctx, r.Fence, heraldtype.OutboxDone, ""); err != nil || !ok {
				t.Fatalf("complete %s: %v %v", r.MessageID, ok, err)
			}
		}
		rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneAlert, Owner: "relay", Limit: 10, Lease: time.Minute, Publishing: true})
		if err != nil || len(rows) != 1 || rows[0].NotificationID != published.ID {
			t.Fatalf("relay claim: %d rows, %v", len(rows), err)
		}
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{rows[0].Fence}); err != nil || n != 1 {
			t.Fatalf("mark published: %d, %v", n, err)
		}
		if c := count(t, b, time.Minute, 0); c.NoDelivery.Count != 0 {
			t.Fatalf("within the grace: no delivery %+v, want none", c.NoDelivery)
		}
		b.clk.Advance(time.Minute + time.Millisecond)
		c := count(t, b, time.Minute, 1)
		msg := store.MessageID(done.ID, heraldtype.ChannelWebhook)
		want := store.ReconcileFinding{NotificationID: done.ID, MessageID: msg, Channel: heraldtype.ChannelWebhook, Tenant: "t1", Kind: "k"}
		if c.NoDelivery.Count != 1 || len(c.NoDelivery.Sample) != 1 || c.NoDelivery.Sample[0] != want {
			t.Fatalf("after the grace: no delivery %+v, want only %+v (the published one is the watchdog's, the other has a delivery)", c.NoDelivery, want)
		}
		if c.ByState[heraldtype.ViewPending] != 2 || c.Overdue != 0 {
			t.Fatalf("by state %v, overdue %d: the read API shows both PENDING, and neither waits for a claimer", c.ByState, c.Overdue)
		}
		others := []store.ReconcileFinding{want,
			{NotificationID: delivered.ID, MessageID: store.MessageID(delivered.ID, heraldtype.ChannelWebhook), Channel: heraldtype.ChannelWebhook},
			{NotificationID: published.ID, MessageID: store.MessageID(published.ID, heraldtype.ChannelWebhook), Channel: heraldtype.ChannelWebhook}}
		moved, err := b.s.ReconcileOutboxRedrive(b.ctx, others)
		if err != nil || !slices.Equal(moved, []string{msg}) {
			t.Fatalf("re-drive moved %v (%v), want only %s: not a row with a delivery, not a PUBLISHED one", moved, err, msg)
		}
		again, err := b.s.ReconcileOutboxRedrive(b.ctx, []store.ReconcileFinding{want})
		if err != nil || len(again) != 0 {
			t.Fatalf("a second re-drive moved %v (%v), want nothing: the row is PENDING", again, err)
		}
		claimedAgain := claim(t, b, heraldtype.LaneTransactional, 10)
		if len(claimedAgain) != 1 || claimedAgain[0].MessageID != msg {
			t.Fatalf("claimed %+v after the re-drive, want %s due now", claimedAgain, msg)
		}
		if c := count(t, b, time.Minute, 0); c.NoDelivery.Count != 0 {
			t.Fatalf("after the re-drive no delivery is %+v", c.NoDelivery)
		}
	})

	t.Run("CountsPendingSendsOverdueAfterTheGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		create(t, b, nil)
		later := b.clk.Now().Add(2 * time.Minute)
		create(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &later })
		if c := count(t, b, time.Minute, 0); c.Overdue != 0 {
			t.Fatalf("within the grace: overdue %d", c.Overdue)
		}
		b.clk.Advance(time.Minute + time.Millisecond)
		c := count(t, b, time.Minute, 0)
		if c.Overdue != 1 || c.NoDelivery.Count != 0 || c.ByState[heraldtype.ViewPending] != 1 || c.ByState[heraldtype.ViewScheduled] != 1 {
			t.Fatalf("overdue %d, no delivery %d, by state %v: want the due one overdue, the scheduled one not", c.Overdue, c.NoDelivery.Count, c.ByState)
		}
	})

	t.Run("SamplesAreBoundedAndInIDOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var ids []string
		for range 5 {
			ids = append(ids, noPlannedSends(t, b, nil))
		}
		slices.Sort(ids)
		c, err := b.s.ReconcileCount(b.ctx, store.ReconcileCountParams{Sample: 2, Page: 2})
		if err != nil {
			t.Fatalf("ReconcileCount: %v", err)
		}
		var got []string
		for _, f := range c.MissingOutbox.Sample {
			got = append(got, f.NotificationID)
		}
		if c.MissingOutbox.Count != 5 || !slices.Equal(got, ids[:2]) {
			t.Fatalf("missing outbox %d %v, want 5 counted and the first two named: %v", c.MissingOutbox.Count, got, ids[:2])
		}
		var unknown []string
		for range 3 {
			p, _ := create(t, b, nil)
			msg := store.MessageID(p.ID, heraldtype.ChannelWebhook)
			unknown = append(unknown, msg)
			if res := claimDelivery(t, b, claimParams(msg)); !res.Claimed || !record(t, b, msg, 1, heraldtype.DeliveryUnknown, 0) {
				t.Fatalf("claim and record UNKNOWN for %s: %+v", msg, res)
			}
		}
		slices.Sort(unknown)
		c, err = b.s.ReconcileCount(b.ctx, store.ReconcileCountParams{Sample: 2, UnknownSample: 1, Page: 2})
		if err != nil {
			t.Fatalf("ReconcileCount: %v", err)
		}
		if got := messageIDs(c.Unknown.Sample); c.Unknown.Count != 3 || !slices.Equal(got, unknown[:1]) || len(c.MissingOutbox.Sample) != 2 {
			t.Fatalf("unknown %d %v, want 3 counted and the first named (%v); missing outbox named %d, want 2",
				c.Unknown.Count, got, unknown[:1], len(c.MissingOutbox.Sample))
		}
	})

	t.Run("PaceRunsAfterEveryPageAndItsErrorEndsTheCount", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 5 {
			create(t, b, nil)
		}
		paced := 0
		_, err := b.s.ReconcileCount(b.ctx, store.ReconcileCountParams{Page: 2, Pace: func(context.Context, time.Duration) error {
			paced++
			return nil
		}})
		if err != nil || paced != 3 {
			t.Fatalf("paced %d times (%v), want after each of the 3 pages", paced, err)
		}
		stop := errors.New("stop")
		_, err = b.s.ReconcileCount(b.ctx, store.ReconcileCountParams{Page: 2, Pace: func(context.Context, time.Duration) error { return stop }})
		if !errors.Is(err, stop) {
			t.Fatalf("count with a failing pace: %v, want its error", err)
		}
	})

	t.Run("RunsKeepTheNewestReportsByteForByte", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if _, err := b.s.ReconcileRunLast(b.ctx); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("ReconcileRunLast before any run: %v, want ErrNotFound", err)
		}
		var last store.ReconcileRun
		for i, report := range []string{`{"run":1}`, `{"run":2}`, `{"z":1,  "a":[2]}`} {
			last = store.ReconcileRun{StartedAt: b.clk.Now(), FinishedAt: b.clk.Now().Add(time.Second), Report: []byte(report)}
			if err := b.s.ReconcileRunSave(b.ctx, last, 2); err != nil {
				t.Fatalf("ReconcileRunSave %d: %v", i, err)
			}
			b.clk.Advance(time.Minute)
		}
		got, err := b.s.ReconcileRunLast(b.ctx)
		if err != nil {
			t.Fatalf("ReconcileRunLast: %v", err)
		}
		if string(got.Report) != string(last.Report) || !got.StartedAt.Equal(last.StartedAt) || !got.FinishedAt.Equal(last.FinishedAt) {
			t.Fatalf("last run %+v (report %s), want %+v (report %s)", got, got.Report, last, last.Report)
		}
		// Pruning keeps the newest two: saving with keep 1 leaves the new
		// one, and the last is still the newest.
		newest := store.ReconcileRun{StartedAt: b.clk.Now(), FinishedAt: b.clk.Now(), Report: []byte(`{"run":4}`)}
		if err := b.s.ReconcileRunSave(b.ctx, newest, 1); err != nil {
			t.Fatalf("ReconcileRunSave: %v", err)
		}
		if again, err := b.s.ReconcileRunLast(b.ctx); err != nil || string(again.Report) != `{"run":4}` || again.ID <= got.ID {
			t.Fatalf("last run after keep 1: %+v, %v", got, err)
		}
	})
}
