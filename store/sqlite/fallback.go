package sqlite

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Fallback chains (channel policy first; store/fallback.go, package
// fallback). The writes that end a send call fallbackEnded in their own
// transaction, and the dispatcher's FAILED calls fallbackFailed in its;
// intake writes a chain's rows through chain; the watchdog repairs a chain
// with fallbackRepair. Every statement finds the chain's rows by
// outbox_notification, the ended send's row by its unique message_id.
//
// Chains are lazy here (store.LazyPlan): intake writes the first step's
// rows alone, with the later steps' channels as a JSON array in their
// fallback_plan. The first write that needs the later steps writes them
// (materialize, qFallbackMaterialize) and clears the plan
// (qFallbackWritten), in its transaction: a definite failure of a first
// step's send (fallbackMove, which then releases step 2 as for an eager
// chain), a decision on a step with no row yet (a cancel's, in
// DeliveryDecide: materializeStep, WAITING or SKIPPED as the read API
// showed it), an erasure, and a report or receipt that moves an ended
// first step's delivery (fallbackClose: SKIPPED after that end, so that a
// later failure report does not reopen the chain). From then on the chain
// is an eager one. The readers show the unwritten steps from the plan
// (store.WithPlannedSteps; the list's qPlannedState).
//
// The common end, a first step's send accepted, writes nothing for the
// chain: the claim's RETURNING says the row is on a lazy chain still
// unwritten (Fence.LazyChain), and DeliveryRecord then settles the row with
// qOutboxCompleteLazy, which takes only while the plan is still there;
// when a write has materialized the chain since the claim (another
// device's failure, a cancel, an erasure) it does not take, and the end
// moves the chain as any end does. A send whose claim read that it is on
// no chain (Fence.OffChain) runs no chain statement either.
const (
	// qFallbackInsert is qOutboxInsert for a row of a chain: ?10 its
	// step, PENDING for the first, WAITING after; ?12 the scope; ?13
	// whether a first step's row is deferred (a WAITING row never is:
	// its release makes it due at once).
	qFallbackInsert = `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, expires_at, created_at, updated_at, fallback_step,
                    fallback_plan, scope, deferred)
VALUES (?1, ?2, ?3, ?4, ?5, CASE WHEN ?10 = 1 THEN 'PENDING' ELSE 'WAITING' END, ?6, ?7, ?8, ?9, ?10, ?11, ?12, CASE WHEN ?10 = 1 THEN ?13 ELSE 0 END)`
	// qFallbackMaterialize writes the later steps of the lazy chains of the
	// notifications ?2 (a JSON array) that have none yet, as intake writes
	// an eager chain's: from the plan on one of each chain's first step's
	// rows, with the notification's due time, due-by and acceptance. ?1
	// now. With ?3 'WAITING', only chains still open (qFirstStepEndedOtherwise
	// false: the rows would have been skipped); with ?3 'SKIPPED' (a close),
	// every such chain, its steps SKIPPED, not needed, after ?4. A chain with a
	// later step's row writes nothing, and a message id that exists is kept.
	qFallbackMaterialize = `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at,
                    created_at, updated_at, fallback_step, fallback_after, scope)
SELECT o.notification_id, o.notification_id || '.' || j.value, o.tenant, o.lane, j.value, ?3,
       CASE WHEN ?3 = 'SKIPPED' THEN 'FALLBACK_NOT_NEEDED' ELSE '' END,
       max(n.created_at, coalesce(n.send_at, n.created_at)), n.expires_at, n.created_at, ?1, j.key + 2, ?4, n.scope
FROM outbox o JOIN notifications n ON n.id = o.notification_id, json_each(o.fallback_plan) j
WHERE o.id IN (SELECT min(id) FROM outbox
               WHERE notification_id IN (SELECT value FROM json_each(?2)) AND fallback_plan IS NOT NULL
               GROUP BY notification_id)
  AND NOT EXISTS (SELECT 1 FROM outbox l WHERE l.notification_id = o.notification_id AND l.fallback_step > 1)
  AND (?3 = 'SKIPPED' OR NOT ` + qFirstStepEndedOtherwise + `)
ORDER BY o.notification_id, j.key
ON CONFLICT (message_id) DO NOTHING`
	// qFallbackWritten clears the plan on the first steps' rows of the
	// lazy chains ?1 (a JSON array) whose later steps now have rows: a
	// claim of such a row reads Fence.LazyChain false, and an end settled
	// under an earlier claim's (qOutboxCompleteLazy) no longer takes.
	qFallbackWritten = `UPDATE outbox SET fallback_plan = NULL
WHERE notification_id IN (SELECT value FROM json_each(?1)) AND fallback_plan IS NOT NULL
  AND EXISTS (SELECT 1 FROM outbox l WHERE l.notification_id = outbox.notification_id AND l.fallback_step > 1)`
	// qFallbackHasRow reads whether the message ?1 has an outbox row.
	qFallbackHasRow = `SELECT EXISTS (SELECT 1 FROM outbox WHERE message_id = ?1)`
	// qFirstStepEndedOtherwise: a send of the first step of notification
	// n's chain has ended otherwise than by a definite failure (fallback.
	// Send's end, fallback.Definite), which ends the chain (fallback.Decide).
	qFirstStepEndedOtherwise = `EXISTS (
    SELECT 1 FROM outbox fs LEFT JOIN deliveries fd ON fd.message_id = fs.message_id
    WHERE fs.notification_id = n.id AND fs.fallback_step = 1 AND CASE
        WHEN fd.state IS NOT NULL THEN fd.state IN ('PROVIDER_ACCEPTED', 'DELIVERED', 'UNKNOWN', 'STORED')
            OR (fd.state = 'SUPPRESSED' AND fd.reason NOT IN ('DESTINATION_UNAVAILABLE', 'CONSENT_DENIED'))
        ELSE fs.state IN ('EXPIRED', 'SKIPPED', 'DONE') END)`
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

// fallbackQueries are the writer's to cache (writeQueries; stmts).
var fallbackQueries = []string{qFallbackInsert, qFallbackMaterialize, qFallbackWritten, qFallbackHasRow, qFallbackOf, qFallbackFailedRow, qFallbackFail, qFallbackSkipAfter, qFallbackSkip, qFallbackExpired, qFallbackErased, qFallbackChain, qFallbackRelease}

// chain numbers a create's sends as insertPlanned writes them: nil off a
// chain (NotificationCreateParams.Fallback false). A lazy chain
// (store.LazyPlan) writes its first step alone, each of its rows carrying
// plan, the later steps' channels as a JSON array.
type chain struct {
	step int
	plan any // the JSON array, or nil: an eager chain
	lazy bool
}

func newChain(p store.NotificationCreateParams) (*chain, error) {
	if !p.Fallback {
		return nil, nil
	}
	c := &chain{}
	if later := store.LazyPlan(p); len(later) > 0 {
		b, err := json.Marshal(later)
		if err != nil {
			return nil, fmt.Errorf("fallback plan: %w", err)
		}
		c.plan, c.lazy = string(b), true
	}
	return c, nil
}

// written counts the next channel as a step and reports whether its sends
// get rows now: every step of an eager chain, the first step of a lazy
// one. Call it once per non-inbox channel, in the kind's order.
func (c *chain) written() bool {
	c.step++
	return !c.lazy || c.step == 1
}

// insert writes the outbox row of send, one of the sends of the step
// written last counted: every send of one channel (push's devices) shares
// one.
func (c *chain) insert(tx execer, p store.NotificationCreateParams, send heraldtype.Channel, available, now int64) error {
	var plan any
	if c.step == 1 {
		plan = c.plan
	}
	_, err := tx.Exec(qFallbackInsert, p.ID, store.MessageID(p.ID, send), p.Tenant, string(p.Lane), string(send),
		available, msPtr(p.ExpiresAt), now, now, c.step, plan, p.Scope, deferredAt(available, now))
	if err != nil {
		return fmt.Errorf("insert fallback outbox row: %w", err)
	}
	return nil
}

// materialize writes the later steps of the lazy chains of the
// notifications ids that have none yet and are still open, WAITING
// (qFallbackMaterialize).
func materialize(tx execer, now int64, ids ...string) error {
	return materializeAs(tx, now, heraldtype.OutboxWaiting, nil, ids...)
}

// materializeAs runs qFallbackMaterialize with state and after, and
// clears the plan of the chains that now have their later steps' rows.
func materializeAs(tx execer, now int64, state heraldtype.OutboxState, after any, ids ...string) error {
	list := jsonList(ids)
	if _, err := tx.Exec(qFallbackMaterialize, now, list, string(state), after); err != nil {
		return fmt.Errorf("write lazy fallback steps: %w", err)
	}
	if _, err := tx.Exec(qFallbackWritten, list); err != nil {
		return fmt.Errorf("clear lazy fallback plans: %w", err)
	}
	return nil
}

// materializeStep is for a write about to name messageID of notification
// nid, which may be a later step of a lazy chain with no row yet, as the
// read API showed it (a cancel's decision): it writes the chain's later
// steps as the read API shows them (store.WithPlannedSteps), WAITING
// while the chain is open, else SKIPPED after the end that ended it
// (fallback.Decide on the first step's sends). Nothing when the message
// has a row, the common case.
func materializeStep(tx wtx, now int64, nid, messageID string) error {
	var has bool
	if err := tx.QueryRow(qFallbackHasRow, messageID).Scan(&has); err != nil || has {
		return err
	}
	sends, err := readChain(tx, nid, nil)
	if err != nil {
		return err
	}
	sends = append(sends, fallback.Send{Step: 2, Outbox: heraldtype.OutboxWaiting}) // the steps to write
	state, after := heraldtype.OutboxWaiting, any(nil)
	if d := fallback.Decide(sends); d.Verdict == fallback.Skip {
		state, after = heraldtype.OutboxSkipped, d.After
	}
	return materializeAs(tx, now, state, after, nid)
}

// fallbackClose is for a write about to move the delivery of messageID
// (notification nid) that has already ended, from state with reason (a
// report, a receipt): when that end ended its chain, the chain's rows
// record it before the move, as they would have at the end, so the step
// that later moves elsewhere does not reopen the chain. Ends that are not
// the chain's (under way, or a definite failure, which released the
// next step at its end) write nothing.
func fallbackClose(tx wtx, now int64, nid, messageID string, state heraldtype.DeliveryState, reason string) error {
	if !state.Terminal() || fallback.Definite(state, reason) {
		return nil
	}
	return materializeAs(tx, now, heraldtype.OutboxSkipped, fallback.Cause(state, reason), nid)
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
	if step == 1 { // a lazy chain's later steps are written now
		if err := materialize(tx, now, nid); err != nil {
			return "", err
		}
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
	step := 0 // u's, while it is as found
	sends, err := readChain(tx, u.NotificationID, func(mid string, token int64, s fallback.Send) {
		if mid == u.MessageID && token == u.Token && s.Outbox == heraldtype.OutboxWaiting {
			step = s.Step
		}
	})
	if err != nil || step == 0 {
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

// readChain reads the sends of notification nid's chain as fallback.Decide
// takes them (qFallbackChain), calling each, when set, with every row's
// message id and token.
func readChain(tx wtx, nid string, each func(mid string, token int64, s fallback.Send)) ([]fallback.Send, error) {
	rows, err := tx.Query(qFallbackChain, nid)
	if err != nil {
		return nil, fmt.Errorf("read fallback chain: %w", err)
	}
	var sends []fallback.Send
	for rows.Next() {
		var (
			s            fallback.Send
			mid          string
			token        int64
			ostate, dsta string
		)
		if err := rows.Scan(&mid, &token, &s.Step, &ostate, &dsta, &s.Reason); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read fallback chain: %w", err)
		}
		s.Outbox, s.Delivery = heraldtype.OutboxState(ostate), heraldtype.DeliveryState(dsta)
		sends = append(sends, s)
		if each != nil {
			each(mid, token, s)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("read fallback chain: %w", err)
	}
	return sends, nil
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
