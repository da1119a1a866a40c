package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// holdRows writes n due webhook notifications and returns their ids in
// the order a claim takes them.
func holdRows(t *testing.T, s *Store, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		p := params(nil)
		mustCreate(t, s, p)
		ids = append(ids, p.ID)
	}
	return ids
}

// outboxRow is a row as every other transaction sees it.
func outboxRow(t *testing.T, s *Store, id string) (state string, token int64, owner *string, until *time.Time) {
	t.Helper()
	if err := s.pool.QueryRow(context.Background(), `SELECT state, token, claimed_by, claimed_until FROM outbox WHERE notification_id = $1`, id).
		Scan(&state, &token, &owner, &until); err != nil {
		t.Fatal(err)
	}
	return state, token, owner, until
}

// claimHold is OutboxClaimHold whose hold, if any, is given up when the
// test ends, so that a failed test does not leave the store's Close
// waiting for its connection.
func claimHold(t *testing.T, s *Store, p store.OutboxClaimParams, past []store.HeldPast) ([]store.Claimed, store.Hold, error) {
	t.Helper()
	rows, h, err := s.OutboxClaimHold(context.Background(), p, past)
	if h != nil {
		t.Cleanup(func() { h.Rollback(context.Background()) })
	}
	return rows, h, err
}

func holdParams(limit int) store.OutboxClaimParams {
	return store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "relay", Limit: limit, Lease: time.Minute, Publishing: true}
}

// A held claim writes its rows PUBLISHED in one version, seen by every
// other transaction as PENDING with the old token until it commits: a
// claim beside it takes the others (SKIP LOCKED), a consumer's put-back
// naming the new token waits for the commit, and the rows not published
// are left PUBLISHING under the claim's owner and lease for the relay's
// fenced writes.
func TestHeldClaimCommitsOneVersionSeenPendingUntilThen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	ids := holdRows(t, s, 3)
	rows, h, err := claimHold(t, s, holdParams(2), nil)
	if err != nil || len(rows) != 2 || rows[0].NotificationID != ids[0] || rows[1].NotificationID != ids[1] {
		t.Fatalf("held claim: %+v (%v), want %v's first two", rows, err, ids)
	}
	if rows[0].AvailableAt.IsZero() || rows[0].Fence.Token != 1 {
		t.Fatalf("held row %+v: want its due time and token 1", rows[0])
	}
	for _, id := range ids[:2] {
		if state, token, _, _ := outboxRow(t, s, id); state != "PENDING" || token != 0 {
			t.Fatalf("%s seen %s with token %d while held, want PENDING with 0", id, state, token)
		}
	}
	beside, err := s.OutboxClaim(ctx, holdParams(10))
	if err != nil || len(beside) != 1 || beside[0].NotificationID != ids[2] {
		t.Fatalf("a claim beside the held one took %+v (%v), want %s alone", beside, err, ids[2])
	}
	// The consumer of rows[0]'s message puts it back before the relay
	// committed: its write waits for the commit and then finds the row.
	deferred := make(chan store.OutboxDeferResult, 1)
	go func() {
		res, err := s.OutboxDefer(ctx, store.OutboxDeferParams{Fence: rows[0].Fence, Delay: time.Hour, Reason: "QUIET_HOURS"})
		if err != nil {
			t.Error(err)
		}
		deferred <- res
	}()
	select {
	case res := <-deferred:
		t.Fatalf("the put-back returned %+v before the held claim committed", res)
	case <-time.After(200 * time.Millisecond):
	}
	if err := h.Commit(ctx, []store.Fence{rows[1].Fence}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-deferred:
	case <-time.After(10 * time.Second):
		t.Fatal("the put-back still waits after the commit")
	}
	if state, token, _, _ := outboxRow(t, s, ids[0]); state != "PENDING" || token != 1 {
		t.Fatalf("put back: %s with token %d, want PENDING with 1", state, token)
	}
	state, token, owner, until := outboxRow(t, s, ids[1])
	if state != "PUBLISHING" || token != 1 || owner == nil || *owner != "relay" || until == nil {
		t.Fatalf("unpublished: %s token %d owner %v until %v, want PUBLISHING under relay's lease", state, token, owner, until)
	}
	if ok, err := s.OutboxRetry(ctx, store.OutboxRetryParams{Fence: rows[1].Fence, Reason: "PUBLISH_FAILED", Failed: true}); err != nil || !ok {
		t.Fatalf("the relay's fenced retry of the unpublished row: %v %v", ok, err)
	}
	if err := h.Commit(ctx, nil, nil); err == nil {
		t.Fatal("a second commit of one hold succeeded")
	}
}

// A confirmed batch's commit leaves its rows PUBLISHED with no owner or
// lease, as the mark does, and a row the relay's gate held back PENDING,
// due when its deferral ends, with the ruling's reason and no failed
// attempt, as OutboxRetry leaves it.
func TestHeldClaimCommittedIsPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	ids := holdRows(t, s, 3)
	rows, h, err := claimHold(t, s, holdParams(5), nil)
	if err != nil || len(rows) != 3 {
		t.Fatalf("held claim: %d rows (%v)", len(rows), err)
	}
	before := time.Now()
	if err := h.Commit(ctx, nil, []store.OutboxRetryParams{{Fence: rows[2].Fence, Delay: 3 * time.Hour, Reason: "QUIET_HOURS", Failed: true}}); err != nil {
		t.Fatal(err)
	}
	var state, reason string
	var token int64
	var attempts int
	var due time.Time
	var deferred bool
	if err := s.pool.QueryRow(ctx, `SELECT state, last_reason, token, attempts, available_at, deferred FROM outbox WHERE notification_id = $1`, ids[2]).
		Scan(&state, &reason, &token, &attempts, &due, &deferred); err != nil {
		t.Fatal(err)
	}
	if state != "PENDING" || reason != "QUIET_HOURS" || token != 1 || attempts != 0 || due.Before(before.Add(3*time.Hour)) || due.After(time.Now().Add(3*time.Hour)) || !deferred {
		t.Fatalf("put back: %s %s token %d attempts %d due %s deferred %v, want PENDING QUIET_HOURS, token 1, no attempt, due in 3h, deferred",
			state, reason, token, attempts, due, deferred)
	}
	for _, id := range ids[:2] {
		if state, token, owner, until := outboxRow(t, s, id); state != "PUBLISHED" || token != 1 || owner != nil || until != nil {
			t.Fatalf("%s: %s token %d owner %v until %v, want PUBLISHED with token 1 and no lease", id, state, token, owner, until)
		}
	}
	if rows, h, err := claimHold(t, s, holdParams(5), nil); err != nil || len(rows) != 0 || h != nil {
		t.Fatalf("a held claim of nothing due: %d rows, hold %v (%v)", len(rows), h, err)
	}
}

// A rollback, and a held claim's session that stays idle in its
// transaction past HoldTimeout (a process stopped without dying), leave
// the rows PENDING with their old token, due at once.
func TestHeldClaimGivenUpLeavesRowsPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{HoldTimeout: 300 * time.Millisecond})
	ids := holdRows(t, s, 2)
	rows, h, err := claimHold(t, s, holdParams(1), nil)
	if err != nil || len(rows) != 1 {
		t.Fatalf("held claim: %d rows (%v)", len(rows), err)
	}
	h.Rollback(ctx)
	if state, token, _, _ := outboxRow(t, s, ids[0]); state != "PENDING" || token != 0 {
		t.Fatalf("rolled back: %s with token %d", state, token)
	}
	rows, h, err = claimHold(t, s, holdParams(2), nil)
	if err != nil || len(rows) != 2 || rows[0].Fence.Token != 1 {
		t.Fatalf("held claim after the rollback: %+v (%v), want both rows, the first with token 1 again", rows, err)
	}
	time.Sleep(time.Second) // idle in its transaction past the timeout
	if err := h.Commit(ctx, nil, nil); err == nil {
		t.Fatal("a held claim whose session timed out committed")
	}
	for _, id := range ids {
		if state, token, _, _ := outboxRow(t, s, id); state != "PENDING" || token != 0 {
			t.Fatalf("%s after the timeout: %s with token %d, want PENDING with 0", id, state, token)
		}
	}
	if rows, err := s.OutboxClaim(ctx, holdParams(5)); err != nil || len(rows) != 2 {
		t.Fatalf("a claim after the timeout took %d rows (%v), want both", len(rows), err)
	}
}

// With HeldPast a claim starts each scope past the rows the relay holds
// in it, not walking them; a row due behind it is taken only by a claim
// without it.
func TestHeldClaimStartsPastItsHeldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	ids := holdRows(t, s, 5)
	first, h1, err := claimHold(t, s, holdParams(2), nil)
	if err != nil || len(first) != 2 {
		t.Fatalf("first held claim: %d rows (%v)", len(first), err)
	}
	past := func(rows []store.Claimed) []store.HeldPast {
		last := rows[len(rows)-1]
		return []store.HeldPast{{Tenant: last.Tenant, Scope: last.Scope, AvailableAt: last.AvailableAt, ID: last.Fence.ID}}
	}
	second, h2, err := claimHold(t, s, holdParams(2), past(first))
	if err != nil || len(second) != 2 || second[0].NotificationID != ids[2] || second[1].NotificationID != ids[3] {
		t.Fatalf("second held claim: %+v (%v), want %v's third and fourth", second, err, ids)
	}
	// The first claim gives its rows up: they are due behind the second's.
	h1.Rollback(ctx)
	third, h3, err := claimHold(t, s, holdParams(5), past(second))
	if err != nil || len(third) != 1 || third[0].NotificationID != ids[4] {
		t.Fatalf("a claim past the held rows: %+v (%v), want %s alone", third, err, ids[4])
	}
	fourth, h4, err := claimHold(t, s, holdParams(5), nil)
	if err != nil || len(fourth) != 2 || fourth[0].NotificationID != ids[0] || fourth[1].NotificationID != ids[1] {
		t.Fatalf("a claim without HeldPast: %+v (%v), want the two given up", fourth, err)
	}
	for _, h := range []store.Hold{h2, h3, h4} {
		if err := h.Commit(ctx, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Another scope's HeldPast leaves this one's rows alone.
	more := holdRows(t, s, 1)
	other := []store.HeldPast{{Tenant: "t1", Scope: "other", AvailableAt: time.Now().Add(time.Hour), ID: 1 << 40}}
	if rows, h, err := claimHold(t, s, holdParams(5), other); err != nil || len(rows) != 1 || rows[0].NotificationID != more[0] {
		t.Fatalf("a claim past another scope's rows: %+v (%v)", rows, err)
	} else {
		h.Rollback(ctx)
	}
}
