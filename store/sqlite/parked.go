package sqlite

import (
	"context"

	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Parked deliveries: the operator's list and requeue.
const (
	qParkedList = `SELECT d.message_id, d.notification_id, d.tenant, coalesce(o.lane, ''), d.channel, d.reason, d.updated_at
FROM deliveries d LEFT JOIN outbox o ON o.message_id = d.message_id
WHERE d.state = 'PARKED' AND (?1 = '' OR d.tenant = ?1)
ORDER BY d.updated_at, d.message_id
LIMIT ?2`
	// The rows to requeue: PARKED, of the tenant, the message (or all), and
	// with ?3 only those whose outbox row is DONE.
	qParkedSelect = `SELECT d.message_id, d.notification_id, d.tenant, coalesce(o.lane, ''), d.channel, d.reason
FROM deliveries d LEFT JOIN outbox o ON o.message_id = d.message_id
WHERE d.state = 'PARKED' AND (?1 = '' OR d.tenant = ?1) AND (?2 = '' OR d.message_id = ?2)
  AND (?3 = 0 OR o.state = 'DONE')
ORDER BY d.updated_at, d.message_id
LIMIT ?4`
	qParkedDelivery = `UPDATE deliveries
SET state = 'RETRY_WAIT', reason = 'REQUEUED', next_attempt_at = ?1, claimed_by = NULL, updated_at = ?1
WHERE message_id = ?2 AND state = 'PARKED'`
	qParkedOutbox = `UPDATE outbox
SET state = 'PENDING', available_at = ?1, last_reason = 'REQUEUED', claimed_by = NULL, claimed_until = NULL,
    token = token + 1, updated_at = ?1
WHERE message_id = ?2 AND state = 'DONE'`
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
		var e store.ParkedEntry
		var lane, ch string
		var at int64
		if err := rows.Scan(&e.MessageID, &e.NotificationID, &e.Tenant, &lane, &ch, &e.Reason, &at); err != nil {
			return nil, fmt.Errorf("list parked deliveries: %w", err)
		}
		e.Lane, e.Channel, e.ParkedAt = heraldtype.Lane(lane), heraldtype.Channel(ch), fromMs(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list parked deliveries: %w", err)
	}
	return out, nil
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
		rows, err := tx.Query(qParkedSelect, p.Tenant, p.MessageID, outbox, p.LimitOrDefault())
		if err != nil {
			return err
		}
		var picked []store.ParkedEntry
		for rows.Next() {
			var e store.ParkedEntry
			var lane, ch string
			if err := rows.Scan(&e.MessageID, &e.NotificationID, &e.Tenant, &lane, &ch, &e.Reason); err != nil {
				rows.Close()
				return err
			}
			e.Lane, e.Channel, e.ParkedAt = heraldtype.Lane(lane), heraldtype.Channel(ch), fromMs(now)
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
