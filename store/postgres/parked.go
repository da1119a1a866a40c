package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Parked deliveries: the operator's list and requeue. Kept apart from
// queries.go so it can change without touching the hot paths.
const (
	// $1 tenant ('' for every tenant), $2 limit.
	qParkedList = `SELECT d.message_id, d.notification_id, d.tenant, coalesce(o.lane, ''), d.channel, d.reason, d.updated_at
FROM deliveries d LEFT JOIN outbox o ON o.notification_id = d.notification_id AND o.channel = d.channel
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
	// $4 limit, $5 outbox.
	qParkedRequeue = `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
sel AS (
    SELECT p.message_id, p.reason FROM deliveries p
    WHERE p.state = 'PARKED' AND ($2::text = '' OR p.tenant = $2::text) AND ($3::text = '' OR p.message_id = $3::text)
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
        token = o.token + 1, updated_at = t.now
    FROM t, d
    WHERE $5::boolean AND o.notification_id = d.notification_id AND o.channel = d.channel AND o.state = 'DONE'
    RETURNING o.message_id
)
SELECT d.message_id, d.notification_id, d.tenant, coalesce(x.lane, ''), d.channel, d.reason, d.now
FROM d LEFT JOIN outbox x ON x.notification_id = d.notification_id AND x.channel = d.channel`
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
	rows, err := s.pool.Query(ctx, qParkedRequeue, s.now(), p.Tenant, p.MessageID, p.LimitOrDefault(), p.Outbox)
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

func scanParked(rows pgx.Rows) ([]store.ParkedEntry, error) {
	defer rows.Close()
	var out []store.ParkedEntry
	for rows.Next() {
		var e store.ParkedEntry
		var lane, ch string
		var at time.Time
		if err := rows.Scan(&e.MessageID, &e.NotificationID, &e.Tenant, &lane, &ch, &e.Reason, &at); err != nil {
			return nil, err
		}
		e.Lane, e.Channel, e.ParkedAt = heraldtype.Lane(lane), heraldtype.Channel(ch), at.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}
