package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Parked deliveries: the operator's list, requeue, restore and discard.
// Kept apart from queries.go so it can change without touching the hot
// paths.
const (
	// $1 tenant ('' for every tenant), $2 limit.
	qParkedList = `SELECT d.message_id, d.notification_id, d.tenant, coalesce(n.kind, ''), coalesce(o.lane, ''), d.channel, d.reason, d.updated_at
FROM deliveries d LEFT JOIN outbox o ON o.notification_id = d.notification_id AND o.channel = d.channel
LEFT JOIN notifications n ON n.id = d.notification_id
WHERE d.state = 'PARKED' AND ($1::text = '' OR d.tenant = $1::text)
ORDER BY d.updated_at, d.message_id
LIMIT $2::integer`

	// qParkedRequeue, one autocommitted statement:
	//
	//   sel  locks the PARKED rows chosen (SKIP LOCKED: a concurrent requeue
	//        takes others); with $5 only those whose outbox row is DONE.
	//   d    turns them into RETRY_WAIT due now (reason REQUEUED), which the
	//        sender's claim takes like any due retry.
	//   o    with $5 (db transport) returns their outbox rows to PENDING, due
	//        now, with a fresh token, so a claimer offers them again.
	//
	// $1 now, $2 tenant ('' for every tenant), $3 message id ('' for all),
	// $4 limit, $5 outbox, $6 parked before (NULL: no bound). sel walks
	// deliveries_parked (0018) in order and stops at the limit.
	qParkedRequeue = `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
sel AS (
    SELECT p.message_id, p.reason FROM deliveries p
    WHERE p.state = 'PARKED' AND ($2::text = '' OR p.tenant = $2::text) AND ($3::text = '' OR p.message_id = $3::text)
      AND ($6::timestamptz IS NULL OR p.updated_at < $6::timestamptz)
      AND (NOT $5::boolean OR EXISTS (SELECT 1 FROM outbox x WHERE x.notification_id = p.notification_id AND x.channel = p.channel AND x.state = 'DONE'))
    ORDER BY p.updated_at, p.message_id
    LIMIT $4::integer
    FOR UPDATE SKIP LOCKED
),
d AS (
    UPDATE deliveries d
    SET state = 'RETRY_WAIT', reason = 'REQUEUED', next_attempt_at = t.now, claimed_by = NULL, updated_at = t.now
    FROM t, sel
    WHERE d.message_id = sel.message_id AND d.state = 'PARKED'
    RETURNING d.message_id, d.notification_id, d.tenant, d.channel, sel.reason, t.now
),
o AS (
    UPDATE outbox o
    SET state = 'PENDING', available_at = t.now, last_reason = 'REQUEUED', claimed_by = NULL, claimed_until = NULL,
        token = o.token + 1, updated_at = t.now, deferred = false
    FROM t, d
    WHERE $5::boolean AND o.notification_id = d.notification_id AND o.channel = d.channel AND o.state = 'DONE'
    RETURNING o.message_id
)
SELECT d.message_id, d.notification_id, d.tenant, coalesce(n.kind, ''), coalesce(x.lane, ''), d.channel, d.reason, d.now
FROM d LEFT JOIN outbox x ON x.notification_id = d.notification_id AND x.channel = d.channel
LEFT JOIN notifications n ON n.id = d.notification_id`

	// $1 now, $2 message id, $3 reason.
	qParkedRestore = `UPDATE deliveries
SET state = 'PARKED', reason = $3::text, next_attempt_at = NULL, updated_at = coalesce($1::timestamptz, now())
WHERE message_id = $2::text AND state = 'RETRY_WAIT' AND reason = 'REQUEUED'`

	// qParkedDiscard, a db-transport discard in one statement:
	//
	//   sel  locks the PARKED delivery of the message (of the tenant, or
	//        any when $3 is ''); a requeue or claim that changed it first
	//        leaves nothing to lock.
	//   d    the guarded write: SUPPRESSED(DISCARDED), only while PARKED.
	//   o    its outbox row, if PENDING (no one holds it), ends DONE.
	//   u    the end of a fallback chain's send: its later steps are
	//        skipped (qFallbackMove).
	//   the audit row, with the delivery's tenant and parked reason.
	//
	// $1 now, $2 message id, $3 tenant, $4 actor, $5 reason. Inserts one
	// audit row, or none when nothing was PARKED.
	qParkedDiscard = `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
sel AS (
    SELECT p.message_id, p.tenant, p.reason FROM deliveries p
    WHERE p.message_id = $2::text AND p.state = 'PARKED' AND ($3::text = '' OR p.tenant = $3::text)
    FOR UPDATE
),
d AS (
    UPDATE deliveries d
    SET state = 'SUPPRESSED', reason = 'DISCARDED', next_attempt_at = NULL, claimed_by = NULL, updated_at = t.now
    FROM t, sel
    WHERE d.message_id = sel.message_id AND d.state = 'PARKED'
    RETURNING d.message_id, d.notification_id, d.channel, sel.tenant, sel.reason, t.now
),
o AS (
    UPDATE outbox o SET state = 'DONE', last_reason = 'DISCARDED', updated_at = d.now
    FROM d
    WHERE o.notification_id = d.notification_id AND o.channel = d.channel AND o.state = 'PENDING'
),
u AS (SELECT notification_id, channel, 'SUPPRESSED'::text AS state, 'DISCARDED'::text AS reason FROM d)` + qFallbackMove + `
INSERT INTO parked_discards (discarded_at, actor, message_id, tenant, parked_reason, reason)
SELECT d.now, $4::text, d.message_id, d.tenant, d.reason, $5::text FROM d
RETURNING tenant`

	// qParkedDiscardCopy, a broker copy's discard in one statement: the
	// sender's decision write (no row yet, or a waiting one) with
	// SUPPRESSED(DISCARDED) when the copy names a notification ($3 not
	// ''), and the audit row in any case. It returns 1 when the decision
	// was written, 0 when not.
	//
	// $1 now, $2 message id, $3 notification id, $4 tenant, $5 channel,
	// $6 actor, $7 parked reason, $8 reason.
	qParkedDiscardCopy = `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
decide AS (
    INSERT INTO deliveries AS d (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at)
    SELECT $2::text, $3::text, $4::text, $5::text, 'SUPPRESSED', 'DISCARDED', t.now, t.now FROM t WHERE $3::text <> ''
    ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO UPDATE
    SET state = excluded.state, reason = excluded.reason, next_attempt_at = NULL, updated_at = excluded.updated_at
    WHERE d.state IN ('RETRY_WAIT', 'PARKED')
    RETURNING d.notification_id, d.channel, d.state, d.reason
),
u AS (SELECT * FROM decide)` + qFallbackMove + `,
audit AS (
    INSERT INTO parked_discards (discarded_at, actor, message_id, tenant, parked_reason, reason)
    SELECT t.now, $6::text, $2::text, $4::text, $7::text, $8::text FROM t
)
SELECT count(*)::integer FROM decide`

	// $1 tenant ('' for every tenant), $2 message id ('' for all), $3 limit.
	qParkedDiscardList = `SELECT id, discarded_at, actor, message_id, tenant, parked_reason, reason FROM parked_discards
WHERE ($1::text = '' OR tenant = $1::text) AND ($2::text = '' OR message_id = $2::text)
ORDER BY id
LIMIT $3::integer`
)

// ParkedList returns PARKED deliveries, oldest first.
func (s *Store) ParkedList(ctx context.Context, p store.ParkedListParams) ([]store.ParkedEntry, error) {
	rows, err := s.pool.Query(ctx, qParkedList, p.Tenant, p.LimitOrDefault())
	if err != nil {
		return nil, s.fail("list parked deliveries", err)
	}
	out, err := scanParked(rows)
	if err != nil {
		return nil, s.fail("list parked deliveries", err)
	}
	return out, nil
}

// ParkedRequeue makes PARKED deliveries claimable again (and, for the db
// transport, their outbox rows due again) in one statement.
func (s *Store) ParkedRequeue(ctx context.Context, p store.ParkedRequeueParams) ([]store.ParkedEntry, error) {
	var before *time.Time
	if !p.ParkedBefore.IsZero() {
		before = &p.ParkedBefore
	}
	rows, err := s.pool.Query(ctx, qParkedRequeue, s.now(), p.Tenant, p.MessageID, p.LimitOrDefault(), p.Outbox, before)
	if err != nil {
		return nil, s.fail("requeue parked deliveries", err)
	}
	out, err := scanParked(rows)
	if err != nil {
		return nil, s.fail("requeue parked deliveries", err)
	}
	if p.Outbox {
		woken := map[heraldtype.Lane]bool{}
		for _, e := range out {
			if !woken[e.Lane] {
				woken[e.Lane] = true
				s.wakeups.Notify(e.Lane)
			}
		}
	}
	return out, nil
}

// ParkedRestore parks a requeued delivery again if it is still waiting for
// the requeue's copy.
func (s *Store) ParkedRestore(ctx context.Context, p store.ParkedRestoreParams) (bool, error) {
	tag, err := s.pool.Exec(ctx, qParkedRestore, s.now(), p.MessageID, p.Reason)
	if err != nil {
		return false, s.fail("restore parked delivery "+p.MessageID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ParkedDiscard discards a parked message and writes its audit row, in one
// statement.
func (s *Store) ParkedDiscard(ctx context.Context, p store.ParkedDiscardParams) (store.ParkedDiscarded, error) {
	if p.Broker {
		var n int
		err := s.pool.QueryRow(ctx, qParkedDiscardCopy,
			s.now(), p.MessageID, p.NotificationID, p.Tenant, string(p.Channel), p.Actor, p.ParkedReason, p.Reason).Scan(&n)
		if err != nil {
			return store.ParkedDiscarded{}, s.fail("discard parked message "+p.MessageID, err)
		}
		return store.ParkedDiscarded{Discarded: n == 1, Tenant: p.Tenant}, nil
	}
	var tenant string
	err := s.pool.QueryRow(ctx, qParkedDiscard, s.now(), p.MessageID, p.Tenant, p.Actor, p.Reason).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ParkedDiscarded{}, nil // not parked: nothing to discard
	}
	if err != nil {
		return store.ParkedDiscarded{}, s.fail("discard parked message "+p.MessageID, err)
	}
	return store.ParkedDiscarded{Discarded: true, Tenant: tenant}, nil
}

// ParkedDiscardList returns discard audit rows, oldest first.
func (s *Store) ParkedDiscardList(ctx context.Context, p store.ParkedDiscardListParams) ([]store.ParkedDiscardEntry, error) {
	rows, err := s.pool.Query(ctx, qParkedDiscardList, p.Tenant, p.MessageID, p.LimitOrDefault())
	if err != nil {
		return nil, s.fail("list parked discards", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ParkedDiscardEntry, error) {
		var e store.ParkedDiscardEntry
		err := row.Scan(&e.ID, &e.DiscardedAt, &e.Actor, &e.MessageID, &e.Tenant, &e.ParkedReason, &e.Reason)
		e.DiscardedAt = e.DiscardedAt.UTC()
		return e, err
	})
	if err != nil {
		return nil, s.fail("list parked discards", err)
	}
	return out, nil
}

func scanParked(rows pgx.Rows) ([]store.ParkedEntry, error) {
	defer rows.Close()
	var out []store.ParkedEntry
	for rows.Next() {
		var e store.ParkedEntry
		var lane, ch string
		var at time.Time
		if err := rows.Scan(&e.MessageID, &e.NotificationID, &e.Tenant, &e.Kind, &lane, &ch, &e.Reason, &at); err != nil {
			return nil, err
		}
		e.Lane, e.Channel, e.ParkedAt = heraldtype.Lane(lane), heraldtype.Channel(ch), at.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}
