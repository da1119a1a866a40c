package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The watchdog's queries (store.Watchdog). Each find reads one page of its
// kind: the inner SELECT walks the kind's partial index from the position
// after which the page starts (?2, ?3) up to the cutoff (?1, now minus the
// grace) and stops after ?4 rows; the outer one says which of them have no
// owner, marks the last row examined (where the next page starts) and
// counts the rows examined, and keeps only the rows without an owner and
// the last one. Every find returns the same columns.
const (
	qUnownedFindOuter = `SELECT message_id, at, tenant, lane, notification_id, channel, outbox_state, token, owned, last, examined FROM (
    SELECT p.message_id, p.at, p.tenant, p.lane, p.notification_id, p.channel, p.outbox_state, p.token, p.owned,
           row_number() OVER (ORDER BY p.at DESC, p.message_id DESC) = 1 AS last,
           count(*) OVER () AS examined
    FROM (`
	qUnownedFindEnd = `) p
) WHERE NOT owned OR last
ORDER BY at, message_id`

	// A RETRY_WAIT delivery is owned while its outbox row will offer it
	// again (PENDING, CLAIMED, PUBLISHING) and for the grace after that
	// row's last write (a re-driven row's new copy).
	qUnownedFindRetryWait = qUnownedFindOuter + `
        SELECT d.message_id, d.at, d.tenant, coalesce(o.lane, '') AS lane, d.notification_id, d.channel,
               coalesce(o.state, '') AS outbox_state, coalesce(o.token, 0) AS token,
               (o.state IS NULL OR o.state IN ('PENDING', 'CLAIMED', 'PUBLISHING') OR o.updated_at >= ?1) AS owned
        FROM (SELECT message_id, next_attempt_at AS at, tenant, notification_id, channel FROM deliveries
              WHERE state = 'RETRY_WAIT' AND next_attempt_at < ?1
                AND next_attempt_at >= ?2 AND (next_attempt_at, message_id) > (?2, ?3)
              ORDER BY next_attempt_at, message_id LIMIT ?4) d
        LEFT JOIN outbox o ON o.message_id = d.message_id` + qUnownedFindEnd
	qUnownedFindPublished = qUnownedFindOuter + `
        SELECT o.message_id, o.at, o.tenant, o.lane, o.notification_id, o.channel, o.state AS outbox_state, o.token,
               EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.message_id) AS owned
        FROM (SELECT message_id, updated_at AS at, tenant, lane, notification_id, channel, state, token FROM outbox
              WHERE state = 'PUBLISHED' AND updated_at < ?1
                AND updated_at >= ?2 AND (updated_at, message_id) > (?2, ?3)
              ORDER BY updated_at, message_id LIMIT ?4) o` + qUnownedFindEnd
	qUnownedFindSending = qUnownedFindOuter + `
        SELECT d.message_id, d.at, d.tenant, coalesce(o.lane, '') AS lane, d.notification_id, d.channel,
               '' AS outbox_state, 0 AS token, 0 AS owned
        FROM (SELECT message_id, claimed_at AS at, tenant, notification_id, channel FROM deliveries
              WHERE state = 'SENDING' AND claimed_at < ?1
                AND claimed_at >= ?2 AND (claimed_at, message_id) > (?2, ?3)
              ORDER BY claimed_at, message_id LIMIT ?4) d
        LEFT JOIN outbox o ON o.message_id = d.message_id` + qUnownedFindEnd
	qUnownedFindLease = qUnownedFindOuter + `
        SELECT message_id, at, tenant, lane, notification_id, channel, state AS outbox_state, token, 0 AS owned
        FROM (SELECT message_id, claimed_until AS at, tenant, lane, notification_id, channel, state, token FROM outbox
              WHERE state IN ('CLAIMED', 'PUBLISHING') AND claimed_until < ?1
                AND claimed_until >= ?2 AND (claimed_until, message_id) > (?2, ?3)
              ORDER BY claimed_until, message_id LIMIT ?4)` + qUnownedFindEnd

	// qUnownedRedriveOutbox puts an outbox row back to PENDING, due now,
	// with a fresh token, if it is still as found (state and token) and
	// still without an owner; in the claim's index (deferred = 0) even if
	// the row was ended while deferred.
	//
	// ?1 now, ?2 message id, ?3 token, ?4 state, ?5 kind, ?6 the delivery's
	// next attempt time as found (retry_wait).
	qUnownedRedriveOutbox = `UPDATE outbox
SET state = 'PENDING', available_at = ?1, deferred = 0, last_reason = 'REDRIVEN', claimed_by = NULL, claimed_until = NULL,
    token = token + 1, updated_at = ?1
WHERE message_id = ?2 AND token = ?3 AND state = ?4
  AND CASE ?5
      WHEN 'retry_wait' THEN state NOT IN ('PENDING', 'CLAIMED', 'PUBLISHING')
          AND EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = ?2 AND d.state = 'RETRY_WAIT' AND d.next_attempt_at = ?6)
      WHEN 'published' THEN state = 'PUBLISHED' AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = ?2)
      WHEN 'lease' THEN state IN ('CLAIMED', 'PUBLISHING') AND claimed_until < ?1
      ELSE 0 END`
	// qUnownedRedriveSending is the stale sweep's write for one claim
	// (UnownedRedrive then moves its fallback chain on, as the sweep does).
	//
	// ?1 now, ?2 message id, ?3 claimed at as found.
	qUnownedRedriveSending = `UPDATE deliveries SET state = 'UNKNOWN', reason = 'STALE_CLAIM', claimed_by = NULL, updated_at = ?1
WHERE message_id = ?2 AND state = 'SENDING' AND claimed_at = ?3`

	qUnownedCheckpoint     = `SELECT at, message_id FROM watchdog_checkpoints WHERE kind = ?1`
	qUnownedCheckpointSave = `INSERT INTO watchdog_checkpoints (kind, at, message_id, updated_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (kind) DO UPDATE SET at = excluded.at, message_id = excluded.message_id, updated_at = excluded.updated_at`
)

// unownedFind maps each kind to its find.
var unownedFind = map[store.UnownedKind]string{
	store.UnownedRetryWait: qUnownedFindRetryWait,
	store.UnownedPublished: qUnownedFindPublished,
	store.UnownedSending:   qUnownedFindSending,
	store.UnownedLease:     qUnownedFindLease,
	store.UnownedWaiting:   qUnownedFindWaiting, // fallback.go
}

// UnownedFind reads one page of p.Kind.
func (s *Store) UnownedFind(ctx context.Context, p store.UnownedFindParams) (store.UnownedPage, error) {
	q, ok := unownedFind[p.Kind]
	if !ok {
		return store.UnownedPage{}, fmt.Errorf("find unowned rows: unknown kind %q", p.Kind)
	}
	cutoff := s.now() - p.Grace.Milliseconds()
	rows, err := s.query(ctx, q, cutoff, ms(p.After.At), p.After.MessageID, p.LimitOrDefault())
	if err != nil {
		return store.UnownedPage{}, fmt.Errorf("find unowned %s rows: %w", p.Kind, err)
	}
	defer rows.Close()
	page := store.UnownedPage{Next: p.After}
	for rows.Next() {
		var (
			u               store.Unowned
			at              int64
			lane, ch, state string
			owned, last     bool
			examined        int
		)
		if err := rows.Scan(&u.MessageID, &at, &u.Tenant, &lane, &u.NotificationID, &ch, &state, &u.Token,
			&owned, &last, &examined); err != nil {
			return store.UnownedPage{}, fmt.Errorf("find unowned %s rows: %w", p.Kind, err)
		}
		u.Kind, u.At = p.Kind, fromMs(at)
		u.Lane, u.Channel, u.OutboxState = heraldtype.Lane(lane), heraldtype.Channel(ch), heraldtype.OutboxState(state)
		page.Add(u, owned, last, examined)
	}
	if err := rows.Err(); err != nil {
		return store.UnownedPage{}, fmt.Errorf("find unowned %s rows: %w", p.Kind, err)
	}
	page.Done = page.Examined < p.LimitOrDefault()
	return page, nil
}

// UnownedRedrive moves each row on, conditional on it being as found, in
// one write transaction.
func (s *Store) UnownedRedrive(ctx context.Context, rows []store.Unowned) ([]store.Unowned, error) {
	var out []store.Unowned
	err := s.w.do(ctx, func(tx wtx) error {
		out = out[:0]
		now := s.now()
		for _, u := range rows {
			var (
				r   sql.Result
				err error
			)
			if u.Kind == store.UnownedWaiting {
				moved, err := fallbackRepair(tx, now, u)
				if err != nil {
					return err
				}
				if moved {
					out = append(out, u)
				}
				continue
			}
			if u.Kind == store.UnownedSending {
				r, err = tx.Exec(qUnownedRedriveSending, now, u.MessageID, ms(u.At))
			} else {
				r, err = tx.Exec(qUnownedRedriveOutbox, now, u.MessageID, u.Token, string(u.OutboxState), string(u.Kind), ms(u.At))
			}
			if err != nil {
				return err
			}
			if n, err := r.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				if u.Kind == store.UnownedSending { // as the stale sweep: skips the rest of a chain
					if _, err := fallbackEnded(tx, now, u.MessageID, heraldtype.DeliveryUnknown, heraldtype.ReasonStaleClaim); err != nil {
						return err
					}
				}
				out = append(out, u)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("re-drive unowned rows: %w", err)
	}
	for _, u := range out {
		if u.Kind != store.UnownedSending {
			s.wakeups.Notify(u.Lane)
		}
	}
	return out, nil
}

// UnownedCheckpoint reads kind's saved position.
func (s *Store) UnownedCheckpoint(ctx context.Context, kind store.UnownedKind) (store.UnownedPosition, error) {
	var (
		at  int64
		pos store.UnownedPosition
	)
	err := s.queryRow(ctx, qUnownedCheckpoint, string(kind)).Scan(&at, &pos.MessageID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.UnownedPosition{}, nil
	case err != nil:
		return store.UnownedPosition{}, fmt.Errorf("read the watchdog's %s checkpoint: %w", kind, err)
	}
	pos.At = fromMs(at)
	return pos, nil
}

// UnownedCheckpointSave saves kind's position.
func (s *Store) UnownedCheckpointSave(ctx context.Context, kind store.UnownedKind, pos store.UnownedPosition) error {
	err := s.w.do(ctx, func(tx wtx) error {
		_, err := tx.Exec(qUnownedCheckpointSave, string(kind), ms(pos.At), pos.MessageID, s.now())
		return err
	})
	if err != nil {
		return fmt.Errorf("save the watchdog's %s checkpoint: %w", kind, err)
	}
	return nil
}
