package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Parked deliveries: the operator's list, requeue, restore and discard.
const (
	qParkedList = `SELECT d.message_id, d.notification_id, d.tenant, coalesce(n.kind, ''), coalesce(o.lane, ''), d.channel, d.reason, d.updated_at
FROM deliveries d LEFT JOIN outbox o ON o.message_id = d.message_id
LEFT JOIN notifications n ON n.id = d.notification_id
WHERE d.state = 'PARKED' AND (?1 = '' OR d.tenant = ?1)
ORDER BY d.updated_at, d.message_id
LIMIT ?2`
	// The rows to requeue: PARKED, of the tenant, the message (or all),
	// with ?3 only those whose outbox row is DONE, and with ?5 (ms) only
	// those parked before it; deliveries_parked (0018) in order.
	qParkedSelect = `SELECT d.message_id, d.notification_id, d.tenant, coalesce(n.kind, ''), coalesce(o.lane, ''), d.channel, d.reason
FROM deliveries d LEFT JOIN outbox o ON o.message_id = d.message_id
LEFT JOIN notifications n ON n.id = d.notification_id
WHERE d.state = 'PARKED' AND (?1 = '' OR d.tenant = ?1) AND (?2 = '' OR d.message_id = ?2)
  AND (?3 = 0 OR o.state = 'DONE') AND (?5 = 0 OR d.updated_at < ?5)
ORDER BY d.updated_at, d.message_id
LIMIT ?4`
	qParkedDelivery = `UPDATE deliveries
SET state = 'RETRY_WAIT', reason = 'REQUEUED', next_attempt_at = ?1, claimed_by = NULL, updated_at = ?1
WHERE message_id = ?2 AND state = 'PARKED'`
	// qParkedOutbox makes a DONE row due now, in the claim's index even
	// if it was ended while deferred (deferred = 0).
	qParkedOutbox = `UPDATE outbox
SET state = 'PENDING', available_at = ?1, deferred = 0, last_reason = 'REQUEUED', claimed_by = NULL, claimed_until = NULL,
    token = token + 1, updated_at = ?1
WHERE message_id = ?2 AND state = 'DONE'`

	// ?1 now, ?2 message id, ?3 reason.
	qParkedRestore = `UPDATE deliveries
SET state = 'PARKED', reason = ?3, next_attempt_at = NULL, updated_at = ?1
WHERE message_id = ?2 AND state = 'RETRY_WAIT' AND reason = 'REQUEUED'`

	// A db-transport discard: the PARKED delivery of the tenant ('' any),
	// then the guarded write (only while still PARKED), the outbox row if
	// no one holds it, and the audit row.
	qParkedDiscardSelect = `SELECT tenant, reason FROM deliveries
WHERE message_id = ?1 AND state = 'PARKED' AND (?2 = '' OR tenant = ?2)`
	// ?1 now, ?2 message id.
	qParkedDiscardDelivery = `UPDATE deliveries
SET state = 'SUPPRESSED', reason = 'DISCARDED', next_attempt_at = NULL, claimed_by = NULL, updated_at = ?1
WHERE message_id = ?2 AND state = 'PARKED'`
	qParkedDiscardOutbox = `UPDATE outbox
SET state = 'DONE', last_reason = 'DISCARDED', updated_at = ?1
WHERE message_id = ?2 AND state = 'PENDING'`
	// A broker copy's discard: the sender's decision write (no row yet, or
	// a waiting one) with SUPPRESSED(DISCARDED). ?1 now, ?2 message id,
	// ?3 notification id, ?4 tenant, ?5 channel.
	qParkedDiscardDecide = `INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at)
VALUES (?2, ?3, ?4, ?5, 'SUPPRESSED', 'DISCARDED', ?1, ?1)
ON CONFLICT (message_id) DO UPDATE SET state = excluded.state, reason = excluded.reason, next_attempt_at = NULL, updated_at = excluded.updated_at
WHERE deliveries.state IN ('RETRY_WAIT', 'PARKED')`
	// ?1 now, ?2 actor, ?3 message id, ?4 tenant, ?5 parked reason, ?6 reason.
	qParkedDiscardAudit = `INSERT INTO parked_discards (discarded_at, actor, message_id, tenant, parked_reason, reason)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)`

	qParkedDiscardList = `SELECT id, discarded_at, actor, message_id, tenant, parked_reason, reason FROM parked_discards
WHERE (?1 = '' OR tenant = ?1) AND (?2 = '' OR message_id = ?2)
ORDER BY id
LIMIT ?3`
)

// ParkedList returns PARKED deliveries, oldest first.
func (s *Store) ParkedList(ctx context.Context, p store.ParkedListParams) ([]store.ParkedEntry, error) {
	rows, err := s.query(ctx, qParkedList, p.Tenant, p.LimitOrDefault())
	if err != nil {
		return nil, fmt.Errorf("list parked deliveries: %w", err)
	}
	defer rows.Close()
	var out []store.ParkedEntry
	for rows.Next() {
		var at int64
		e, err := scanParked(rows, &at)
		if err != nil {
			return nil, fmt.Errorf("list parked deliveries: %w", err)
		}
		e.ParkedAt = fromMs(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list parked deliveries: %w", err)
	}
	return out, nil
}

// scanParked scans the columns qParkedList and qParkedSelect share, then
// extra.
func scanParked(rows *sql.Rows, extra ...any) (store.ParkedEntry, error) {
	var e store.ParkedEntry
	var lane, ch string
	dest := append([]any{&e.MessageID, &e.NotificationID, &e.Tenant, &e.Kind, &lane, &ch, &e.Reason}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return e, err
	}
	e.Lane, e.Channel = heraldtype.Lane(lane), heraldtype.Channel(ch)
	return e, nil
}

// ParkedRequeue makes PARKED deliveries claimable again (and, for the db
// transport, their outbox rows due again) in one write transaction.
func (s *Store) ParkedRequeue(ctx context.Context, p store.ParkedRequeueParams) ([]store.ParkedEntry, error) {
	var out []store.ParkedEntry
	outbox := 0
	if p.Outbox {
		outbox = 1
	}
	err := s.w.do(ctx, func(tx wtx) error {
		out = out[:0]
		now := s.now()
		var before int64
		if !p.ParkedBefore.IsZero() {
			before = p.ParkedBefore.UnixMilli()
		}
		rows, err := tx.Query(qParkedSelect, p.Tenant, p.MessageID, outbox, p.LimitOrDefault(), before)
		if err != nil {
			return err
		}
		var picked []store.ParkedEntry
		for rows.Next() {
			e, err := scanParked(rows)
			if err != nil {
				rows.Close()
				return err
			}
			e.ParkedAt = fromMs(now)
			picked = append(picked, e)
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return err
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, e := range picked {
			r, err := tx.Exec(qParkedDelivery, now, e.MessageID)
			if err != nil {
				return err
			}
			if n, _ := r.RowsAffected(); n == 0 {
				continue
			}
			if p.Outbox {
				if _, err := tx.Exec(qParkedOutbox, now, e.MessageID); err != nil {
					return err
				}
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("requeue parked deliveries: %w", err)
	}
	if p.Outbox {
		for _, e := range out {
			s.wakeups.Notify(e.Lane)
		}
	}
	return out, nil
}

// ParkedRestore parks a requeued delivery again if it is still waiting for
// the requeue's copy.
func (s *Store) ParkedRestore(ctx context.Context, p store.ParkedRestoreParams) (bool, error) {
	var ok bool
	err := s.w.do(ctx, func(tx wtx) error {
		r, err := tx.Exec(qParkedRestore, s.now(), p.MessageID, p.Reason)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		ok = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("restore parked delivery %s: %w", p.MessageID, err)
	}
	return ok, nil
}

// ParkedDiscard discards a parked message and writes its audit row, in one
// write transaction.
func (s *Store) ParkedDiscard(ctx context.Context, p store.ParkedDiscardParams) (store.ParkedDiscarded, error) {
	var ok bool
	var tenant string
	err := s.w.do(ctx, func(tx wtx) error {
		ok = false
		now := s.now()
		parkedReason := p.ParkedReason
		tenant = p.Tenant
		if p.Broker {
			if p.NotificationID != "" {
				r, err := tx.Exec(qParkedDiscardDecide, now, p.MessageID, p.NotificationID, p.Tenant, string(p.Channel))
				if err != nil {
					return err
				}
				n, err := r.RowsAffected()
				if err != nil {
					return err
				}
				ok = n == 1
			}
		} else {
			err := tx.QueryRow(qParkedDiscardSelect, p.MessageID, p.Tenant).Scan(&tenant, &parkedReason)
			if errors.Is(err, sql.ErrNoRows) {
				return nil // not parked: nothing to discard
			}
			if err != nil {
				return err
			}
			if _, err := tx.Exec(qParkedDiscardDelivery, now, p.MessageID); err != nil {
				return err
			}
			if _, err := tx.Exec(qParkedDiscardOutbox, now, p.MessageID); err != nil {
				return err
			}
			ok = true
		}
		if ok { // a fallback chain's later steps are skipped (fallback.go)
			if _, err := fallbackEnded(tx, now, p.MessageID, heraldtype.DeliverySuppressed, heraldtype.ReasonDiscarded); err != nil {
				return err
			}
		}
		_, err := tx.Exec(qParkedDiscardAudit, now, p.Actor, p.MessageID, tenant, parkedReason, p.Reason)
		return err
	})
	if err != nil {
		return store.ParkedDiscarded{}, fmt.Errorf("discard parked message %s: %w", p.MessageID, err)
	}
	return store.ParkedDiscarded{Discarded: ok, Tenant: tenant}, nil
}

// ParkedDiscardList returns discard audit rows, oldest first.
func (s *Store) ParkedDiscardList(ctx context.Context, p store.ParkedDiscardListParams) ([]store.ParkedDiscardEntry, error) {
	rows, err := s.query(ctx, qParkedDiscardList, p.Tenant, p.MessageID, p.LimitOrDefault())
	if err != nil {
		return nil, fmt.Errorf("list parked discards: %w", err)
	}
	defer rows.Close()
	var out []store.ParkedDiscardEntry
	for rows.Next() {
		var e store.ParkedDiscardEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.MessageID, &e.Tenant, &e.ParkedReason, &e.Reason); err != nil {
			return nil, fmt.Errorf("list parked discards: %w", err)
		}
		e.DiscardedAt = fromMs(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list parked discards: %w", err)
	}
	return out, nil
}
