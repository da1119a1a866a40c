package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// DeliveryGet reads the delivery of messageID; an inbox send's is read
// from its notification's inbox_at (store.InboxDelivery).
func (s *Store) DeliveryGet(ctx context.Context, messageID string) (store.Delivery, error) {
	d, err := scanDelivery(s.pipe.QueryRow(ctx, qDeliveryGet, messageID))
	if errors.Is(err, pgx.ErrNoRows) {
		if id, ok := store.InboxNotificationID(messageID); ok {
			var tenant string
			var created time.Time
			err := s.pool.QueryRow(ctx, qInboxSendGet, id).Scan(&tenant, &created)
			if err == nil {
				return store.InboxDelivery(id, tenant, utc(created)), nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return store.Delivery{}, s.fail("read inbox send", err)
			}
		}
		return d, store.ErrNotFound
	}
	if err != nil {
		return d, s.fail("read delivery", err)
	}
	return d, nil
}

func scanDelivery(row pgx.Row) (store.Delivery, error) {
	var d store.Delivery
	var ch, state string
	var claimed, next *time.Time
	err := row.Scan(&d.MessageID, &d.NotificationID, &d.Tenant, &ch, &d.Provider, &state, &d.Reason, &d.Attempts,
		&claimed, &next, &d.CreatedAt, &d.UpdatedAt)
	if err != nil {
		return store.Delivery{}, err
	}
	d.Channel, d.State = heraldtype.Channel(ch), heraldtype.DeliveryState(state)
	d.ClaimedAt, d.NextAttemptAt = utcPtr(claimed), utcPtr(next)
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	return d, nil
}

// DeliveryClaim inserts SENDING for a new message (qDeliveryClaim) or, if
// a row exists, takes it if it is a due RETRY_WAIT (qDeliveryClaimRetry).
// Only a caller that gets Claimed may call the provider. A cancelled
// notification's send is ended instead (deliveryClaimCancelled).
func (s *Store) DeliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	var take store.EventKeyTakeResult
	if p.Event != nil {
		// Nearly always the key is new or the caller's own: one statement
		// takes it and claims (qDeliveryClaimTake), one pipeline round trip
		// where two followed each other.
		if res, ok, err := s.deliveryClaimTake(ctx, p); err != nil || ok {
			return res, err
		}
		// Another notification's key: the take decides (eventKeyContest),
		// then the claim runs on its own. A take whose claim then fails
		// holds the key for its lease, as one made by a check before the
		// claim did.
		var err error
		if take, err = s.EventKeyTake(ctx, *p.Event); err != nil {
			return store.DeliveryClaimResult{}, fmt.Errorf("claim delivery %s: %w: %w", p.MessageID, store.ErrEventKeys, err)
		}
		if take.Outcome == store.EventKeyHeld {
			return store.DeliveryClaimResult{Event: take}, nil
		}
	}
	res, err := s.deliveryClaim(ctx, p)
	res.Event = take
	return res, err
}

// deliveryClaimTake takes p.Event's key and claims in one statement; ok
// is false, with nothing written, when another notification holds the key.
func (s *Store) deliveryClaimTake(ctx context.Context, p store.DeliveryClaimParams) (res store.DeliveryClaimResult, ok bool, err error) {
	k := p.Event.Key
	var taken *bool
	var until *time.Time
	var attempt *int
	var cancelled bool
	now := s.now()
	// Merged with the batch's other claims under event keys (claimmerge.go).
	err = s.pipe.QueryRowMerged(ctx, claimTakeMerge, &claimArgs{now: now, p: p},
		qDeliveryClaimTake, now, k.Tenant, k.Recipient, k.EventID, k.Kind, string(k.Channel), p.Event.Owner, p.Event.Lease,
		p.MessageID, p.NotificationID, p.Tenant, string(p.Channel), p.Provider, p.Owner).Scan(&taken, &until, &attempt, &cancelled)
	switch {
	case err != nil:
		return res, false, fmt.Errorf("claim delivery %s: %w: %w", p.MessageID, store.ErrEventKeys, s.fail("take event key", err))
	case cancelled: // no key taken, nothing claimed
		res, err = s.deliveryClaimExisting(ctx, p)
		return res, true, err
	case taken == nil:
		return res, false, nil
	}
	res.Event = store.EventKeyTakeResult{Outcome: store.EventKeyOwned, Owner: p.Event.Owner, LeaseUntil: utc(*until)}
	if *taken {
		res.Event.Outcome = store.EventKeyTaken
	}
	if attempt != nil {
		res.Claimed, res.Attempt = true, *attempt
		return res, true, nil
	}
	claim, err := s.deliveryClaimExisting(ctx, p)
	claim.Event = res.Event
	return claim, true, err
}

func (s *Store) deliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	var attempt int
	now := s.now()
	// Merged with the batch's other delivery claims (claimmerge.go).
	err := s.pipe.QueryRowMerged(ctx, claimMerge, &claimArgs{now: now, p: p},
		qDeliveryClaim, now, p.MessageID, p.NotificationID, p.Tenant, string(p.Channel), p.Provider, p.Owner).Scan(&attempt)
	switch {
	case err == nil:
		return store.DeliveryClaimResult{Claimed: true, Attempt: attempt}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return store.DeliveryClaimResult{}, s.fail(fmt.Sprintf("claim delivery %s", p.MessageID), err)
	}
	return s.deliveryClaimExisting(ctx, p)
}

// deliveryClaimExisting claims the message whose row exists if it is a
// due RETRY_WAIT (qDeliveryClaimRetry), or returns the row that blocks.
func (s *Store) deliveryClaimExisting(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	var (
		won   *int
		stale *bool
		ended bool
		msgID *string
		cur   struct {
			notif, tenant, ch, prov, state, reason *string
			attempts                               *int
			claimed, next, created, updated        *time.Time
		}
	)
	err := s.pipe.QueryRow(ctx, qDeliveryClaimRetry, s.now(), p.MessageID, p.Provider, p.Owner).
		Scan(&won, &stale, &ended, &msgID, &cur.notif, &cur.tenant, &cur.ch, &cur.prov, &cur.state, &cur.reason, &cur.attempts,
			&cur.claimed, &cur.next, &cur.created, &cur.updated)
	if err != nil {
		return store.DeliveryClaimResult{}, s.fail(fmt.Sprintf("claim delivery %s", p.MessageID), err)
	}
	if won != nil {
		return store.DeliveryClaimResult{Claimed: true, Attempt: *won}, nil
	}
	if msgID != nil && !deref(stale) {
		return store.DeliveryClaimResult{Current: &store.Delivery{
			MessageID: *msgID, NotificationID: deref(cur.notif), Tenant: deref(cur.tenant), Channel: heraldtype.Channel(deref(cur.ch)),
			Provider: deref(cur.prov), State: heraldtype.DeliveryState(deref(cur.state)), Reason: deref(cur.reason),
			Attempts: deref(cur.attempts), ClaimedAt: utcPtr(cur.claimed), NextAttemptAt: utcPtr(cur.next),
			CreatedAt: utc(deref(cur.created)), UpdatedAt: utc(deref(cur.updated)),
		}, Cancelled: ended}, nil
	}
	// The blocking row is not in the statement's snapshot (a concurrent
	// claim inserted it), or the snapshot shows a due retry that a concurrent
	// claim took first: read it as it is now. No row at all: the insert
	// found the notification cancelled.
	d, err := scanDelivery(s.pool.QueryRow(ctx, qDeliveryGet, p.MessageID))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.deliveryClaimCancelled(ctx, p)
	}
	if err != nil {
		return store.DeliveryClaimResult{}, s.fail(fmt.Sprintf("claim delivery %s: read blocking row", p.MessageID), err)
	}
	return store.DeliveryClaimResult{Current: &d}, nil
}

// deliveryClaimCancelled ends SUPPRESSED(CANCELLED) the send of a
// cancelled notification that has no delivery row, which its claim
// inserted none for (qDeliveryClaim): the cancel's own decision write,
// which moves its fallback chain on. A write that loses to another (the
// cancel's, another copy's) returns the row it wrote. If the read after a
// write that took fails, the claim fails; its retry finds the row ended
// by someone else, so that end is not counted (herald_deliveries_total),
// as with any write whose answer is lost.
func (s *Store) deliveryClaimCancelled(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	var marked bool
	err := s.pool.QueryRow(ctx, qNotificationCancelled, p.NotificationID).Scan(&marked)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return store.DeliveryClaimResult{}, s.fail(fmt.Sprintf("claim delivery %s: read the cancel mark", p.MessageID), err)
	}
	if !marked {
		return store.DeliveryClaimResult{}, fmt.Errorf("claim delivery %s: inserted no row and found none", p.MessageID)
	}
	ended, err := s.DeliveryDecide(ctx, store.DeliveryDecideParams{MessageID: p.MessageID, NotificationID: p.NotificationID,
		Tenant: p.Tenant, Channel: p.Channel, State: heraldtype.DeliverySuppressed, Reason: heraldtype.ReasonCancelled})
	if err != nil {
		return store.DeliveryClaimResult{}, fmt.Errorf("claim delivery %s: end the cancelled send: %w", p.MessageID, err)
	}
	d, err := scanDelivery(s.pool.QueryRow(ctx, qDeliveryGet, p.MessageID))
	if err != nil {
		return store.DeliveryClaimResult{}, s.fail(fmt.Sprintf("claim delivery %s: read the cancelled send", p.MessageID), err)
	}
	return store.DeliveryClaimResult{Current: &d, Cancelled: ended}, nil
}

// DeliveryRecord writes the outcome of a claimed attempt, conditional on the
// row still being SENDING at that attempt, with its attempt log row, and
// settles p.Outbox when set, all in one statement.
func (s *Store) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	var delay any
	if p.State == heraldtype.DeliveryRetryWait {
		delay = p.RetryDelay
	}
	args := []any{s.now(), string(p.State), p.Reason, delay, p.MessageID, p.Attempt,
		p.Owner, p.StartedAt, p.StartedAt.Add(p.Duration), p.Class, p.Duration.Milliseconds(), p.ProviderRef}
	q := qDeliveryRecord
	// A send that leaves a lazy chain unwritten runs no chain statement, if
	// the chain still is unwritten when the row settles (fallback.go).
	lazy := p.Outbox != nil && p.Outbox.LazyChain && p.State.Terminal() && !fallback.Definite(p.State, p.Reason)
	// Nor does one on no chain, whose result is merged with the batch's
	// others of its kind (recordmerge.go).
	var m *merge
	switch {
	case lazy:
		q = qDeliveryRecordLazy
	case p.Outbox != nil && p.OnNoChain():
		q, m = qDeliveryRecordOffChain, recordMerge
	case p.Outbox != nil:
		q = qDeliveryRecordSettle
	case p.OnNoChain():
		q, m = qDeliveryRecordNoChain, recordNoChainMerge
	}
	if p.Outbox != nil {
		args = append(args, p.Outbox.NotificationID, string(p.Outbox.Channel), p.Outbox.Token)
	}
	var recorded, settled int64
	var wake *string // a fallback step it released (fallback.go)
	if err := laterRow(s.pipe.QueryRowMerged(ctx, m, &recordArgs{now: args[0], p: p}, q, args...), p.Lane).Scan(&recorded, &settled, &wake); err != nil {
		return store.RecordResult{}, s.fail(fmt.Sprintf("record delivery %s", p.MessageID), err)
	}
	if lazy && recorded == 1 && settled == 0 {
		// Written since the claim (a cancel, an erasure), or the lease
		// lost: the chain moves as any send's end moves it.
		err := s.pool.QueryRow(ctx, qFallbackEnd, s.now(), p.MessageID, p.Reason, p.Outbox.NotificationID, string(p.Outbox.Channel),
			p.Outbox.Token).Scan(&settled, &wake)
		if err != nil {
			return store.RecordResult{Recorded: true}, s.fail(fmt.Sprintf("record delivery %s: move its fallback chain", p.MessageID), err)
		}
	}
	s.wakeFallback(wake)
	return store.RecordResult{Recorded: recorded == 1, OutboxSettled: settled == 1}, nil
}

// DeliveryDecide records SUPPRESSED or PARKED for a message that has no row
// yet or is waiting (RETRY_WAIT, PARKED).
func (s *Store) DeliveryDecide(ctx context.Context, p store.DeliveryDecideParams) (bool, error) {
	var written int64
	var wake *string // a fallback step it released (fallback.go)
	for try := 0; ; try++ {
		var unwritten bool
		err := laterRow(s.pipe.QueryRow(ctx, qDeliveryDecide, s.now(), p.MessageID, p.NotificationID, p.Tenant, string(p.Channel), string(p.State), p.Reason), p.Lane).
			Scan(&written, &wake, &unwritten)
		if err != nil {
			return false, s.fail(fmt.Sprintf("decide delivery %s", p.MessageID), err)
		}
		if !unwritten || try > 0 {
			break
		}
		// A lazy chain's later step with no row yet: written first, as
		// intake writes an eager chain's (fallback.go).
		if err := s.materializeStep(ctx, p.NotificationID); err != nil {
			return false, s.fail(fmt.Sprintf("decide delivery %s", p.MessageID), err)
		}
	}
	s.wakeFallback(wake)
	return written == 1, nil
}

// DeliverySweepStale turns SENDING rows claimed more than olderThan ago into
// UNKNOWN (STALE_CLAIM) and returns them.
func (s *Store) DeliverySweepStale(ctx context.Context, olderThan time.Duration) ([]store.StaleClaim, error) {
	rows, err := s.pool.Query(ctx, qDeliverySweepStale, s.now(), olderThan)
	if err != nil {
		return nil, s.fail("sweep stale claims", err)
	}
	stale, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.StaleClaim])
	if err != nil {
		return nil, s.fail("sweep stale claims", err)
	}
	return stale, nil
}

// ProfileGet reads a recipient's profile.
func (s *Store) ProfileGet(ctx context.Context, tenant, recipient string) (store.Profile, error) {
	var data []byte
	var updated time.Time
	err := s.pipe.QueryRowMerged(ctx, profileMerge, profileKey{tenant, recipient}, qProfileGet, tenant, recipient).Scan(&data, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Profile{}, store.ErrNotFound
	}
	if err != nil {
		return store.Profile{}, s.fail("read profile", err)
	}
	return store.DecodeProfile(tenant, recipient, data, updated)
}

// ProfilePut creates or replaces a recipient's profile, recording its
// consent changes as made by its own tenant (ProfilePutBy, consent.go).
func (s *Store) ProfilePut(ctx context.Context, p store.Profile) error {
	return s.ProfilePutBy(ctx, p, store.ConsentActor{Tenant: p.Tenant})
}
