package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// DeliveryGet reads the delivery of messageID; an inbox send's is read
// from its notification's inbox_at (store.InboxDelivery).
func (s *Store) DeliveryGet(ctx context.Context, messageID string) (store.Delivery, error) {
	d, err := scanDelivery(s.queryRow(ctx, qDeliveryGet, messageID))
	if errors.Is(err, sql.ErrNoRows) {
		if id, ok := store.InboxNotificationID(messageID); ok {
			var tenant string
			var created int64
			err := s.queryRow(ctx, qInboxSendGet, id).Scan(&tenant, &created)
			if err == nil {
				return store.InboxDelivery(id, tenant, fromMs(created)), nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return store.Delivery{}, fmt.Errorf("read inbox send: %w", err)
			}
		}
		return d, store.ErrNotFound
	}
	if err != nil {
		return d, fmt.Errorf("read delivery: %w", err)
	}
	return d, nil
}

func scanDelivery(row interface{ Scan(...any) error }) (store.Delivery, error) {
	var d store.Delivery
	var ch, state string
	var claimed, next sql.NullInt64
	var created, updated int64
	err := row.Scan(&d.MessageID, &d.NotificationID, &d.Tenant, &ch, &d.Provider, &state, &d.Reason, &d.Attempts,
		&claimed, &next, &created, &updated)
	if err != nil {
		return d, err
	}
	d.Channel, d.State = heraldtype.Channel(ch), heraldtype.DeliveryState(state)
	d.ClaimedAt, d.NextAttemptAt = fromNullMs(claimed), fromNullMs(next)
	d.CreatedAt, d.UpdatedAt = fromMs(created), fromMs(updated)
	return d, nil
}

// DeliveryClaim inserts SENDING for a new message or takes a due RETRY_WAIT
// row; a cancelled notification's send, or a cancelled campaign's retry,
// it ends SUPPRESSED(CANCELLED) instead.
func (s *Store) DeliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	var res store.DeliveryClaimResult
	var wake heraldtype.Lane // a fallback step a cancelled send's end released
	err := s.w.do(ctx, func(tx wtx) error {
		res, wake = store.DeliveryClaimResult{}, ""
		now := s.now()
		if p.Event != nil {
			// A cancelled notification's send takes no key (store.Cancels;
			// the insert below then inserts nothing).
			var cancelled bool
			if err := tx.QueryRow(qNotificationCancelled, p.NotificationID).Scan(&cancelled); err != nil {
				return fmt.Errorf("read the cancel mark: %w", err)
			}
			if !cancelled {
				// The event key in the claim's own transaction: one writer
				// operation before the call, not two.
				take, err := takeEventKey(tx, now, *p.Event)
				if err != nil {
					return fmt.Errorf("%w: %w", store.ErrEventKeys, err)
				}
				res.Event = take
				if take.Outcome == store.EventKeyHeld {
					return nil
				}
			}
		}
		r, err := tx.Exec(qDeliveryClaimInsert, p.MessageID, p.NotificationID, p.Tenant, string(p.Channel), p.Provider, p.Owner, now, now, now)
		if err != nil {
			return fmt.Errorf("insert claim: %w", err)
		}
		if n, _ := r.RowsAffected(); n == 1 {
			res.Claimed, res.Attempt = true, 1
			return nil
		}
		r, err = tx.Exec(qDeliveryRetryCancelled, now, p.MessageID)
		if err != nil {
			return fmt.Errorf("end a cancelled retry: %w", err)
		}
		if n, _ := r.RowsAffected(); n == 1 {
			res.Cancelled = true
			// Its end moves its fallback chain on, as any end does (the
			// steps after it are skipped); there is no retry to claim.
			if wake, err = fallbackEnded(tx, now, p.MessageID, heraldtype.DeliverySuppressed, heraldtype.ReasonCancelled); err != nil {
				return err
			}
		} else {
			var attempt int
			err = tx.QueryRow(qDeliveryClaimRetry, p.Provider, p.Owner, now, now, p.MessageID, now).Scan(&attempt)
			if err == nil {
				res.Claimed, res.Attempt = true, attempt
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("claim retry: %w", err)
			}
		}
		cur, err := scanDelivery(tx.QueryRow(qDeliveryGet, p.MessageID))
		if errors.Is(err, sql.ErrNoRows) {
			// The insert found the notification cancelled: the claim ends
			// the send with the cancel's own decision, which moves its
			// fallback chain on.
			if res.Cancelled, wake, err = decide(tx, now, store.DeliveryDecideParams{MessageID: p.MessageID, NotificationID: p.NotificationID,
				Tenant: p.Tenant, Channel: p.Channel, State: heraldtype.DeliverySuppressed, Reason: heraldtype.ReasonCancelled}); err != nil {
				return fmt.Errorf("end a cancelled send: %w", err)
			}
			cur, err = scanDelivery(tx.QueryRow(qDeliveryGet, p.MessageID))
		}
		if err != nil {
			return fmt.Errorf("read blocking delivery: %w", err)
		}
		res.Current = &cur
		return nil
	})
	if err != nil {
		return store.DeliveryClaimResult{}, fmt.Errorf("claim delivery %s: %w", p.MessageID, err)
	}
	s.wakeFallback(wake)
	return res, nil
}

// DeliveryRecord writes the outcome of a claimed attempt and its log row
// (once per attempt).
func (s *Store) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	var res store.RecordResult
	var wake heraldtype.Lane
	err := s.w.do(ctx, func(tx wtx) error {
		res, wake = store.RecordResult{}, ""
		now := s.now()
		var next any
		if p.State == heraldtype.DeliveryRetryWait {
			next = s.after(p.RetryDelay)
		}
		r, err := tx.Exec(qDeliveryRecord, string(p.State), p.Reason, next, now, p.ProviderRef, p.MessageID, p.Attempt)
		if err != nil {
			return fmt.Errorf("record result: %w", err)
		}
		n, _ := r.RowsAffected()
		res.Recorded = n == 1
		// A send whose claim read that it is on no chain (its fence's
		// OffChain) runs no chain statement (fallback.go); nor does one
		// that leaves a lazy chain unwritten, if it still is (below).
		lazy := p.Outbox != nil && p.Outbox.LazyChain && p.State.Terminal() && !fallback.Definite(p.State, p.Reason)
		if res.Recorded && !lazy && !p.OnNoChain() {
			if wake, err = fallbackEnded(tx, now, p.MessageID, p.State, p.Reason); err != nil {
				return err
			}
		}
		finished := p.StartedAt.Add(p.Duration)
		if _, err := tx.Exec(qAttemptInsert, p.MessageID, p.Attempt, p.Owner, ms(p.StartedAt), ms(finished),
			p.Class, p.Reason, p.Duration.Milliseconds()); err != nil {
			return fmt.Errorf("log attempt: %w", err)
		}
		if p.Outbox == nil || !res.Recorded {
			return nil
		}
		switch {
		case p.State == heraldtype.DeliveryRetryWait:
			r, err = tx.Exec(qOutboxRetry, next, deferredAt(next.(int64), now), p.Reason, 0, now, p.Outbox.ID, p.Outbox.Token, now)
		case lazy:
			// Settled while the chain's later steps have no rows: they
			// need no skip. Else (written since the claim: another
			// device's failure, a cancel, an erasure; or the lease lost)
			// the chain moves as any send's end moves it.
			r, err = tx.Exec(qOutboxCompleteLazy, string(heraldtype.OutboxDone), p.Reason, now, p.Outbox.ID, p.Outbox.Token, now)
			if n, _ := r.RowsAffected(); err == nil && n == 0 {
				if wake, err = fallbackEnded(tx, now, p.MessageID, p.State, p.Reason); err != nil {
					return err
				}
				r, err = tx.Exec(qOutboxComplete, string(heraldtype.OutboxDone), p.Reason, now, p.Outbox.ID, p.Outbox.Token, now)
			}
		default:
			r, err = tx.Exec(qOutboxComplete, string(heraldtype.OutboxDone), p.Reason, now, p.Outbox.ID, p.Outbox.Token, now)
		}
		if err != nil {
			return fmt.Errorf("settle outbox row %d: %w", p.Outbox.ID, err)
		}
		n, _ = r.RowsAffected()
		res.OutboxSettled = n == 1
		return nil
	})
	if err != nil {
		return store.RecordResult{}, fmt.Errorf("record delivery %s: %w", p.MessageID, err)
	}
	s.wakeFallback(wake)
	return res, nil
}

// DeliveryDecide records SUPPRESSED or PARKED for a message not yet claimed.
func (s *Store) DeliveryDecide(ctx context.Context, p store.DeliveryDecideParams) (bool, error) {
	var ok bool
	var wake heraldtype.Lane
	err := s.w.do(ctx, func(tx wtx) (err error) {
		ok, wake, err = decide(tx, s.now(), p)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("decide delivery %s: %w", p.MessageID, err)
	}
	s.wakeFallback(wake)
	return ok, nil
}

// decide writes p's decision in tx (DeliveryDecide) and moves its chain
// on if it was written, returning the lane of a step that released.
func decide(tx wtx, now int64, p store.DeliveryDecideParams) (bool, heraldtype.Lane, error) {
	// A decision on a lazy chain's later step (a cancel) finds its row
	// written first, as intake writes an eager chain's (fallback.go).
	if err := materializeStep(tx, now, p.NotificationID, p.MessageID); err != nil {
		return false, "", err
	}
	r, err := tx.Exec(qDeliveryDecide, p.MessageID, p.NotificationID, p.Tenant, string(p.Channel), string(p.State), p.Reason, now, now)
	if err != nil {
		return false, "", err
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return false, "", nil
	}
	wake, err := fallbackEnded(tx, now, p.MessageID, p.State, p.Reason)
	return true, wake, err
}

// DeliverySweepStale turns SENDING rows older than olderThan into UNKNOWN
// and returns them.
func (s *Store) DeliverySweepStale(ctx context.Context, olderThan time.Duration) ([]store.StaleClaim, error) {
	var stale []store.StaleClaim
	err := s.w.do(ctx, func(tx wtx) error {
		stale = stale[:0]
		now := s.now()
		rows, err := tx.Query(qDeliverySweepStale, now, now-olderThan.Milliseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		type claim struct {
			attempt int
			at      int64
		}
		var claims []claim
		for rows.Next() {
			var c store.StaleClaim
			var lane, ch string
			var cl claim
			if err := rows.Scan(&c.MessageID, &c.Tenant, &lane, &ch, &cl.attempt, &cl.at); err != nil {
				return err
			}
			c.Lane, c.Channel = heraldtype.Lane(lane), heraldtype.Channel(ch)
			stale, claims = append(stale, c), append(claims, cl)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for i, c := range stale {
			if _, err := tx.Exec(qAttemptInsert, c.MessageID, claims[i].attempt, store.StaleSweepOwner, claims[i].at, now,
				"unknown", heraldtype.ReasonStaleClaim, now-claims[i].at); err != nil {
				return fmt.Errorf("log the attempt of %s: %w", c.MessageID, err)
			}
		}
		return fallbackStale(tx, now, stale)
	})
	if err != nil {
		return nil, fmt.Errorf("sweep stale claims: %w", err)
	}
	return stale, nil
}

// ProfileGet reads a recipient's profile.
func (s *Store) ProfileGet(ctx context.Context, tenant, recipient string) (store.Profile, error) {
	var data string
	var updated int64
	err := s.queryRow(ctx, qProfileGet, tenant, recipient).Scan(&data, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Profile{}, store.ErrNotFound
	}
	if err != nil {
		return store.Profile{}, fmt.Errorf("read profile: %w", err)
	}
	return store.DecodeProfile(tenant, recipient, []byte(data), fromMs(updated))
}

// ProfilePut creates or replaces a recipient's profile, recording its
// consent changes as made by its own tenant (ProfilePutBy, consent.go).
func (s *Store) ProfilePut(ctx context.Context, p store.Profile) error {
	return s.ProfilePutBy(ctx, p, store.ConsentActor{Tenant: p.Tenant})
}
