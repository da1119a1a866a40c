package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/store"
)

// The pipeline runs a batch in one implicit transaction, and now() is that
// transaction's start: a statement queued behind a lock wait reads a time
// that may be long past, and a fenced write would pass a lease that already
// ran out (issue 8, path 5a). Every statement that decides ownership reads
// the statement's own time instead. Each case runs its statement in an
// explicit transaction, as a batch runs, after the deadline it decides on
// passed: the deadline is a microsecond after the transaction began, so by
// now() it is still ahead and by the clock it has passed.
func TestOwnershipIsDecidedByTheStatementsTimeNotTheTransactions(t *testing.T) {
	t.Parallel()
	type fixture struct {
		s   *Store
		row store.Claimed
	}
	const past = `$1::timestamptz + interval '1 microsecond'`
	// claimed leases the one outbox row of a fresh store (PUBLISHING with
	// publishing), with the delivery claimed too when sending.
	claimed := func(t *testing.T, publishing, sending bool) fixture {
		t.Helper()
		ctx := context.Background()
		s := setup(t, "", Options{})
		p := params(nil)
		mustCreate(t, s, p)
		rows, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: p.Lane, Owner: "w", Limit: 1, Lease: time.Minute, Publishing: publishing})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim %d rows (%v)", len(rows), err)
		}
		if sending {
			if res, err := s.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: rows[0].MessageID, NotificationID: p.ID,
				Tenant: "t1", Channel: rows[0].Channel, Provider: "p", Owner: "w"}); err != nil || !res.Claimed {
				t.Fatalf("delivery claim %+v (%v)", res, err)
			}
		}
		return fixture{s: s, row: rows[0]}
	}
	lease := `UPDATE outbox SET claimed_until = ` + past
	fences := func(r store.Claimed) []any {
		return []any{[]string{r.NotificationID}, []string{string(r.Channel)}, []int64{r.Fence.Token}}
	}
	exec := func(tx pgx.Tx, q string, args ...any) (int64, error) {
		tag, err := tx.Exec(context.Background(), q, args...)
		return tag.RowsAffected(), err
	}
	for _, c := range []struct {
		name string
		// publishing and sending shape the fixture; deadline sets, outside
		// the transaction, the deadline the statement decides on to $1 + 1µs.
		publishing, sending bool
		deadline            string
		// run runs the statement in tx and returns the rows it took; want
		// is what it must take.
		run  func(tx pgx.Tx, r store.Claimed) (int64, error)
		want int64
	}{
		{"CompleteIsRefused", false, false, lease, func(tx pgx.Tx, r store.Claimed) (int64, error) {
			return exec(tx, qOutboxComplete, nil, "DONE", "", r.NotificationID, string(r.Channel), r.Fence.Token)
		}, 0},
		{"RetryIsRefused", false, false, lease, func(tx pgx.Tx, r store.Claimed) (int64, error) {
			return exec(tx, qOutboxRetry, nil, time.Second, "", 0, r.NotificationID, string(r.Channel), r.Fence.Token)
		}, 0},
		{"MarkPublishedIsRefused", true, false, lease, func(tx pgx.Tx, r store.Claimed) (int64, error) {
			return exec(tx, qOutboxPublished, append([]any{nil}, fences(r)...)...)
		}, 0},
		{"ExtendIsRefused", false, false, lease, func(tx pgx.Tx, r store.Claimed) (int64, error) {
			return exec(tx, qOutboxExtend, append([]any{nil, time.Minute}, fences(r)...)...)
		}, 0},
		{"SettleInRecordIsRefused", false, true, lease, func(tx pgx.Tx, r store.Claimed) (int64, error) {
			var recorded, settled int64
			err := tx.QueryRow(context.Background(), qDeliveryRecordSettle, nil, "PROVIDER_ACCEPTED", "", nil, r.MessageID, 1, "w",
				time.Now(), time.Now(), "accepted", 1, "", r.NotificationID, string(r.Channel), r.Fence.Token).Scan(&recorded, &settled, new(*string))
			if err == nil && recorded != 1 {
				return -1, nil // the result itself must be recorded
			}
			return settled, err
		}, 0},
		{"ReclaimTakesTheRow", false, false, lease, func(tx pgx.Tx, _ store.Claimed) (int64, error) {
			vals, err := firstRow(tx, qOutboxReclaim, nil)
			if errors.Is(err, pgx.ErrNoRows) {
				return 0, nil
			}
			if err != nil {
				return 0, err
			}
			return vals[1].(int64), nil
		}, 1},
		{"ExpiryTakesTheRow", false, false, `UPDATE outbox SET state = 'PENDING', expires_at = ` + past,
			func(tx pgx.Tx, _ store.Claimed) (int64, error) { return exec(tx, qOutboxExpire, nil, 100) }, 1},
		{"StaleSweepTakesTheClaim", false, true, `UPDATE deliveries SET claimed_at = ` + past + ` - interval '10 minutes'`,
			func(tx pgx.Tx, _ store.Claimed) (int64, error) {
				return exec(tx, qDeliverySweepStale, nil, 10*time.Minute)
			}, 1},
		{"DueRetryIsClaimed", false, true, `UPDATE deliveries SET state = 'RETRY_WAIT', next_attempt_at = ` + past,
			func(tx pgx.Tx, r store.Claimed) (int64, error) {
				vals, err := firstRow(tx, qDeliveryClaimRetry, nil, r.MessageID, "p", "w")
				if err != nil || vals[0] == nil {
					return 0, err
				}
				return 1, nil
			}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := claimed(t, c.publishing, c.sending)
			tx, err := f.s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var t0 time.Time
			if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&t0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.s.pool.Exec(ctx, c.deadline, t0); err != nil {
				t.Fatalf("set the deadline: %v", err)
			}
			var passed bool
			if err := tx.QueryRow(ctx, `SELECT clock_timestamp() > now() + interval '1 microsecond'`).Scan(&passed); err != nil || !passed {
				t.Fatalf("the deadline has not passed by the clock (%v)", err)
			}
			got, err := c.run(tx, f.row)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("took %d rows, want %d: the statement decided by the transaction's start, not its own time", got, c.want)
			}
		})
	}
	t.Run("ClaimLeasesFromItsOwnTime", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := setup(t, "", Options{})
		p := params(nil)
		mustCreate(t, s, p)
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var before, until time.Time
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if _, err := firstRow(tx, qOutboxClaimPublishing, nil, string(p.Lane), 1, "w", time.Minute, "PUBLISHING", nil, "", []string{}, []string{}, nil, nil); err != nil {
			t.Fatalf("claim: %v", err)
		}
		if err := tx.QueryRow(ctx, `SELECT claimed_until FROM outbox WHERE notification_id = $1`, p.ID).Scan(&until); err != nil {
			t.Fatal(err)
		}
		if until.Before(before.Add(time.Minute)) {
			t.Fatalf("lease ends %s, before the claim's own time %s + 1m: it started at the transaction's start", until, before)
		}
	})
}

// firstRow runs q in tx and returns its first row's values.
func firstRow(tx pgx.Tx, q string, args ...any) ([]any, error) {
	rows, err := tx.Query(context.Background(), q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, pgx.ErrNoRows
	}
	return rows.Values()
}
