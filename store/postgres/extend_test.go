package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// A heartbeat's lease extension does not wait for a row another
// transaction holds: the pipeline settles several rows in one transaction,
// and a heartbeat that locked one of them and waited for another it had
// settled deadlocked with it until PostgreSQL's deadlock check (1 s by
// default) aborted the batch, stalling every send of the lane for that
// second. The extension skips the held row, extends the others and
// returns at once; the batch then settles the row the heartbeat extended.
func TestOutboxExtendSkipsARowAnotherTransactionHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	for _, q := range []string{
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't', 'r', 'e' || g, 'k', 'transactional', '{}', now() FROM generate_series(1, 2) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.webhook', 't', 'transactional', 'webhook', 'PENDING', now(), now(), now() FROM notifications`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 2, Lease: time.Minute})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claimed %d (%v)", len(rows), err)
	}
	held, free := rows[1].Fence, rows[0].Fence

	// The batch's transaction has settled one row and not yet committed.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	settle := func(f store.Fence) {
		t.Helper()
		tag, err := tx.Exec(ctx, qOutboxComplete, nil, "DONE", "", f.NotificationID, string(f.Channel), f.Token)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("settle %s: %d rows (%v)", f.NotificationID, tag.RowsAffected(), err)
		}
	}
	settle(held)

	// Bounded only so that a waiting extension fails the test rather than
	// hanging it.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := s.OutboxExtend(wctx, []store.Fence{free, held}, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("OutboxExtend while another transaction holds a row: %d extended (%v), want 1 at once", n, err)
	}
	var until time.Time
	if err := s.pool.QueryRow(ctx, `SELECT claimed_until FROM outbox WHERE notification_id = $1`, free.NotificationID).Scan(&until); err != nil {
		t.Fatal(err)
	}
	if time.Until(until) < 50*time.Minute {
		t.Errorf("the free row's lease runs until %s, want about an hour from now", until)
	}

	// The batch goes on to settle the extended row and commits.
	settle(free)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
