package storetest

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// testDeferredRows: a row due beyond store.DeferHorizon is written out of
// the claim's index and promoted back by the lane's claims (see
// store/promote.go); seen through the store, it is claimed when due, not
// before and not later, by either transport's claim, and counted in the
// backlog once due.
func testDeferredRows(t *testing.T, h Harness) {
	const ahead = 2 * time.Hour // well beyond the horizon
	t.Run("ARowDueBeyondTheHorizonIsClaimedWhenDueNotBefore", func(t *testing.T) {
		for _, publishing := range []bool{false, true} {
			t.Run(map[bool]string{false: "claimer", true: "relay"}[publishing], func(t *testing.T) {
				t.Parallel()
				b := setup(t, h)
				at := Epoch.Add(ahead)
				p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &at })
				claimAt := func(when time.Duration) []store.Claimed {
					t.Helper()
					b.clk.Advance(Epoch.Add(when).Sub(b.clk.Now()))
					rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w1", Limit: 10,
						Lease: time.Minute, Publishing: publishing})
					if err != nil {
						t.Fatalf("OutboxClaim: %v", err)
					}
					return rows
				}
				// Claims all along: the one a horizon before the row's
				// time promotes it, those after it leave it until due.
				for _, when := range []time.Duration{0, time.Hour, ahead - store.DeferHorizon, ahead - time.Minute, ahead - time.Millisecond} {
					if rows := claimAt(when); len(rows) != 0 {
						t.Fatalf("claimed %d at %s, before the row's time", len(rows), when)
					}
				}
				if rows := claimAt(ahead); len(rows) != 1 || rows[0].NotificationID != p.ID {
					t.Fatalf("claimed %d at the row's time, want it", len(rows))
				}
			})
		}
	})
	// No claim ran while the row came due (no process, or the lane's
	// claims stopped): the first claim after its time takes it.
	t.Run("TheFirstClaimAfterALatePromotionTakesTheRow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		at := Epoch.Add(ahead)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &at })
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
			t.Fatalf("claimed %d before the row's time", len(rows))
		}
		b.clk.Advance(ahead + time.Hour)
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 1 || rows[0].NotificationID != p.ID {
			t.Fatalf("claimed %d an hour after the row's time, want it", len(rows))
		}
	})
	// A process that wrote the row and went away (a restart, a crash)
	// leaves it to whichever process claims the lane: promotion is the
	// claim's, kept by no process's memory.
	t.Run("AnotherProcessClaimsTheRowAtItsTime", func(t *testing.T) {
		t.Parallel()
		if h.Reopen == nil {
			t.Skip("the harness cannot open a second store")
		}
		b := setup(t, h)
		at := Epoch.Add(ahead)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &at })
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
			t.Fatalf("claimed %d before the row's time", len(rows))
		}
		other := h.Reopen(t, b.s, b.clk)
		b.clk.Advance(ahead)
		rows, err := other.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w2", Limit: 10, Lease: time.Minute})
		if err != nil || len(rows) != 1 || rows[0].NotificationID != p.ID {
			t.Fatalf("the other process claimed %d (%v) at the row's time, want it", len(rows), err)
		}
	})
	// Promotions are throttled per lane (store.PromoteEvery): claims in
	// quick succession, one before the row's horizon and the next after
	// it, still take the row at its time.
	t.Run("ClaimsInQuickSuccessionStillTakeTheRowAtItsTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		at := Epoch.Add(store.DeferHorizon + time.Second)
		p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &at })
		for b.clk.Now().Before(at) {
			if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
				t.Fatalf("claimed %d at %s, before the row's time", len(rows), b.clk.Now().Sub(Epoch))
			}
			b.clk.Advance(store.PromoteEvery / 4)
		}
		b.clk.Advance(at.Sub(b.clk.Now()))
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 1 || rows[0].NotificationID != p.ID {
			t.Fatalf("claimed %d at the row's time, want it", len(rows))
		}
	})
	// A sender's retry or deferral for longer than the horizon (quiet
	// hours on the db transport) waits out of the claim's index too.
	t.Run("ALongRetryIsClaimedWhenDue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, _ := create(t, b, nil)
		row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		if ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: row.Fence, Delay: ahead, Reason: heraldtype.ReasonQuietHours}); err != nil || !ok {
			t.Fatalf("OutboxRetry: %v %v", ok, err)
		}
		claimedWhenDue(t, b, p.ID, ahead)
	})
	// A provider's retry an hour on, settled with the send's result (the
	// db transport's usual path), likewise.
	t.Run("AProvidersLongRetryIsClaimedWhenDue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p, _ := create(t, b, nil)
		row := claim(t, b, heraldtype.LaneTransactional, 1)[0]
		if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
			Tenant: "t1", Channel: row.Channel, Provider: "p", Owner: "w1"}); !res.Claimed {
			t.Fatalf("delivery claim %+v", res)
		}
		if res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: row.MessageID, Attempt: 1, State: heraldtype.DeliveryRetryWait,
			Reason: "HTTP_503", RetryDelay: ahead, Owner: "w1", Class: "x", StartedAt: b.clk.Now(), Outbox: &row.Fence}); err != nil || !res.OutboxSettled {
			t.Fatalf("retry %+v (%v)", res, err)
		}
		claimedWhenDue(t, b, p.ID, ahead)
	})
	// The backlog counts a due row whether or not a claim has promoted it
	// yet: it is what waits for a sender.
	t.Run("TheBacklogCountsADueRowNotYetPromoted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		at := Epoch.Add(ahead)
		create(t, b, func(p *store.NotificationCreateParams) { p.SendAt = &at })
		create(t, b, nil)
		b.clk.Advance(ahead)
		got, err := b.s.OutboxBacklog(b.ctx)
		if err != nil || got[heraldtype.LaneTransactional] != 2 {
			t.Fatalf("backlog %v (%v), want 2 transactional rows", got, err)
		}
	})
}

// claimedWhenDue advances the clock to a second before notification id's
// row is due, in, and fails if a claim takes anything; then to its time,
// and fails unless a claim takes that row alone.
func claimedWhenDue(t *testing.T, b bundle, id string, in time.Duration) {
	t.Helper()
	b.clk.Advance(in - time.Second)
	if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
		t.Fatalf("claimed %d before the row's time", len(rows))
	}
	b.clk.Advance(time.Second)
	if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 1 || rows[0].NotificationID != id {
		t.Fatalf("claimed %d at the row's time, want it", len(rows))
	}
}
