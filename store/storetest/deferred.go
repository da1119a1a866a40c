package storetest

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// deferFor is OutboxDefer with the quiet hours' reason; any error fails
// the test.
func deferFor(t *testing.T, b bundle, f store.Fence, d time.Duration) store.OutboxDeferResult {
	t.Helper()
	res, err := b.s.OutboxDefer(b.ctx, store.OutboxDeferParams{Fence: f, Delay: d, Reason: heraldtype.ReasonQuietHours})
	if err != nil {
		t.Fatalf("OutboxDefer: %v", err)
	}
	return res
}

// wantOutbox fails unless the outbox row of notification id is in state
// with reason, due at (zero: not checked).
func wantOutbox(t *testing.T, b bundle, id string, state heraldtype.OutboxState, reason string, at time.Time) {
	t.Helper()
	e := entry(t, b, id)
	if e.OutboxState != state || e.OutboxReason != reason || !at.IsZero() && !e.AvailableAt.Equal(at) {
		t.Fatalf("outbox row %s %s due %s, want %s %s due %s", e.OutboxState, e.OutboxReason, e.AvailableAt, state, reason, at)
	}
}

func testDeferrals(t *testing.T, h Harness) {
	const night = 11 * time.Hour

	// A published message whose send was deferred for the night waits in
	// the outbox as with the db transport: PENDING, due at the end of the
	// deferral, with the deferral's reason, not a failed attempt. No claim
	// takes it before then, the watchdog finds nothing to re-drive (neither
	// the published row nor a retry waiting behind it), and at the due
	// time the relay claims it again with a fresh token.
	t.Run("PublishedRowWaitsPendingUntilDue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		row := published(t, b)
		waiting := published(t, b)
		retryLeft(t, b, waiting) // a RETRY_WAIT delivery behind it, due in a minute
		for _, r := range []store.Claimed{row, waiting} {
			if res := deferFor(t, b, r.Fence, night); !res.Deferred {
				t.Fatalf("OutboxDefer of a PUBLISHED row: %+v, want deferred", res)
			}
			wantOutbox(t, b, r.NotificationID, heraldtype.OutboxPending, heraldtype.ReasonQuietHours, Epoch.Add(night))
		}
		if rows := claim(t, b, heraldtype.LaneTransactional, 10); len(rows) != 0 {
			t.Fatalf("claimed %d deferred rows before they are due", len(rows))
		}
		b.clk.Advance(night - time.Minute)
		wantFound(t, b, store.UnownedPublished, watchGrace)
		wantFound(t, b, store.UnownedRetryWait, watchGrace)
		if rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w1",
			Limit: 10, Lease: time.Minute, Publishing: true}); err != nil || len(rows) != 0 {
			t.Fatalf("relay claimed %d rows (%v) a minute before they are due", len(rows), err)
		}

		b.clk.Advance(time.Minute)
		again := relayClaim(t, b, heraldtype.LaneTransactional, true)
		if again.MessageID != row.MessageID || again.Fence.Token <= row.Fence.Token || again.Attempts != 0 {
			t.Fatalf("claimed %s token %d attempts %d, want %s with a token past %d and no failed attempt",
				again.MessageID, again.Fence.Token, again.Attempts, row.MessageID, row.Fence.Token)
		}
	})

	// A deferral's end is never before its instant, whatever the store's
	// time resolution: deferred at 400 µs past a second until the end of
	// quiet hours, the row is due at that instant or a little after (on
	// SQLite's milliseconds, rounded up), never at 07:59:59.999 for 08:00.
	t.Run("NeverDueBeforeItsInstant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		row := published(t, b)
		b.clk.Advance(400 * time.Microsecond)
		end := b.clk.Now().Add(night - 400*time.Microsecond) // a whole second
		if res := deferFor(t, b, row.Fence, night-400*time.Microsecond); !res.Deferred {
			t.Fatalf("OutboxDefer: %+v, want deferred", res)
		}
		e := entry(t, b, row.NotificationID)
		if e.AvailableAt.Before(end) || e.AvailableAt.After(end.Add(time.Millisecond)) {
			t.Fatalf("deferred until %s, want %s (or within the store's millisecond after it)", e.AvailableAt, end)
		}
	})

	// The write is the publication's: only a row PUBLISHED under the
	// copy's own token moves. Every other row is left as it is, and the
	// result says how it was found, which tells the copy whether to keep
	// itself (the relay has yet to mark its row) or may go (the row has
	// another owner).
	t.Run("OnlyThePublicationsPublishedRowMoves", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)

		// The relay has not marked the row yet: its lease owns it, and its
		// mark still takes.
		publishing := watchJob(t, b, true)
		res := deferFor(t, b, publishing.Fence, night)
		if res.Deferred || !res.Publishing(publishing.Fence) || res.Superseded(publishing.Fence) {
			t.Fatalf("OutboxDefer of a PUBLISHING row: %+v, want left to the relay", res)
		}
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{publishing.Fence}); err != nil || n != 1 {
			t.Fatalf("the relay's mark after a refused deferral: %d (%v)", n, err)
		}

		// A copy of an older publication: the row was published again
		// (a lost confirm, then a second claim) and belongs to the newer
		// copy.
		create(t, b, nil)
		older := relayClaim(t, b, heraldtype.LaneTransactional, true)
		if ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: older.Fence, Reason: "PUBLISH_FAILED"}); err != nil || !ok {
			t.Fatalf("OutboxRetry: %v (%v)", ok, err)
		}
		newer := relayClaim(t, b, heraldtype.LaneTransactional, true)
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{newer.Fence}); err != nil || n != 1 {
			t.Fatalf("OutboxMarkPublished: %d (%v)", n, err)
		}
		res = deferFor(t, b, older.Fence, night)
		if res.Deferred || res.State != heraldtype.OutboxPublished || res.Token != newer.Fence.Token ||
			!res.Superseded(older.Fence) || res.Publishing(older.Fence) {
			t.Fatalf("OutboxDefer of an older publication: %+v, want the newer one's PUBLISHED row, superseded", res)
		}
		wantOutbox(t, b, newer.NotificationID, heraldtype.OutboxPublished, "", time.Time{})

		// A second copy of one publication: the first deferred the row,
		// the second finds it PENDING and changes nothing.
		twice := published(t, b)
		if res := deferFor(t, b, twice.Fence, night); !res.Deferred {
			t.Fatalf("first OutboxDefer: %+v", res)
		}
		b.clk.Advance(time.Minute)
		res = deferFor(t, b, twice.Fence, 2*night)
		if res.Deferred || res.State != heraldtype.OutboxPending || !res.Superseded(twice.Fence) {
			t.Fatalf("second OutboxDefer: %+v, want the PENDING row left as it is", res)
		}
		wantOutbox(t, b, twice.NotificationID, heraldtype.OutboxPending, heraldtype.ReasonQuietHours, Epoch.Add(night))

		// A row that ended under the publication's own token is neither:
		// the copy keeps its own way back.
		ended := watchJob(t, b, true)
		complete(t, b, ended, heraldtype.OutboxFailed)
		res = deferFor(t, b, ended.Fence, night)
		if res.Deferred || res.State != heraldtype.OutboxFailed || res.Superseded(ended.Fence) || res.Publishing(ended.Fence) {
			t.Fatalf("OutboxDefer of an ended row: %+v", res)
		}
		wantOutbox(t, b, ended.NotificationID, heraldtype.OutboxFailed, "", time.Time{})

		// No such row.
		gone := store.Fence{ID: 1 << 40, NotificationID: "ntf_none", Channel: heraldtype.ChannelWebhook, Token: 1}
		if res := deferFor(t, b, gone, night); res != (store.OutboxDeferResult{}) {
			t.Fatalf("OutboxDefer of no row: %+v", res)
		}
	})

	// A due-by that passes while the row waits ends it as any PENDING row:
	// EXPIRED at expires_at, before the deferral's end.
	t.Run("DueByPassingWhileDeferredExpires", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		dueBy := Epoch.Add(2 * time.Hour)
		create(t, b, func(p *store.NotificationCreateParams) { p.ExpiresAt = &dueBy })
		row := relayClaim(t, b, heraldtype.LaneTransactional, true)
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{row.Fence}); err != nil || n != 1 {
			t.Fatalf("OutboxMarkPublished: %d (%v)", n, err)
		}
		if res := deferFor(t, b, row.Fence, night); !res.Deferred {
			t.Fatalf("OutboxDefer: %+v", res)
		}
		b.clk.Advance(2 * time.Hour)
		expired, err := b.s.OutboxExpire(b.ctx, 1000)
		if err != nil || len(expired) != 1 || expired[0].MessageID != row.MessageID {
			t.Fatalf("OutboxExpire: %+v (%v), want the deferred row", expired, err)
		}
		wantOutbox(t, b, row.NotificationID, heraldtype.OutboxExpired, heraldtype.ReasonExpired, time.Time{})
	})

	// The relay's claim reads each job's recipient profile when asked
	// (Profiles), for its gate, and not otherwise.
	t.Run("RelayClaimReadsProfilesWhenAsked", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if err := b.s.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: "r1", TimeZone: "America/New_York",
			Consent: map[heraldtype.Channel]bool{heraldtype.ChannelWebhook: true}}); err != nil {
			t.Fatalf("ProfilePut: %v", err)
		}
		create(t, b, nil)
		create(t, b, func(p *store.NotificationCreateParams) { p.Recipient = "r-none" })
		create(t, b, nil)
		rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w1",
			Limit: 2, Lease: time.Minute, Publishing: true, Profiles: true})
		if err != nil || len(rows) != 2 {
			t.Fatalf("OutboxClaim: %d rows (%v)", len(rows), err)
		}
		for _, r := range rows {
			k := r.Known
			if k == nil || !k.ProfileRead {
				t.Fatalf("%s (%s): Known %+v, want the profile read", r.MessageID, r.Recipient, k)
			}
			switch r.Recipient {
			case "r1":
				p, err := store.DecodeProfile(r.Tenant, r.Recipient, k.Profile, k.ProfileUpdatedAt)
				if err != nil || p.TimeZone != "America/New_York" || !p.Consent[heraldtype.ChannelWebhook] {
					t.Fatalf("%s: profile %+v (%v)", r.MessageID, p, err)
				}
			case "r-none":
				if k.Profile != nil {
					t.Fatalf("%s: a profile %s for a recipient without one", r.MessageID, k.Profile)
				}
			}
			if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{r.Fence}); err != nil || n != 1 {
				t.Fatalf("OutboxMarkPublished: %d (%v)", n, err)
			}
		}
		plain := relayClaim(t, b, heraldtype.LaneTransactional, true)
		if plain.Known != nil {
			t.Fatalf("a relay claim without Profiles read %+v", plain.Known)
		}
	})
}
