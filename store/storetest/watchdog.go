package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// watchGrace is the grace every watchdog test finds with.
const watchGrace = 10 * time.Minute

// watchJob creates a transactional notification and claims its outbox row,
// as the db transport's claimer does, or with publishing as the relay does,
// with a one-minute lease.
func watchJob(t *testing.T, b bundle, publishing bool) store.Claimed {
	t.Helper()
	return watchJobOn(t, b, heraldtype.LaneTransactional, publishing)
}

// watchJobOn is watchJob on lane, whose PENDING rows must all be claimed.
func watchJobOn(t *testing.T, b bundle, lane heraldtype.Lane, publishing bool) store.Claimed {
	t.Helper()
	create(t, b, func(p *store.NotificationCreateParams) { p.Lane = lane })
	return relayClaim(t, b, lane, publishing)
}

// relayClaim claims the oldest due row of lane, as a claimer does, or with
// publishing as the relay does, with a one-minute lease.
func relayClaim(t *testing.T, b bundle, lane heraldtype.Lane, publishing bool) store.Claimed {
	t.Helper()
	rows, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: lane, Owner: "w1", Limit: 1,
		Lease: time.Minute, Publishing: publishing})
	if err != nil || len(rows) != 1 {
		t.Fatalf("OutboxClaim: %d rows (%v), want 1", len(rows), err)
	}
	return rows[0]
}

// samePosition reports whether a and b are one position.
func samePosition(a, b store.UnownedPosition) bool {
	return a.At.Equal(b.At) && a.MessageID == b.MessageID
}

// published creates a notification and publishes its outbox row as the
// relay does: PUBLISHED, with no delivery row yet.
func published(t *testing.T, b bundle) store.Claimed {
	t.Helper()
	row := watchJob(t, b, true)
	if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{row.Fence}); err != nil || n != 1 {
		t.Fatalf("OutboxMarkPublished: %d (%v)", n, err)
	}
	return row
}

// sendOf claims row's delivery as the sender does.
func sendOf(t *testing.T, b bundle, row store.Claimed) {
	t.Helper()
	if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
		Tenant: row.Tenant, Channel: row.Channel, Provider: "p", Owner: "w1"}); !res.Claimed {
		t.Fatalf("delivery claim of %s: %+v", row.MessageID, res)
	}
}

// retryLeft claims row's delivery and records a definite non-send, due in
// a minute, without settling the outbox row: what a copy whose outbox
// write was fenced off leaves (issue 8, path 1).
func retryLeft(t *testing.T, b bundle, row store.Claimed) {
	t.Helper()
	sendOf(t, b, row)
	if !record(t, b, row.MessageID, 1, heraldtype.DeliveryRetryWait, time.Minute) {
		t.Fatalf("record RETRY_WAIT for %s", row.MessageID)
	}
}

// complete settles a claimed outbox row, fenced, as a claimer does.
func complete(t *testing.T, b bundle, row store.Claimed, state heraldtype.OutboxState) {
	t.Helper()
	if ok, err := b.s.OutboxComplete(b.ctx, row.Fence, state, ""); err != nil || !ok {
		t.Fatalf("OutboxComplete %s %s: %v (%v)", row.MessageID, state, ok, err)
	}
}

// findAll pages through kind with pages of two rows (so every test pages)
// and returns every row without an owner, checking that the pages go
// forward and end.
func findAll(t *testing.T, b bundle, kind store.UnownedKind, grace time.Duration) []store.Unowned {
	t.Helper()
	var (
		out []store.Unowned
		pos store.UnownedPosition
	)
	for range 1000 {
		page, err := b.s.UnownedFind(b.ctx, store.UnownedFindParams{Kind: kind, Grace: grace, After: pos, Limit: 2})
		if err != nil {
			t.Fatalf("UnownedFind %s: %v", kind, err)
		}
		if page.Examined > 2 || len(page.Rows) > page.Examined {
			t.Fatalf("a page of 2 examined %d rows and found %d", page.Examined, len(page.Rows))
		}
		for _, u := range page.Rows {
			if !after(u.Position(), pos) || after(u.Position(), page.Next) {
				t.Fatalf("found %+v outside its page (%+v, %+v]", u.Position(), pos, page.Next)
			}
		}
		if page.Examined > 0 && !after(page.Next, pos) {
			t.Fatalf("page after %+v goes on from %+v: not forward", pos, page.Next)
		}
		out = append(out, page.Rows...)
		pos = page.Next
		if page.Done {
			return out
		}
	}
	t.Fatalf("%s: 1000 pages and not done", kind)
	return nil
}

// after reports whether a is after b in a kind's order.
func after(a, b store.UnownedPosition) bool {
	return a.At.After(b.At) || a.At.Equal(b.At) && a.MessageID > b.MessageID
}

// messages returns the rows' message ids, sorted.
func messages(rows []store.Unowned) []string {
	ids := make([]string, len(rows))
	for i, u := range rows {
		ids[i] = u.MessageID
	}
	slices.Sort(ids)
	return ids
}

func redrive(t *testing.T, b bundle, rows []store.Unowned) []store.Unowned {
	t.Helper()
	moved, err := b.s.UnownedRedrive(b.ctx, rows)
	if err != nil {
		t.Fatalf("UnownedRedrive: %v", err)
	}
	return moved
}

// wantFound fails unless kind finds exactly ids (any order).
func wantFound(t *testing.T, b bundle, kind store.UnownedKind, grace time.Duration, ids ...string) []store.Unowned {
	t.Helper()
	got := findAll(t, b, kind, grace)
	slices.Sort(ids)
	if m := messages(got); !slices.Equal(m, ids) {
		t.Fatalf("%s finds %v, want %v", kind, m, ids)
	}
	return got
}

func testWatchdog(t *testing.T, h Harness) {
	// Each kind of row left without an owner is found once its deadline
	// passed more than the grace ago, with what the re-drive needs, and the
	// re-drive moves it on through the normal path: the outbox row PENDING
	// again, due now, with a fresh token (a claimer takes it, the due retry
	// is claimed), or, for a stale claim, UNKNOWN.
	t.Run("FindsEachKindWithoutAnOwnerAndRedrivesIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// Every deadline below is a minute after Epoch.
		// retry_wait, three ways: the outbox row DONE (issue 8, path 1),
		// FAILED, and PUBLISHED with the broker's copy lost (path 2); each
		// retry is due in a minute.
		done := watchJob(t, b, false)
		retryLeft(t, b, done)
		complete(t, b, done, heraldtype.OutboxDone)
		failed := watchJob(t, b, false)
		retryLeft(t, b, failed)
		complete(t, b, failed, heraldtype.OutboxFailed)
		lostCopy := published(t, b)
		retryLeft(t, b, lostCopy)
		// lease: a claim whose one-minute lease ran out and that the
		// reclaim sweep never returned.
		leased := watchJob(t, b, false)
		b.clk.Advance(time.Minute)
		// published with no delivery row: its copy was lost before any
		// sender saw it.
		noDelivery := published(t, b)
		// sending: a claim the stale sweep never settled.
		stale := watchJob(t, b, false)
		sendOf(t, b, stale)
		complete(t, b, stale, heraldtype.OutboxDone)

		b.clk.Advance(watchGrace) // every deadline is exactly grace ago: not yet past it
		for _, kind := range store.UnownedKinds {
			wantFound(t, b, kind, watchGrace)
		}
		b.clk.Advance(time.Millisecond)
		retry := wantFound(t, b, store.UnownedRetryWait, watchGrace, done.MessageID, failed.MessageID, lostCopy.MessageID)
		pub := wantFound(t, b, store.UnownedPublished, watchGrace, noDelivery.MessageID)
		// A stale claim counts from stale_claim_after on: the watchdog
		// passes that plus its grace.
		wantFound(t, b, store.UnownedSending, watchGrace+time.Hour)
		sending := wantFound(t, b, store.UnownedSending, watchGrace, stale.MessageID)
		lease := wantFound(t, b, store.UnownedLease, watchGrace, leased.MessageID)

		byID := map[string]store.Unowned{}
		for _, u := range slices.Concat(retry, pub, sending, lease) {
			byID[u.MessageID] = u
		}
		for _, c := range []struct {
			row   store.Claimed
			kind  store.UnownedKind
			state heraldtype.OutboxState
			at    time.Time
		}{
			{done, store.UnownedRetryWait, heraldtype.OutboxDone, Epoch.Add(time.Minute)},
			{failed, store.UnownedRetryWait, heraldtype.OutboxFailed, Epoch.Add(time.Minute)},
			{lostCopy, store.UnownedRetryWait, heraldtype.OutboxPublished, Epoch.Add(time.Minute)},
			{noDelivery, store.UnownedPublished, heraldtype.OutboxPublished, Epoch.Add(time.Minute)},
			{stale, store.UnownedSending, "", Epoch.Add(time.Minute)},
			{leased, store.UnownedLease, heraldtype.OutboxClaimed, Epoch.Add(time.Minute)},
		} {
			u := byID[c.row.MessageID]
			want := store.Unowned{Kind: c.kind, MessageID: c.row.MessageID, NotificationID: c.row.NotificationID, Tenant: "t1",
				Lane: heraldtype.LaneTransactional, Channel: c.row.Channel, At: c.at, OutboxState: c.state}
			if c.kind != store.UnownedSending {
				want.Token = c.row.Fence.Token
			}
			if !u.At.Equal(want.At) {
				t.Errorf("%s found with deadline %v, want %v", c.kind, u.At, want.At)
			}
			u.At = want.At
			if u != want {
				t.Errorf("found %+v, want %+v", u, want)
			}
		}

		all := slices.Concat(retry, pub, sending, lease)
		if moved := redrive(t, b, all); len(moved) != len(all) {
			t.Fatalf("re-drove %v, want all of %v", messages(moved), messages(all))
		}
		for _, kind := range store.UnownedKinds {
			wantFound(t, b, kind, watchGrace)
		}
		// Every outbox row is PENDING again, due now, REDRIVEN: the next
		// claim takes all five, each with a fresh token.
		for _, row := range []store.Claimed{done, failed, lostCopy, noDelivery, leased} {
			if e := entry(t, b, row.NotificationID); e.OutboxState != heraldtype.OutboxPending || e.OutboxReason != store.ReasonRedriven ||
				!e.AvailableAt.Equal(b.clk.Now()) {
				t.Errorf("%s after the re-drive: %s(%s) due %v, want PENDING(REDRIVEN) due now", row.MessageID, e.OutboxState, e.OutboxReason, e.AvailableAt)
			}
		}
		again := claim(t, b, heraldtype.LaneTransactional, 10)
		if len(again) != 5 {
			t.Fatalf("claimed %d rows after the re-drive, want 5", len(again))
		}
		for _, row := range again {
			if old := byID[row.MessageID]; row.Fence.Token <= old.Token {
				t.Errorf("%s claimed again with token %d, not fresher than %d", row.MessageID, row.Fence.Token, old.Token)
			}
		}
		// The due retries are claimed by the sender as any due retry is.
		for _, row := range []store.Claimed{done, failed, lostCopy} {
			if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: row.MessageID, NotificationID: row.NotificationID,
				Tenant: "t1", Channel: row.Channel, Provider: "p", Owner: "w2"}); !res.Claimed || res.Attempt != 2 {
				t.Errorf("claim of the re-driven retry %s: %+v, want attempt 2", row.MessageID, res)
			}
		}
		// The stale claim is UNKNOWN, as the stale sweep would have left
		// it; the sweep finds nothing more to do.
		if d := delivery(t, b, stale.MessageID); d.State != heraldtype.DeliveryUnknown || d.Reason != heraldtype.ReasonStaleClaim {
			t.Errorf("stale claim after the re-drive: %s(%s), want UNKNOWN(STALE_CLAIM)", d.State, d.Reason)
		}
		if swept, err := b.s.DeliverySweepStale(b.ctx, time.Minute); err != nil || len(swept) != 0 {
			t.Errorf("stale sweep after the re-drive: %+v (%v), want nothing", swept, err)
		}
	})

	// What has an owner is not found, however late: a delivery waiting
	// behind its PENDING outbox row (a claimer's), a lease still held, a
	// published copy whose sender wrote its delivery, a parked message (a
	// person's), a claim younger than its threshold, and a retry whose
	// next attempt is not yet past the grace.
	t.Run("LeavesWhatHasAnOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// On the marketing lane, which the claims below do not touch: a
		// retry behind its PENDING outbox row, and a row given back.
		behindPending := watchJobOn(t, b, heraldtype.LaneMarketing, false)
		sendOf(t, b, behindPending)
		res, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: behindPending.MessageID, Attempt: 1,
			State: heraldtype.DeliveryRetryWait, Reason: "HTTP_429", RetryDelay: time.Minute, Owner: "w1", Class: "not_sent",
			StartedAt: b.clk.Now(), Outbox: &behindPending.Fence})
		if err != nil || !res.Recorded || !res.OutboxSettled {
			t.Fatalf("record RETRY_WAIT with its outbox row: %+v (%v)", res, err)
		}
		pending := watchJobOn(t, b, heraldtype.LaneMarketing, false)
		if ok, err := b.s.OutboxRetry(b.ctx, store.OutboxRetryParams{Fence: pending.Fence, Reason: "SHUTDOWN"}); err != nil || !ok {
			t.Fatalf("OutboxRetry: %v (%v)", ok, err)
		}
		parked := watchJob(t, b, false)
		if ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: parked.MessageID, NotificationID: parked.NotificationID,
			Tenant: "t1", Channel: parked.Channel, State: heraldtype.DeliveryParked, Reason: heraldtype.ReasonTemplateMissing}); err != nil || !ok {
			t.Fatalf("park: %v (%v)", ok, err)
		}
		complete(t, b, parked, heraldtype.OutboxDone)
		delivered := published(t, b)
		sendOf(t, b, delivered)
		if !record(t, b, delivered.MessageID, 1, heraldtype.DeliveryProviderAccepted, 0) {
			t.Fatal("record PROVIDER_ACCEPTED")
		}

		b.clk.Advance(3 * time.Hour)
		// A lease kept alive, and a retry left without its outbox row whose
		// next attempt comes in a minute.
		held := watchJob(t, b, false)
		if n, err := b.s.OutboxExtend(b.ctx, []store.Fence{held.Fence}, time.Hour); err != nil || n != 1 {
			t.Fatalf("OutboxExtend: %d (%v)", n, err)
		}
		late := watchJob(t, b, false)
		retryLeft(t, b, late)
		complete(t, b, late, heraldtype.OutboxDone)
		b.clk.Advance(time.Minute + watchGrace)
		// A claim just made.
		young := watchJob(t, b, false)
		sendOf(t, b, young)
		complete(t, b, young, heraldtype.OutboxDone)
		for _, kind := range store.UnownedKinds {
			wantFound(t, b, kind, watchGrace)
		}
		// The same retry, a moment later, has none.
		b.clk.Advance(time.Millisecond)
		wantFound(t, b, store.UnownedRetryWait, watchGrace, late.MessageID)
	})

	// The re-drive writes only what is still as the find saw it: a row
	// that found its owner meanwhile (a slow copy claimed the retry or
	// wrote the delivery, the reclaim sweep returned the lease, the stale
	// sweep settled the claim) is left alone and not reported.
	t.Run("RedriveLeavesWhatChangedSinceTheFind", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		claimed := watchJob(t, b, false)
		retryLeft(t, b, claimed)
		complete(t, b, claimed, heraldtype.OutboxDone)
		written := published(t, b)
		reclaimed := watchJob(t, b, false)
		swept := watchJob(t, b, false)
		sendOf(t, b, swept)
		complete(t, b, swept, heraldtype.OutboxDone)
		b.clk.Advance(time.Minute + watchGrace + time.Millisecond)
		var found []store.Unowned
		for _, kind := range store.UnownedKinds {
			found = append(found, findAll(t, b, kind, watchGrace)...)
		}
		if len(found) != 4 {
			t.Fatalf("found %v, want the 4 rows", messages(found))
		}

		if res := claimDelivery(t, b, store.DeliveryClaimParams{MessageID: claimed.MessageID, NotificationID: claimed.NotificationID,
			Tenant: "t1", Channel: claimed.Channel, Provider: "p", Owner: "slow"}); !res.Claimed {
			t.Fatalf("claim of the due retry: %+v", res)
		}
		sendOf(t, b, written)
		if n, err := b.s.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
			t.Fatalf("OutboxReclaimExpired: %d (%v), want 1", n, err)
		}
		if s, err := b.s.DeliverySweepStale(b.ctx, time.Minute); err != nil || len(s) != 1 {
			t.Fatalf("DeliverySweepStale: %+v (%v), want the one claim", s, err)
		}
		if moved := redrive(t, b, found); len(moved) != 0 {
			t.Fatalf("re-drove %v, which found their owners after the find", messages(moved))
		}
		for _, c := range []struct {
			row  store.Claimed
			want heraldtype.OutboxState
		}{{claimed, heraldtype.OutboxDone}, {written, heraldtype.OutboxPublished}, {reclaimed, heraldtype.OutboxPending}, {swept, heraldtype.OutboxDone}} {
			if e := entry(t, b, c.row.NotificationID); e.OutboxState != c.want || e.OutboxReason == store.ReasonRedriven {
				t.Errorf("%s: outbox %s(%s), want %s as the owner left it", c.row.MessageID, e.OutboxState, e.OutboxReason, c.want)
			}
		}
		if d := delivery(t, b, claimed.MessageID); d.State != heraldtype.DeliverySending || d.Attempts != 2 {
			t.Errorf("the slow copy's claim: %s attempt %d, want SENDING attempt 2", d.State, d.Attempts)
		}
	})

	// A row the watchdog re-drove has an owner again: its new copy. On the
	// rabbitmq transport a copy may sit in a slow lane, so the same wait is
	// re-driven again only when the grace has passed since the row was
	// published again, not at every round.
	t.Run("ARedrivenRowIsGivenItsGraceAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		row := published(t, b)
		retryLeft(t, b, row)
		b.clk.Advance(time.Minute + watchGrace + time.Millisecond)
		found := wantFound(t, b, store.UnownedRetryWait, watchGrace, row.MessageID)
		if len(redrive(t, b, found)) != 1 {
			t.Fatal("not re-driven")
		}
		again := relayClaim(t, b, heraldtype.LaneTransactional, true)
		if again.MessageID != row.MessageID {
			t.Fatalf("the relay claimed %s, want the re-driven %s", again.MessageID, row.MessageID)
		}
		if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{again.Fence}); err != nil || n != 1 {
			t.Fatalf("OutboxMarkPublished: %d (%v)", n, err)
		}
		b.clk.Advance(watchGrace)
		wantFound(t, b, store.UnownedRetryWait, watchGrace)
		b.clk.Advance(time.Millisecond)
		wantFound(t, b, store.UnownedRetryWait, watchGrace, row.MessageID)
	})

	// Published rows are examined in the order they were published, a
	// page at a time; a saved checkpoint lets the next round (or the next
	// leader) go on where the last stopped instead of examining them all
	// again, and a row published again after a re-drive comes after it.
	t.Run("PagesAndCheckpointsPublishedRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		if pos, err := b.s.UnownedCheckpoint(b.ctx, store.UnownedPublished); err != nil || pos != (store.UnownedPosition{}) {
			t.Fatalf("checkpoint before the first save: %+v (%v), want the zero position", pos, err)
		}
		var rows []store.Claimed
		for i := range 5 {
			row := published(t, b)
			if i%2 == 0 {
				sendOf(t, b, row) // owned
			}
			rows = append(rows, row)
			b.clk.Advance(time.Second)
		}
		b.clk.Advance(watchGrace)
		page, err := b.s.UnownedFind(b.ctx, store.UnownedFindParams{Kind: store.UnownedPublished, Grace: watchGrace, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if page.Examined != 3 || page.Done || !samePosition(page.Next, store.UnownedPosition{At: Epoch.Add(2 * time.Second), MessageID: rows[2].MessageID}) ||
			!slices.Equal(messages(page.Rows), []string{rows[1].MessageID}) {
			t.Fatalf("first page of 3: %+v, want rows[1] found, 3 examined, going on after rows[2]", page)
		}
		if err := b.s.UnownedCheckpointSave(b.ctx, store.UnownedPublished, page.Next); err != nil {
			t.Fatal(err)
		}
		pos, err := b.s.UnownedCheckpoint(b.ctx, store.UnownedPublished)
		if err != nil || !samePosition(pos, page.Next) {
			t.Fatalf("checkpoint %+v (%v), want %+v", pos, err, page.Next)
		}
		if other, err := b.s.UnownedCheckpoint(b.ctx, store.UnownedRetryWait); err != nil || other != (store.UnownedPosition{}) {
			t.Fatalf("another kind's checkpoint: %+v (%v), want the zero position", other, err)
		}
		rest, err := b.s.UnownedFind(b.ctx, store.UnownedFindParams{Kind: store.UnownedPublished, Grace: watchGrace, After: pos, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if rest.Examined != 2 || !rest.Done || rest.Next.MessageID != rows[4].MessageID || !slices.Equal(messages(rest.Rows), []string{rows[3].MessageID}) {
			t.Fatalf("second page: %+v, want rows[3] found, 2 examined, done", rest)
		}
		if moved := redrive(t, b, slices.Concat(page.Rows, rest.Rows)); len(moved) != 2 {
			t.Fatalf("re-drove %v, want rows 1 and 3", messages(moved))
		}
		for range 2 { // the relay publishes them again
			row := relayClaim(t, b, heraldtype.LaneTransactional, true)
			if n, err := b.s.OutboxMarkPublished(b.ctx, []store.Fence{row.Fence}); err != nil || n != 1 {
				t.Fatalf("OutboxMarkPublished: %d (%v)", n, err)
			}
		}
		b.clk.Advance(watchGrace + time.Millisecond)
		later, err := b.s.UnownedFind(b.ctx, store.UnownedFindParams{Kind: store.UnownedPublished, Grace: watchGrace, After: rest.Next})
		if err != nil {
			t.Fatal(err)
		}
		if !later.Done || !slices.Equal(messages(later.Rows), messages([]store.Unowned{rest.Rows[0], page.Rows[0]})) {
			t.Fatalf("after the checkpoint: %+v, want the two rows published again", later)
		}
		if err := b.s.UnownedCheckpointSave(b.ctx, store.UnownedPublished, later.Next); err != nil {
			t.Fatal(err)
		}
		if pos, err := b.s.UnownedCheckpoint(b.ctx, store.UnownedPublished); err != nil || !samePosition(pos, later.Next) {
			t.Fatalf("checkpoint saved over: %+v (%v), want %+v", pos, err, later.Next)
		}
	})
}
