package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The watchdog's queries (store.Watchdog), kept apart from queries.go so
// they can change without touching the hot paths.
//
// Each find reads one page of its kind: the innermost SELECT walks the
// kind's partial index from the position after which the page starts ($3,
// $4) up to the cutoff (now minus the grace, $2) and stops after $5 rows
// (the cutoff is written out, not taken from a CTE, so it bounds the index
// scan); the middle one says which of them have no owner; the outer one
// marks the last row examined (where the next page starts), counts the
// rows examined and keeps only the rows without an owner and the last one.
// Every find returns the same columns. What the middle one looks up for each
// row of the page (its outbox row, its delivery) is a LATERAL subquery with
// LIMIT 1, so each is one probe of a unique index: a join or an EXISTS over
// the page could be planned as a hash of the whole other table.
//
// $1 now, $2 grace, $3 and $4 the position after which the page starts
// (deadline, message id), $5 limit.
const (
	qUnownedFindOuter = `SELECT message_id, at, tenant, lane, notification_id, channel, outbox_state, token, owned, last, examined FROM (
    SELECT p.*, row_number() OVER (ORDER BY p.at DESC, p.message_id DESC) = 1 AS last, count(*) OVER () AS examined
    FROM (`
	qUnownedFindEnd = `) p
) x WHERE NOT x.owned OR x.last
ORDER BY at, message_id`

	// A RETRY_WAIT delivery is owned while its outbox row will offer it
	// again (PENDING, CLAIMED, PUBLISHING) and for the grace after that
	// row's last write (a re-driven row's new copy).
	qUnownedFindRetryWait = qUnownedFindOuter + `
        SELECT d.message_id, d.at, d.tenant, coalesce(o.lane, '') AS lane, d.notification_id, d.channel,
               coalesce(o.state, '') AS outbox_state, coalesce(o.token, 0) AS token,
               (o.state IS NULL OR o.state IN ('PENDING', 'CLAIMED', 'PUBLISHING')
                OR o.updated_at >= coalesce($1::timestamptz, now()) - $2::interval) AS owned
        FROM (SELECT message_id, next_attempt_at AS at, tenant, notification_id, channel FROM deliveries
              WHERE state = 'RETRY_WAIT' AND next_attempt_at < coalesce($1::timestamptz, now()) - $2::interval
                AND next_attempt_at >= $3::timestamptz AND (next_attempt_at, message_id) > ($3::timestamptz, $4::text)
              ORDER BY next_attempt_at, message_id
              LIMIT $5::integer) d
        LEFT JOIN LATERAL (SELECT x.lane, x.state, x.token, x.updated_at FROM outbox x
                           WHERE x.notification_id = d.notification_id AND x.channel = d.channel LIMIT 1) o ON true` + qUnownedFindEnd
	qUnownedFindPublished = qUnownedFindOuter + `
        SELECT o.message_id, o.at, o.tenant, o.lane, o.notification_id, o.channel, o.state AS outbox_state, o.token,
               d.owned IS NOT NULL AS owned
        FROM (SELECT message_id, updated_at AS at, tenant, lane, notification_id, channel, state, token FROM outbox
              WHERE state = 'PUBLISHED' AND updated_at < coalesce($1::timestamptz, now()) - $2::interval
                AND updated_at >= $3::timestamptz AND (updated_at, message_id) > ($3::timestamptz, $4::text)
              ORDER BY updated_at, message_id
              LIMIT $5::integer) o
        LEFT JOIN LATERAL (SELECT true AS owned FROM deliveries x WHERE x.message_id = o.message_id LIMIT 1) d ON true` + qUnownedFindEnd
	qUnownedFindSending = qUnownedFindOuter + `
        SELECT d.message_id, d.at, d.tenant, coalesce(o.lane, '') AS lane, d.notification_id, d.channel,
               '' AS outbox_state, 0::bigint AS token, false AS owned
        FROM (SELECT message_id, claimed_at AS at, tenant, notification_id, channel FROM deliveries
              WHERE state = 'SENDING' AND claimed_at < coalesce($1::timestamptz, now()) - $2::interval
                AND claimed_at >= $3::timestamptz AND (claimed_at, message_id) > ($3::timestamptz, $4::text)
              ORDER BY claimed_at, message_id
              LIMIT $5::integer) d
        LEFT JOIN LATERAL (SELECT x.lane FROM outbox x
                           WHERE x.notification_id = d.notification_id AND x.channel = d.channel LIMIT 1) o ON true` + qUnownedFindEnd
	qUnownedFindLease = qUnownedFindOuter + `
        SELECT message_id, claimed_until AS at, tenant, lane, notification_id, channel, state AS outbox_state, token, false AS owned
        FROM outbox
        WHERE state IN ('CLAIMED', 'PUBLISHING') AND claimed_until < coalesce($1::timestamptz, now()) - $2::interval
          AND claimed_until >= $3::timestamptz AND (claimed_until, message_id) > ($3::timestamptz, $4::text)
        ORDER BY claimed_until, message_id
        LIMIT $5::integer` + qUnownedFindEnd

	// qUnownedRedriveOutbox puts each outbox row back to PENDING, due now,
	// with a fresh token, if it is still as found (state and token) and
	// still without an owner. It finds each row by the primary key only:
	// the state conditions compare with the row as found, which no partial
	// index can serve.
	//
	// $1 now; per row: $2 notification id, $3 channel, $4 token, $5 state,
	// $6 kind, $7 the delivery's next attempt time as found (retry_wait).
	qUnownedRedriveOutbox = `UPDATE outbox o
SET state = 'PENDING', available_at = coalesce($1::timestamptz, now()), last_reason = 'REDRIVEN', claimed_by = NULL,
    claimed_until = NULL, token = o.token + 1, updated_at = coalesce($1::timestamptz, now()), deferred = false
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::timestamptz[]) AS f(notification_id, channel, token, state, kind, at)
WHERE o.notification_id = f.notification_id AND o.channel = f.channel AND o.token = f.token AND o.state = f.state
  AND CASE f.kind
      WHEN 'retry_wait' THEN o.state NOT IN ('PENDING', 'CLAIMED', 'PUBLISHING')
          AND EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.message_id AND d.state = 'RETRY_WAIT' AND d.next_attempt_at = f.at)
      WHEN 'published' THEN o.state = 'PUBLISHED' AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = o.message_id)
      WHEN 'lease' THEN o.state IN ('CLAIMED', 'PUBLISHING') AND o.claimed_until < coalesce($1::timestamptz, now())
      ELSE false END
RETURNING o.notification_id, o.channel`
	// qUnownedRedriveSending is the stale sweep's write for the claims
	// found, each still SENDING since the claim time found. The state is
	// written as an expression so that the unique index on message_id, not
	// the partial index of SENDING rows, finds each row. As the sweep's
	// (qDeliverySweepStale), the UNKNOWN skips the rest of a fallback
	// chain (qFallbackMove; an UNKNOWN releases no step).
	//
	// $1 now; per claim: $2 message id, $3 claimed at.
	qUnownedRedriveSending = `WITH u AS (
    UPDATE deliveries d
    SET state = 'UNKNOWN', reason = 'STALE_CLAIM', claimed_by = NULL, updated_at = coalesce($1::timestamptz, now())
    FROM unnest($2::text[], $3::timestamptz[]) AS f(message_id, at)
    WHERE d.message_id = f.message_id AND d.state || '' = 'SENDING' AND d.claimed_at = f.at
    RETURNING d.message_id, d.notification_id, d.channel, d.state, d.reason
)` + qFallbackMove + `SELECT message_id FROM u`

	// $1 kind.
	qUnownedCheckpoint = `SELECT at, message_id FROM watchdog_checkpoints WHERE kind = $1::text`
	// $1 now, $2 kind, $3 and $4 the position.
	qUnownedCheckpointSave = `INSERT INTO watchdog_checkpoints (kind, at, message_id, updated_at)
VALUES ($2::text, $3::timestamptz, $4::text, coalesce($1::timestamptz, now()))
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

// UnownedFind reads one page of p.Kind in one statement.
func (s *Store) UnownedFind(ctx context.Context, p store.UnownedFindParams) (store.UnownedPage, error) {
	q, ok := unownedFind[p.Kind]
	if !ok {
		return store.UnownedPage{}, fmt.Errorf("find unowned rows: unknown kind %q", p.Kind)
	}
	what := fmt.Sprintf("find unowned %s rows", p.Kind)
	rows, err := s.pool.Query(ctx, q, s.now(), p.Grace, p.After.At, p.After.MessageID, p.LimitOrDefault())
	if err != nil {
		return store.UnownedPage{}, s.fail(what, err)
	}
	defer rows.Close()
	page := store.UnownedPage{Next: p.After}
	for rows.Next() {
		var (
			u               store.Unowned
			lane, ch, state string
			owned, last     bool
			examined        int64
		)
		if err := rows.Scan(&u.MessageID, &u.At, &u.Tenant, &lane, &u.NotificationID, &ch, &state, &u.Token,
			&owned, &last, &examined); err != nil {
			return store.UnownedPage{}, s.fail(what, err)
		}
		u.Kind, u.At = p.Kind, utc(u.At)
		u.Lane, u.Channel, u.OutboxState = heraldtype.Lane(lane), heraldtype.Channel(ch), heraldtype.OutboxState(state)
		page.Add(u, owned, last, int(examined))
	}
	if err := rows.Err(); err != nil {
		return store.UnownedPage{}, s.fail(what, err)
	}
	page.Done = page.Examined < p.LimitOrDefault()
	return page, nil
}

// UnownedRedrive moves each row on, conditional on it being as found: one
// statement for the outbox rows, one for the stale claims.
func (s *Store) UnownedRedrive(ctx context.Context, rows []store.Unowned) ([]store.Unowned, error) {
	var (
		nids, chs, states, kinds, claims []string
		tokens                           []int64
		ats, claimedAt                   []time.Time
	)
	var waiting []store.Unowned
	for _, u := range rows {
		if u.Kind == store.UnownedWaiting {
			waiting = append(waiting, u)
			continue
		}
		if u.Kind == store.UnownedSending {
			claims, claimedAt = append(claims, u.MessageID), append(claimedAt, u.At)
			continue
		}
		nids, chs, tokens = append(nids, u.NotificationID), append(chs, string(u.Channel)), append(tokens, u.Token)
		states, kinds, ats = append(states, string(u.OutboxState)), append(kinds, string(u.Kind)), append(ats, u.At)
	}
	type key struct{ a, b string }
	moved := map[key]bool{}
	if len(nids) > 0 {
		r, err := s.pool.Query(ctx, qUnownedRedriveOutbox, s.now(), nids, chs, tokens, states, kinds, ats)
		if err != nil {
			return nil, s.fail("re-drive unowned outbox rows", err)
		}
		keys, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (key, error) {
			var k key
			err := row.Scan(&k.a, &k.b)
			return k, err
		})
		if err != nil {
			return nil, s.fail("re-drive unowned outbox rows", err)
		}
		for _, k := range keys {
			moved[k] = true
		}
	}
	if len(claims) > 0 {
		r, err := s.pool.Query(ctx, qUnownedRedriveSending, s.now(), claims, claimedAt)
		if err != nil {
			return nil, s.fail("settle unswept stale claims", err)
		}
		ids, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			return nil, s.fail("settle unswept stale claims", err)
		}
		for _, id := range ids {
			moved[key{a: id}] = true
		}
	}
	repaired, err := s.fallbackRepair(ctx, waiting)
	if err != nil {
		return nil, err
	}
	for _, u := range repaired {
		moved[key{a: u.NotificationID, b: string(u.Channel)}] = true
	}
	var out []store.Unowned
	woken := map[heraldtype.Lane]bool{}
	for _, u := range rows {
		k := key{a: u.NotificationID, b: string(u.Channel)}
		if u.Kind == store.UnownedSending {
			k = key{a: u.MessageID}
		}
		if !moved[k] {
			continue
		}
		delete(moved, k) // a row given twice was moved once
		out = append(out, u)
		if u.Kind != store.UnownedSending && !woken[u.Lane] {
			woken[u.Lane] = true
			s.wakeups.Notify(u.Lane)
		}
	}
	return out, nil
}

// UnownedCheckpoint reads kind's saved position.
func (s *Store) UnownedCheckpoint(ctx context.Context, kind store.UnownedKind) (store.UnownedPosition, error) {
	var pos store.UnownedPosition
	err := s.pool.QueryRow(ctx, qUnownedCheckpoint, string(kind)).Scan(&pos.At, &pos.MessageID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.UnownedPosition{}, nil
	case err != nil:
		return store.UnownedPosition{}, s.fail(fmt.Sprintf("read the watchdog's %s checkpoint", kind), err)
	}
	pos.At = utc(pos.At)
	return pos, nil
}

// UnownedCheckpointSave saves kind's position.
func (s *Store) UnownedCheckpointSave(ctx context.Context, kind store.UnownedKind, pos store.UnownedPosition) error {
	if _, err := s.pool.Exec(ctx, qUnownedCheckpointSave, s.now(), string(kind), pos.At, pos.MessageID); err != nil {
		return s.fail(fmt.Sprintf("save the watchdog's %s checkpoint", kind), err)
	}
	return nil
}
