package sqlite

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Fallback chains (channel policy first; store/fallback.go, package
// fallback). The writes that end a send call fallbackEnded in their own
// transaction (DeliveryRecord not for a send its claim read is on no
// chain: store.Fence.OffChain, from the claim's own RETURNING), and the dispatcher's FAILED calls fallbackFailed in its; intake writes a chain's rows through chainInsert; the
// watchdog repairs a chain with fallbackRepair. Every statement finds the
// chain's rows by outbox_notification, the ended send's row by its unique
// message_id.
const (
	// qFallbackInsert is qOutboxInsert for a row of a chain: ?10 its
	// step, PENDING for the first, WAITING after.
	qFallbackInsert = `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, expires_at, created_at, updated_at, fallback_step)
VALUES (?1, ?2, ?3, ?4, ?5, CASE WHEN ?10 = 1 THEN 'PENDING' ELSE 'WAITING' END, ?6, ?7, ?8, ?9, ?10)`
	// qFallbackOf reads the chain of the send ?1, if it is on one, and
	// how many sends its step has (for a definite failure).
	qFallbackOf = `SELECT o.notification_id, o.fallback_step, o.lane,
       (SELECT count(*) FROM outbox s WHERE s.notification_id = o.notification_id AND s.fallback_step = o.fallback_step)
FROM outbox o WHERE o.message_id = ?1 AND o.fallback_step IS NOT NULL`
	// qFallbackFail counts a definite failure of step ?3 against the
	// WAITING rows of the step after it and releases them (PENDING, due
	// now) once every send of step ?3 (?5 of them) has failed. ?1 now,
	// ?2 notification id, ?4 the failure's cause.
	qFallbackFail = `UPDATE outbox
SET fallback_fails = fallback_fails + 1,
    state = CASE WHEN fallback_fails + 1 >= ?5 THEN 'PENDING' ELSE state END,
    available_at = CASE WHEN fallback_fails + 1 >= ?5 THEN ?1 ELSE available_at END,
    fallback_after = CASE WHEN fallback_fails + 1 >= ?5 THEN ?4 ELSE fallback_after END,
    updated_at = ?1
WHERE notification_id = ?2 AND fallback_step = ?3 + 1 AND state = 'WAITING'
RETURNING state = 'PENDING'`
	// qFallbackSkipAfter ends every WAITING row after the send ?2's step,
	// if it is on a chain: SKIPPED, not needed, after ?3. One statement,
	// the common end of a chain's send and of every other send whose
	// chain is not known (its step is NULL: nothing matches); the common
	// end of a send off a chain, DeliveryRecord of a claimer's job whose
	// claim read no step (Fence.OffChain), runs none. The send's row is
	// found by its unique message_id; +state keeps the partial index of
	// WAITING rows out of it, so the chain's rows are found by
	// outbox_notification. ?1 now.
	qFallbackSkipAfter = `UPDATE outbox SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = ?3, updated_at = ?1
WHERE notification_id = (SELECT notification_id FROM outbox WHERE message_id = ?2)
  AND fallback_step > (SELECT fallback_step FROM outbox WHERE message_id = ?2) AND +state = 'WAITING'`
	// qFallbackFailedRow reads the message of the outbox row ?1 if it is
	// on a chain and has no delivery row.
	qFallbackFailedRow = `SELECT o.message_id FROM outbox o
WHERE o.id = ?1 AND o.fallback_step IS NOT NULL AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.message_id)`
	// qFallbackSkip is the watchdog's skip of every WAITING row of chain
	// ?2: SKIPPED, not needed, after ?3. ?1 now.
	qFallbackSkip = `UPDATE outbox SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = ?3, updated_at = ?1
WHERE notification_id = ?2 AND state = 'WAITING'`
	// qFallbackExpired ends the WAITING rows of the notifications whose
	// rows (message ids, the JSON array ?2) OutboxExpire expired.
	qFallbackExpired = `UPDATE outbox SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = 'EXPIRED', updated_at = ?1
WHERE state = 'WAITING' AND notification_id IN (
    SELECT notification_id FROM outbox WHERE message_id IN (SELECT value FROM json_each(?2)))`
	// qFallbackErased ends the WAITING rows of the notifications an
	// erasure batch (the JSON array ?2) erased: nothing more goes to an
	// erased recipient.
	qFallbackErased = `UPDATE outbox SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = 'ERASED', updated_at = ?1
WHERE state = 'WAITING' AND notification_id IN (SELECT value FROM json_each(?2))`
	// qFallbackChain reads a chain as fallback.Decide takes it.
	qFallbackChain = `SELECT o.message_id, o.token, o.fallback_step, o.state, coalesce(d.state, ''), coalesce(d.reason, '')
FROM outbox o LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE o.notification_id = ?1 AND o.fallback_step IS NOT NULL`
	// qFallbackRelease is the watchdog's release of step ?3. ?1 now,
	// ?2 notification id, ?4 the cause.
	qFallbackRelease = `UPDATE outbox SET state = 'PENDING', available_at = ?1, last_reason = 'REDRIVEN', fallback_after = ?4,
    token = token + 1, updated_at = ?1
WHERE notification_id = ?2 AND fallback_step = ?3 AND state = 'WAITING'`

	// qUnownedFindWaiting is the watchdog's find of WAITING rows
	// (store.UnownedWaiting), by available_at: one is owned while a send
	// of an earlier step is under way (a delivery not ended, or none yet
	// and the outbox row still to be sent) or ended less than the grace
	// ago.
	qUnownedFindWaiting = qUnownedFindOuter + `
        SELECT w.message_id, w.at, w.tenant, w.lane, w.notification_id, w.channel, 'WAITING' AS outbox_state, w.token,
               EXISTS (SELECT 1 FROM outbox p LEFT JOIN deliveries d ON d.message_id = p.message_id
                       WHERE p.notification_id = w.notification_id AND p.fallback_step < w.fallback_step
                         AND (d.state IN ('SENDING', 'RETRY_WAIT', 'PARKED')
                              OR (d.state IS NULL AND p.state IN ('PENDING', 'CLAIMED', 'PUBLISHING', 'PUBLISHED', 'WAITING'))
                              OR coalesce(d.updated_at, p.updated_at) >= ?1)) AS owned
        FROM (SELECT message_id, available_at AS at, tenant, lane, notification_id, channel, token, fallback_step FROM outbox
              WHERE state = 'WAITING' AND available_at < ?1
                AND available_at >= ?2 AND (available_at, message_id) > (?2, ?3)
              ORDER BY available_at, message_id LIMIT ?4) w` + qUnownedFindEnd
)

// fallbackQueries are prepared on the writer's connection at open.
var fallbackQueries = []string{qFallbackInsert, qFallbackOf, qFallbackFailedRow, qFallbackFail, qFallbackSkipAfter, qFallbackSkip, qFallbackExpired, qFallbackErased, qFallbackChain, qFallbackRelease}

// chain numbers a create's sends as insertPlanned writes them: nil off a
// chain (NotificationCreateParams.Fallback false).
type chain struct{ step int }

func newChain(p store.NotificationCreateParams) *chain {
	if !p.Fallback {
		return nil
	}
	return &chain{}
}

// insert writes the outbox row of send, one of channel ch's sends: the
// inbox is no step, and every send of one channel (push's devices) shares
// one. first is whether it is the channel's first send.
func (c *chain) insert(tx execer, p store.NotificationCreateParams, send heraldtype.Channel, first bool, available, now int64) error {
	if first {
		c.step++
	}
	_, err := tx.Exec(qFallbackInsert, p.ID, store.MessageID(p.ID, send), p.Tenant, string(p.Lane), string(send),
		available, msPtr(p.ExpiresAt), now, now, c.step)
	if err != nil {
		return fmt.Errorf("insert fallback outbox row: %w", err)
	}
	return nil
}

// fallbackEnded moves on the chain of the send messageID, whose delivery
// has just entered state with reason in tx (a write that took), and
// returns the lane to wake when it released a step ("" otherwise).
func fallbackEnded(tx wtx, now int64, messageID string, state heraldtype.DeliveryState, reason string) (heraldtype.Lane, error) {
	if !state.Terminal() {
		return "", nil // RETRY_WAIT, PARKED: the chain waits
	}
	return fallbackMove(tx, now, messageID, fallback.Definite(state, reason), fallback.Cause(state, reason))
}

// fallbackFailed moves on the chain of the outbox row id, which the
// dispatcher has just ended FAILED in tx, if it is on one and its message
// has no delivery row (no send was made: a definite failure, whose
// release is then this write's, as for a send's); a delivery row's own
// end moves the chain otherwise.
func fallbackFailed(tx wtx, now, id int64) (heraldtype.Lane, error) {
	var mid string
	switch err := tx.QueryRow(qFallbackFailedRow, id).Scan(&mid); {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read failed outbox row: %w", err)
	}
	return fallbackMove(tx, now, mid, true, string(heraldtype.OutboxFailed))
}

// fallbackMove moves on the chain of the send messageID, which has just
// ended (definitely failed, or not) with cause.
func fallbackMove(tx wtx, now int64, messageID string, definite bool, cause string) (heraldtype.Lane, error) {
	if !definite {
		if _, err := tx.Exec(qFallbackSkipAfter, now, messageID, cause); err != nil {
			return "", fmt.Errorf("skip fallback steps: %w", err)
		}
		return "", nil
	}
	var (
		nid, lane   string
		step, sends int
	)
	err := tx.QueryRow(qFallbackOf, messageID).Scan(&nid, &step, &lane, &sends)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil // on no chain
	case err != nil:
		return "", fmt.Errorf("read fallback chain: %w", err)
	}
	var released bool
	err = tx.QueryRow(qFallbackFail, now, nid, step, cause, sends).Scan(&released)
	switch {
	case errors.Is(err, sql.ErrNoRows), err == nil && !released:
		return "", nil // the last step, or another send of the step is still under way
	case err != nil:
		return "", fmt.Errorf("release fallback step: %w", err)
	}
	return heraldtype.Lane(lane), nil
}

// fallbackRepair is the watchdog's re-drive of the WAITING row u: the
// chain's rule (fallback.Decide) applied to its rows as they are now. It
// reports whether u itself moved (released or skipped).
func fallbackRepair(tx wtx, now int64, u store.Unowned) (bool, error) {
	rows, err := tx.Query(qFallbackChain, u.NotificationID)
	if err != nil {
		return false, err
	}
	var sends []fallback.Send
	step := 0 // u's, while it is as found
	for rows.Next() {
		var (
			s            fallback.Send
			mid          string
			token        int64
			ostate, dsta string
		)
		if err := rows.Scan(&mid, &token, &s.Step, &ostate, &dsta, &s.Reason); err != nil {
			rows.Close()
			return false, err
		}
		s.Outbox, s.Delivery = heraldtype.OutboxState(ostate), heraldtype.DeliveryState(dsta)
		sends = append(sends, s)
		if mid == u.MessageID && token == u.Token && s.Outbox == heraldtype.OutboxWaiting {
			step = s.Step
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || step == 0 {
		return false, err // gone, or no longer as found
	}
	d := fallback.Decide(sends)
	switch d.Verdict {
	case fallback.Skip:
		_, err = tx.Exec(qFallbackSkip, now, u.NotificationID, d.After)
		return err == nil, err
	case fallback.Release:
		r, err := tx.Exec(qFallbackRelease, now, u.NotificationID, d.Step, d.After)
		if err != nil {
			return false, err
		}
		n, err := r.RowsAffected()
		return n > 0 && step == d.Step, err
	}
	return false, nil
}

// fallbackStale moves on the chains of the claims the stale sweep turned
// UNKNOWN: the rest of each is skipped (the call may have gone out).
func fallbackStale(tx wtx, now int64, stale []store.StaleClaim) error {
	for _, c := range stale {
		if _, err := fallbackEnded(tx, now, c.MessageID, heraldtype.DeliveryUnknown, heraldtype.ReasonStaleClaim); err != nil {
			return err
		}
	}
	return nil
}

// wakeFallback wakes this process's claimers of lane, where a write just
// released a fallback step ("" for none).
func (s *Store) wakeFallback(lane heraldtype.Lane) {
	if lane != "" {
		s.wakeups.Notify(lane)
	}
}
