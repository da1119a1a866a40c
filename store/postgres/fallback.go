package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Fallback chains (channel policy first; store/fallback.go, package
// fallback). The writes that end a send (qDeliveryRecord, qDeliveryDecide,
// qDeliverySweepStale, and the dispatcher's qOutboxFail) carry qFallbackMove's CTEs, so the chain moves on in
// the very statement, and so the transaction, that ends the send; intake's
// statements write each row's step (chainSteps); the watchdog repairs a
// chain in a transaction of its own (fallbackRepair).

// qFallbackMove is the CTEs that move on the chains of the sends whose
// deliveries the statement's CTE u has just ended: u returns, for each
// delivery row it wrote, notification_id, channel, state and reason (a
// write that did not take returns nothing, and so moves nothing). A
// RETRY_WAIT or PARKED row moves nothing either.
//
//	fm  the ended sends that are on a chain, found by the outbox row's
//	    primary key, with their step, how many sends the step has (rows
//	    are never added to a chain after intake, so the statement's
//	    snapshot counts them right), whether the end was a definite
//	    failure (fallback.Definite; u's state FAILED is qOutboxFail's
//	    outbox row ended without a delivery, definite too) and its cause
//	    (fallback.Cause).
//	fr  a definite failure: one more failure on each WAITING row of the
//	    next step, and PENDING, due now, once they equal the step's
//	    sends. An UPDATE of the waiting rows themselves: a second failure
//	    committed at the same moment waits for this row lock and then
//	    counts on the row as the first left it (PostgreSQL re-reads the
//	    row it waited for), so the step is released exactly once.
//	fs  any other end: every later WAITING row SKIPPED(FALLBACK_NOT_NEEDED).
//
// The state is compared as an expression (w.state || ”), as the fenced
// writes do, so the primary key's notification_id prefix, not the partial
// index of WAITING rows, finds the rows. fm looks each send's outbox row up
// by its key (a LATERAL lookup with LIMIT 1, one probe a send, however many
// rows stale statistics make the planner expect), and fr and fs run only
// when fm has a row for them (an uncorrelated EXISTS, a one-time filter
// checked before their plan starts): a send off any chain, nearly every
// send, moves nothing and reads nothing more. Without that gate a result
// write planned on the statistics of a small outbox (autovacuum behind a
// campaign's fan-out, or off) joined fm to the outbox by hash, and a hash
// join reads its outer side first: it scanned the whole outbox for WAITING
// rows on every send, a million rows in issue 12's isolation run, where it
// stalled both lanes. The statement selects, from fr,
// the lane of a released step (to wake this process's claimers). $1 is
// now, as in every host statement.
const qFallbackMove = `,
fm AS (
    SELECT o.notification_id, o.fallback_step, o.lane,
           (SELECT count(*) FROM outbox s WHERE s.notification_id = o.notification_id AND s.fallback_step = o.fallback_step) AS sends,
           u.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED', 'FAILED')
               OR (u.state = 'SUPPRESSED' AND u.reason IN ('DESTINATION_UNAVAILABLE', 'CONSENT_DENIED')) AS definite,
           CASE WHEN u.state = 'SUPPRESSED' AND u.reason <> '' THEN u.reason ELSE u.state END AS cause
    FROM u CROSS JOIN LATERAL (
        SELECT o.notification_id, o.fallback_step, o.lane FROM outbox o
        WHERE o.notification_id = u.notification_id AND o.channel = u.channel
        LIMIT 1
    ) o
    WHERE o.fallback_step IS NOT NULL AND u.state NOT IN ('SENDING', 'RETRY_WAIT', 'PARKED')
),
fr AS (
    UPDATE outbox w
    SET fallback_fails = w.fallback_fails + 1,
        state = CASE WHEN w.fallback_fails + 1 >= fm.sends THEN 'PENDING' ELSE w.state END,
        available_at = CASE WHEN w.fallback_fails + 1 >= fm.sends THEN coalesce($1::timestamptz, clock_timestamp()) ELSE w.available_at END,
        fallback_after = CASE WHEN w.fallback_fails + 1 >= fm.sends THEN fm.cause ELSE w.fallback_after END,
        updated_at = coalesce($1::timestamptz, clock_timestamp())
    FROM fm
    WHERE fm.definite AND w.notification_id = fm.notification_id AND w.fallback_step = fm.fallback_step + 1 AND w.state || '' = 'WAITING'
      AND EXISTS (SELECT 1 FROM fm WHERE fm.definite)
    RETURNING w.lane, w.state = 'PENDING' AS released
),
fs AS (
    UPDATE outbox w
    SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = fm.cause, updated_at = coalesce($1::timestamptz, clock_timestamp())
    FROM fm
    WHERE NOT fm.definite AND w.notification_id = fm.notification_id AND w.fallback_step > fm.fallback_step AND w.state || '' = 'WAITING'
      AND EXISTS (SELECT 1 FROM fm WHERE NOT fm.definite)
)
`

// qFallbackReleased is the select list's column of qFallbackMove's released
// lane (NULL when none).
const qFallbackReleased = `(SELECT min(lane) FROM fr WHERE released)`

// chainSteps returns each channel's step for intake's statements: 0 off a
// chain and for the inbox, else 1, 2… in order.
func chainSteps(p store.NotificationCreateParams) []int32 {
	steps := make([]int32, len(p.Channels))
	for i, n := range store.FallbackSteps(p.Channels, p.Fallback) {
		steps[i] = int32(n)
	}
	return steps
}

// wakeFallback wakes this process's claimers of the lane where a write
// released a fallback step (nil for none). Other processes' claimers find
// the row at their next poll, as they find a retry that came due.
func (s *Store) wakeFallback(lane *string) {
	if lane != nil && *lane != "" {
		s.wakeups.Notify(heraldtype.Lane(*lane))
	}
}

// The watchdog's find and repair of WAITING rows (store.UnownedWaiting).
const (
	// qUnownedFindWaiting walks outbox_waiting by available_at; a row is
	// owned while a send of an earlier step is under way (a delivery not
	// ended, or none yet and the outbox row still to be sent) or ended
	// less than the grace ago. Each earlier send is one probe of the
	// primary key's notification_id prefix and of the deliveries'
	// message_id.
	qUnownedFindWaiting = qUnownedFindOuter + `
        SELECT w.message_id, w.at, w.tenant, w.lane, w.notification_id, w.channel, 'WAITING' AS outbox_state, w.token,
               EXISTS (SELECT 1 FROM outbox p LEFT JOIN deliveries d ON d.message_id = p.message_id
                       WHERE p.notification_id = w.notification_id AND p.fallback_step < w.fallback_step
                         AND (d.state IN ('SENDING', 'RETRY_WAIT', 'PARKED')
                              OR (d.state IS NULL AND p.state IN ('PENDING', 'CLAIMED', 'PUBLISHING', 'PUBLISHED', 'WAITING'))
                              OR coalesce(d.updated_at, p.updated_at) >= coalesce($1::timestamptz, now()) - $2::interval)) AS owned
        FROM (SELECT message_id, available_at AS at, tenant, lane, notification_id, channel, token, fallback_step FROM outbox
              WHERE state = 'WAITING' AND available_at < coalesce($1::timestamptz, now()) - $2::interval
                AND available_at >= $3::timestamptz AND (available_at, message_id) > ($3::timestamptz, $4::text)
              ORDER BY available_at, message_id
              LIMIT $5::integer) w` + qUnownedFindEnd

	// qFallbackLock locks the WAITING rows of the chains $1, in one order,
	// before fallbackRepair reads them: a send's end that moves one of
	// them waits for the repair, or the repair for it.
	qFallbackLock = `SELECT 1 FROM outbox WHERE notification_id = ANY ($1::text[]) AND state || '' = 'WAITING'
ORDER BY notification_id, channel FOR UPDATE`
	// qFallbackChains reads the chains $1 as fallback.Decide takes them.
	qFallbackChains = `SELECT o.notification_id, o.message_id, o.token, o.fallback_step, o.state, coalesce(d.state, ''), coalesce(d.reason, '')
FROM outbox o LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE o.notification_id = ANY ($1::text[]) AND o.fallback_step IS NOT NULL`
	// qFallbackErased ends the WAITING rows of the notifications $2 an
	// erasure batch erased: nothing more goes to an erased recipient.
	qFallbackErased = `UPDATE outbox SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = 'ERASED',
    updated_at = coalesce($1::timestamptz, now())
WHERE notification_id = ANY ($2::text[]) AND state || '' = 'WAITING'`
	// qFallbackRelease is the repair's release of step $3 of chain $2
	// ($4 the cause); qFallbackSkip its skip of every WAITING row.
	qFallbackRelease = `UPDATE outbox SET state = 'PENDING', available_at = coalesce($1::timestamptz, now()), last_reason = 'REDRIVEN',
    fallback_after = $4::text, token = token + 1, updated_at = coalesce($1::timestamptz, now())
WHERE notification_id = $2::text AND fallback_step = $3::integer AND state || '' = 'WAITING'`
	qFallbackSkip = `UPDATE outbox SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = $3::text,
    updated_at = coalesce($1::timestamptz, now())
WHERE notification_id = $2::text AND state || '' = 'WAITING'`
)

// fallbackRepair is the watchdog's re-drive of WAITING rows: for each
// chain, the chain's rule (fallback.Decide) applied to its rows as they
// are now, in one transaction that first locks the chains' WAITING rows.
// It returns the rows of rows that moved (released or skipped), each only
// if it was still as found (WAITING, its token).
func (s *Store) fallbackRepair(ctx context.Context, rows []store.Unowned) ([]store.Unowned, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	var nids []string
	seen := map[string]bool{}
	for _, u := range rows {
		if !seen[u.NotificationID] {
			seen[u.NotificationID] = true
			nids = append(nids, u.NotificationID)
		}
	}
	var out []store.Unowned
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = out[:0]
		if _, err := tx.Exec(ctx, qFallbackLock, nids); err != nil {
			return fmt.Errorf("lock waiting rows: %w", err)
		}
		type row struct {
			token int64
			send  fallback.Send
		}
		chains := map[string][]fallback.Send{}
		byMessage := map[string]row{}
		r, err := tx.Query(ctx, qFallbackChains, nids)
		if err != nil {
			return fmt.Errorf("read chains: %w", err)
		}
		for r.Next() {
			var (
				nid, mid       string
				x              row
				ostate, dstate string
				step           int32
			)
			if err := r.Scan(&nid, &mid, &x.token, &step, &ostate, &dstate, &x.send.Reason); err != nil {
				r.Close()
				return fmt.Errorf("read chains: %w", err)
			}
			x.send.Step, x.send.Outbox, x.send.Delivery = int(step), heraldtype.OutboxState(ostate), heraldtype.DeliveryState(dstate)
			chains[nid] = append(chains[nid], x.send)
			byMessage[mid] = x
		}
		r.Close()
		if err := r.Err(); err != nil {
			return fmt.Errorf("read chains: %w", err)
		}
		decided := map[string]fallback.Decision{}
		for _, nid := range nids {
			d := fallback.Decide(chains[nid])
			switch d.Verdict {
			case fallback.Release:
				_, err = tx.Exec(ctx, qFallbackRelease, s.now(), nid, d.Step, d.After)
			case fallback.Skip:
				_, err = tx.Exec(ctx, qFallbackSkip, s.now(), nid, d.After)
			}
			if err != nil {
				return fmt.Errorf("move chain %s on: %w", nid, err)
			}
			decided[nid] = d
		}
		for _, u := range rows {
			x, ok := byMessage[u.MessageID]
			if !ok || x.token != u.Token || x.send.Outbox != heraldtype.OutboxWaiting {
				continue // no longer as found
			}
			switch d := decided[u.NotificationID]; {
			case d.Verdict == fallback.Skip, d.Verdict == fallback.Release && d.Step == x.send.Step:
				out = append(out, u)
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.fail("repair fallback chains", err)
	}
	return out, nil
}
