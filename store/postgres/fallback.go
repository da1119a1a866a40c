package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Fallback chains (channel policy first; store/fallback.go, package
// fallback). The writes that end a send (qDeliveryRecord, qDeliveryDecide,
// qDeliverySweepStale, and the dispatcher's qOutboxFail) carry
// qFallbackMove's CTEs, so the chain moves on in the very statement, and so
// the transaction, that ends the send; intake's statements write each
// row's step (chainArgs); the watchdog repairs a chain in a transaction of
// its own (fallbackRepair).
//
// Chains are lazy here (store.LazyPlan), as on SQLite: intake writes the
// first step's rows alone, each with the later steps' channels as its
// fallback_plan (text[]). The later steps' rows are written by the first
// write that needs them: a definite failure of a first step's send writes
// them in its own statement (qFallbackMove's fl, which counts the failure
// on step 2 as it writes it), a decision on a step with no row yet (a
// cancel's, DeliveryDecide: materializeStep, WAITING or SKIPPED as the
// read API showed it) and an erasure write them in a transaction that
// first locks the first step's rows (materialize), and a report or
// receipt that moves an ended first step's delivery writes them SKIPPED
// after that end in its own statement (qFallbackClose), so that a later
// failure report does not reopen the chain. The readers show the
// unwritten steps from the plan (store.WithPlannedSteps; the list's
// qPlannedState). The plan stays on a row once the later steps have rows
// (only the transactions that lock the first step's rows clear it): every
// reader of it first asks whether a later step's row exists, or, in
// qFallbackMove, writes through ON CONFLICT, which meets the rows if they
// do. Clearing it in qFallbackMove would have each of two devices' ends
// lock the other's row while holding its own: a deadlock.
//
// The common end, a first step's only send accepted, writes nothing for
// the chain: the claim's RETURNING says the row is the only send of a
// lazy first step (Fence.LazyChain), and DeliveryRecord then writes the
// result with qDeliveryRecordLazy, whose settle of the row takes only
// while the plan is still there. A cancel or an erasure clears it under
// the row's lock, so either the settle takes first and they see the end
// (their next statement reads after the settle's commit), or they write
// the steps first and the settle does not take: the end then moves the
// chain in a second statement (qFallbackEnd), which sees their rows.
// Sends of a first step with more than one (push's devices) are never
// LazyChain: their ends run qFallbackMove, which for a chain with a plan
// writes the later steps through ON CONFLICT (notification_id, channel)
// so that two devices ending at once come out as for an eager chain:
// each insert of a row the other is inserting waits for it and then
// updates it (a failure counts on step 2, releasing it at the step's
// sends; any other end skips the WAITING rows).

// qFallbackMove is the CTEs that move on the chains of the sends whose
// deliveries the statement's CTE u has just ended: u returns, for each
// delivery row it wrote, notification_id, channel, state and reason (a
// write that did not take returns nothing, and so moves nothing). A
// RETRY_WAIT or PARKED row moves nothing either.
//
//	fm  the ended sends that are on a chain, found by the outbox row's
//	    primary key, with their step, how many sends the step has (rows
//	    are never added to a step after intake, so the statement's
//	    snapshot counts them right), whether the end was a definite
//	    failure (fallback.Definite; u's state FAILED is qOutboxFail's
//	    outbox row ended without a delivery, definite too), its cause
//	    (fallback.Cause), and the row's lazy plan.
//	fr  a definite failure, no plan: one more failure on each WAITING
//	    row of the next step, and PENDING, due now, once they equal the
//	    step's sends. An UPDATE of the waiting rows themselves: a second
//	    failure committed at the same moment waits for this row lock and
//	    then counts on the row as the first left it (PostgreSQL re-reads
//	    the row it waited for), so the step is released exactly once.
//	fs  any other end, no plan: every later WAITING row
//	    SKIPPED(FALLBACK_NOT_NEEDED).
//	fl  a first step's end with a plan (one per chain, fp): its later
//	    steps written as fr or fs would leave them, in step order. A
//	    definite failure writes step 2 with its failure counted (PENDING,
//	    due now, after the cause when the step has one send, else
//	    WAITING) and the rest WAITING, unless a first step's send had
//	    already ended otherwise in the snapshot (the chain ended there,
//	    qFirstStepEndedOtherwise); any other end writes them SKIPPED. A
//	    row that exists (written by another transaction, committed before
//	    or while this one waited for it) is updated instead, as fr or fs
//	    would update it: a failure counts on step 2's WAITING row, any
//	    other end skips a WAITING row. fr and fs cannot do this: a row
//	    another transaction committed after the statement began is not in
//	    their snapshot, while ON CONFLICT meets it.
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
// stalled both lanes. fp is gated alike, and finds each notification by
// its key; its EXISTS is kept a per-row probe by OFFSET 0 (no EXISTS with
// an OFFSET becomes a hashed subplan, which in a generic plan made on a
// small outbox read every first step of the outbox to build its hash). The statement selects, from fr and fl, the lane of a released step (to wake this process's claimers).
// $1 is now, as in every host statement.
const qFallbackMove = `,
fm AS (
    SELECT o.notification_id, o.fallback_step, o.lane, o.fallback_plan AS plan,
           (SELECT count(*) FROM outbox s WHERE s.notification_id = o.notification_id AND s.fallback_step = o.fallback_step) AS sends,
           u.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED', 'FAILED')
               OR (u.state = 'SUPPRESSED' AND u.reason IN ('DESTINATION_UNAVAILABLE', 'CONSENT_DENIED')) AS definite,
           CASE WHEN u.state = 'SUPPRESSED' AND u.reason <> '' THEN u.reason ELSE u.state END AS cause
    FROM u CROSS JOIN LATERAL (
        SELECT o.notification_id, o.fallback_step, o.lane, o.fallback_plan FROM outbox o
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
    WHERE fm.definite AND fm.plan IS NULL AND w.notification_id = fm.notification_id AND w.fallback_step = fm.fallback_step + 1
      AND w.state || '' = 'WAITING'
      AND EXISTS (SELECT 1 FROM fm WHERE fm.definite AND fm.plan IS NULL)
    RETURNING w.lane, w.state = 'PENDING' AS released
),
fs AS (
    UPDATE outbox w
    SET state = 'SKIPPED', last_reason = 'FALLBACK_NOT_NEEDED', fallback_after = fm.cause, updated_at = coalesce($1::timestamptz, clock_timestamp())
    FROM fm
    WHERE NOT fm.definite AND fm.plan IS NULL AND w.notification_id = fm.notification_id AND w.fallback_step > fm.fallback_step
      AND w.state || '' = 'WAITING'
      AND EXISTS (SELECT 1 FROM fm WHERE NOT fm.definite AND fm.plan IS NULL)
),
fp AS (
    SELECT DISTINCT ON (fm.notification_id) fm.*, n.tenant, n.scope, n.created_at, greatest(n.created_at, n.send_at) AS due, n.expires_at,
           fm.definite AND fm.sends <= 1 AS release
    FROM fm CROSS JOIN LATERAL (SELECT * FROM notifications n WHERE n.id = fm.notification_id LIMIT 1) n
    WHERE fm.plan IS NOT NULL AND fm.fallback_step = 1 AND EXISTS (SELECT 1 FROM fm WHERE fm.plan IS NOT NULL)
      AND NOT (fm.definite AND EXISTS (
          SELECT 1 FROM outbox fs LEFT JOIN deliveries fd ON fd.message_id = fs.message_id
          WHERE fs.notification_id = fm.notification_id AND fs.fallback_step = 1 AND ` + qSendEndedOtherwise + `
          OFFSET 0))
    ORDER BY fm.notification_id, fm.definite
),
fl AS (
    INSERT INTO outbox AS w (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at,
                             created_at, updated_at, fallback_step, fallback_fails, fallback_after, scope)
    SELECT fp.notification_id, fp.notification_id || '.' || p.channel, fp.tenant, fp.lane, p.channel,
           CASE WHEN NOT fp.definite THEN 'SKIPPED' WHEN p.ord = 1 AND fp.release THEN 'PENDING' ELSE 'WAITING' END,
           CASE WHEN fp.definite THEN '' ELSE 'FALLBACK_NOT_NEEDED' END,
           CASE WHEN p.ord = 1 AND fp.release THEN coalesce($1::timestamptz, clock_timestamp()) ELSE fp.due END,
           fp.expires_at, fp.created_at, coalesce($1::timestamptz, clock_timestamp()), p.ord + 1,
           CASE WHEN fp.definite AND p.ord = 1 THEN 1 ELSE 0 END,
           CASE WHEN NOT fp.definite OR (p.ord = 1 AND fp.release) THEN fp.cause END, fp.scope
    FROM fp CROSS JOIN LATERAL unnest(fp.plan) WITH ORDINALITY AS p (channel, ord)
    ORDER BY fp.notification_id, p.ord
    ON CONFLICT (notification_id, channel) DO UPDATE
    SET fallback_fails = w.fallback_fails + CASE WHEN excluded.state = 'SKIPPED' THEN 0 ELSE 1 END,
        state = CASE WHEN excluded.state = 'SKIPPED' THEN 'SKIPPED'
                     WHEN w.fallback_fails + 1 >= (SELECT max(fp.sends) FROM fp WHERE fp.notification_id = w.notification_id) THEN 'PENDING'
                     ELSE w.state END,
        last_reason = CASE WHEN excluded.state = 'SKIPPED' THEN excluded.last_reason ELSE w.last_reason END,
        available_at = CASE WHEN excluded.state <> 'SKIPPED'
                                 AND w.fallback_fails + 1 >= (SELECT max(fp.sends) FROM fp WHERE fp.notification_id = w.notification_id)
                            THEN coalesce($1::timestamptz, clock_timestamp()) ELSE w.available_at END,
        fallback_after = CASE WHEN excluded.state = 'SKIPPED'
                                   OR w.fallback_fails + 1 >= (SELECT max(fp.sends) FROM fp WHERE fp.notification_id = w.notification_id)
                              THEN (SELECT max(fp.cause) FROM fp WHERE fp.notification_id = w.notification_id) ELSE w.fallback_after END,
        updated_at = excluded.updated_at
    WHERE w.state || '' = 'WAITING' AND (excluded.state = 'SKIPPED' OR excluded.fallback_step = 2)
    RETURNING w.lane, w.state = 'PENDING' AS released
)
`

// qFallbackReleased is the select list's column of qFallbackMove's released
// lane (NULL when none).
const qFallbackReleased = `(SELECT min(lane) FROM (SELECT lane FROM fr WHERE released UNION ALL SELECT lane FROM fl WHERE released) r)`

// qSendEndedOtherwise: the first step's send fs, with its delivery fd (a
// LEFT JOIN), has ended otherwise than by a definite failure (fallback.
// Send's end, fallback.Definite), which ends the chain (fallback.Decide).
const qSendEndedOtherwise = `CASE
        WHEN fd.state IS NOT NULL THEN fd.state IN ('PROVIDER_ACCEPTED', 'DELIVERED', 'UNKNOWN', 'STORED')
            OR (fd.state = 'SUPPRESSED' AND fd.reason NOT IN ('DESTINATION_UNAVAILABLE', 'CONSENT_DENIED'))
        ELSE fs.state IN ('EXPIRED', 'SKIPPED', 'DONE') END`

// qFirstStepEndedOtherwise: a send of the first step of notification n's
// chain has ended otherwise than by a definite failure.
const qFirstStepEndedOtherwise = `EXISTS (
    SELECT 1 FROM outbox fs LEFT JOIN deliveries fd ON fd.message_id = fs.message_id
    WHERE fs.notification_id = n.id AND fs.fallback_step = 1 AND ` + qSendEndedOtherwise + `)`

// chainArgs are a create's channels as intake's statements write them:
// every channel but the inbox, whose send is the notification's inbox_at
// (store, inboxsend.go), each with its step (0 off a chain, else 1, 2… in
// order), but for a lazy chain (store.LazyPlan) only the first step, whose
// rows carry plan, the later channels comma-joined (empty for none).
type chainArgs struct {
	channels, messageIDs []string
	steps                []int32
	plan                 string
}

func newChainArgs(p store.NotificationCreateParams) chainArgs {
	var c chainArgs
	var plan []string
	for _, ch := range store.LazyPlan(p) {
		plan = append(plan, string(ch))
	}
	c.plan = strings.Join(plan, ",")
	for i, n := range store.FallbackSteps(p.Channels, p.Fallback) {
		if n > 1 && len(plan) > 0 {
			continue // a lazy chain's later step
		}
		ch := p.Channels[i]
		if ch == heraldtype.ChannelInbox {
			continue
		}
		c.channels, c.messageIDs, c.steps = append(c.channels, string(ch)), append(c.messageIDs, store.MessageID(p.ID, ch)), append(c.steps, int32(n))
	}
	return c
}

// The writes of a lazy chain's later steps outside a send's end
// (materialize).
const (
	// qFallbackLockPlanned locks, in one order, the first steps' rows of
	// the lazy chains $1 that still carry their plan: a send's end settled
	// under Fence.LazyChain (qDeliveryRecordLazy) takes the row's lock, so
	// either it commits first and the statements after this lock read its
	// end, or it waits and then finds the plan gone.
	qFallbackLockPlanned = `SELECT 1 FROM outbox WHERE notification_id = ANY ($1::text[]) AND fallback_step = 1 AND fallback_plan IS NOT NULL
ORDER BY notification_id, channel FOR UPDATE`
	// qFallbackMaterialize writes the later steps of the lazy chains $2
	// that have none yet, as intake writes an eager chain's: from the plan
	// on one of each chain's first step's rows, with the notification's
	// due time, due-by and creation. $1 now. With $3 'WAITING', only
	// chains still open (qFirstStepEndedOtherwise false: the rows would
	// have been skipped); with $3 'SKIPPED', every such chain, its steps
	// SKIPPED, not needed, after $4. A row that exists is kept.
	qFallbackMaterialize = `INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at,
                    created_at, updated_at, fallback_step, fallback_after, scope)
SELECT o.notification_id, o.notification_id || '.' || p.channel, o.tenant, o.lane, p.channel, $3::text,
       CASE WHEN $3::text = 'SKIPPED' THEN 'FALLBACK_NOT_NEEDED' ELSE '' END,
       greatest(n.created_at, n.send_at), n.expires_at, n.created_at, coalesce($1::timestamptz, now()), p.ord + 1, $4::text, n.scope
FROM (SELECT DISTINCT ON (notification_id) notification_id, tenant, lane, fallback_plan FROM outbox
      WHERE notification_id = ANY ($2::text[]) AND fallback_step = 1 AND fallback_plan IS NOT NULL
      ORDER BY notification_id, channel) o
CROSS JOIN LATERAL (SELECT * FROM notifications n WHERE n.id = o.notification_id LIMIT 1) n
CROSS JOIN LATERAL unnest(o.fallback_plan) WITH ORDINALITY AS p (channel, ord)
WHERE NOT EXISTS (SELECT 1 FROM outbox l WHERE l.notification_id = o.notification_id AND l.fallback_step > 1)
  AND ($3::text = 'SKIPPED' OR NOT ` + qFirstStepEndedOtherwise + `)
ORDER BY o.notification_id, p.ord
ON CONFLICT (notification_id, channel) DO NOTHING`
	// qFallbackWritten clears the plan on the first steps' rows of the
	// lazy chains $1 whose later steps now have rows: a claim of such a row
	// reads Fence.LazyChain false, and an end settled under an earlier
	// claim's (qDeliveryRecordLazy) no longer takes.
	qFallbackWritten = `UPDATE outbox SET fallback_plan = NULL
WHERE notification_id = ANY ($1::text[]) AND fallback_step = 1 AND fallback_plan IS NOT NULL
  AND EXISTS (SELECT 1 FROM outbox l WHERE l.notification_id = outbox.notification_id AND l.fallback_step > 1)`
)

// qFallbackClose is the CTE of a statement that moves an ended delivery
// (a report's, a receipt's): when the delivery is a first step's send of
// a lazy chain still unwritten, and its end ended the chain (not a
// definite failure), the later steps are written SKIPPED, not needed,
// after that end, as its end would have left an eager chain's, so that the
// move (to a failure, say) does not reopen the chain as the read API shows
// it. The host's cur reads the delivery as it was (notification_id,
// channel, state, reason), and u is its move (nothing when the move did
// not take). $1 is now. The first step's rows keep their plan, read only
// while no later row exists (as after qFallbackMove).
const qFallbackClose = `,
fc AS (
    INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, last_reason, available_at, expires_at,
                        created_at, updated_at, fallback_step, fallback_after, scope)
    SELECT o.notification_id, o.notification_id || '.' || p.channel, o.tenant, o.lane, p.channel, 'SKIPPED', 'FALLBACK_NOT_NEEDED',
           greatest(n.created_at, n.send_at), n.expires_at, n.created_at, coalesce($1::timestamptz, clock_timestamp()), p.ord + 1,
           CASE WHEN cur.state = 'SUPPRESSED' AND cur.reason <> '' THEN cur.reason ELSE cur.state END, o.scope
    FROM cur CROSS JOIN LATERAL (SELECT * FROM outbox o WHERE o.notification_id = cur.notification_id AND o.channel = cur.channel LIMIT 1) o
    CROSS JOIN LATERAL (SELECT * FROM notifications n WHERE n.id = o.notification_id LIMIT 1) n
    CROSS JOIN LATERAL unnest(o.fallback_plan) WITH ORDINALITY AS p (channel, ord)
    WHERE EXISTS (SELECT 1 FROM u) AND o.fallback_step = 1 AND o.fallback_plan IS NOT NULL
      AND (cur.state IN ('PROVIDER_ACCEPTED', 'DELIVERED', 'UNKNOWN', 'STORED')
           OR (cur.state = 'SUPPRESSED' AND cur.reason NOT IN ('DESTINATION_UNAVAILABLE', 'CONSENT_DENIED')))
      AND NOT EXISTS (SELECT 1 FROM outbox l WHERE l.notification_id = o.notification_id AND l.fallback_step > 1)
    ORDER BY p.ord
    ON CONFLICT (notification_id, channel) DO NOTHING
)
`

// materialize writes, in tx, the later steps of the lazy chains of the
// notifications nids that have none yet and are still open, WAITING,
// having first locked their first steps' rows (qFallbackLockPlanned), and
// clears the plans of the chains that now have their rows.
func (s *Store) materialize(ctx context.Context, tx pgx.Tx, nids []string) error {
	if _, err := tx.Exec(ctx, qFallbackLockPlanned, nids); err != nil {
		return fmt.Errorf("lock lazy fallback chains: %w", err)
	}
	return s.writeSteps(ctx, tx, nids, heraldtype.OutboxWaiting, nil)
}

// writeSteps runs qFallbackMaterialize and qFallbackWritten.
func (s *Store) writeSteps(ctx context.Context, tx pgx.Tx, nids []string, state heraldtype.OutboxState, after *string) error {
	if _, err := tx.Exec(ctx, qFallbackMaterialize, s.now(), nids, string(state), after); err != nil {
		return fmt.Errorf("write lazy fallback steps: %w", err)
	}
	if _, err := tx.Exec(ctx, qFallbackWritten, nids); err != nil {
		return fmt.Errorf("clear lazy fallback plans: %w", err)
	}
	return nil
}

// materializeStep is for a decision about to name a later step of
// notification nid's lazy chain that has no row yet, as the read API
// showed it (a cancel's): in a transaction of its own, it writes the
// chain's later steps as the read API shows them (store.WithPlannedSteps),
// WAITING while the chain is open, else SKIPPED after the end that ended
// it (fallback.Decide on the first step's sends, read after the lock).
func (s *Store) materializeStep(ctx context.Context, nid string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		nids := []string{nid}
		if _, err := tx.Exec(ctx, qFallbackLockPlanned, nids); err != nil {
			return fmt.Errorf("lock lazy fallback chain: %w", err)
		}
		var sends []fallback.Send
		if err := readChains(ctx, tx, nids, func(_, _ string, _ int64, x fallback.Send) { sends = append(sends, x) }); err != nil {
			return err
		}
		state, after := heraldtype.OutboxWaiting, (*string)(nil)
		if d := fallback.Decide(append(sends, fallback.Send{Step: 2, Outbox: heraldtype.OutboxWaiting})); d.Verdict == fallback.Skip {
			state, after = heraldtype.OutboxSkipped, &d.After
		}
		return s.writeSteps(ctx, tx, nids, state, after)
	})
}

// readChains reads the chains nids as fallback.Decide takes them
// (qFallbackChains), calling each with every row's notification, message
// id and token.
func readChains(ctx context.Context, tx pgx.Tx, nids []string, each func(nid, mid string, token int64, x fallback.Send)) error {
	rows, err := tx.Query(ctx, qFallbackChains, nids)
	if err != nil {
		return fmt.Errorf("read chains: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			nid, mid, ostate, dstate string
			token                    int64
			step                     int32
			x                        fallback.Send
		)
		if err := rows.Scan(&nid, &mid, &token, &step, &ostate, &dstate, &x.Reason); err != nil {
			return fmt.Errorf("read chains: %w", err)
		}
		x.Step, x.Outbox, x.Delivery = int(step), heraldtype.OutboxState(ostate), heraldtype.DeliveryState(dstate)
		each(nid, mid, token, x)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read chains: %w", err)
	}
	return nil
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
		err := readChains(ctx, tx, nids, func(nid, mid string, token int64, x fallback.Send) {
			chains[nid] = append(chains[nid], x)
			byMessage[mid] = row{token: token, send: x}
		})
		if err != nil {
			return err
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
