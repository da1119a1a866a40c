package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/store"
)

// Event keys (store.EventKeys, package suppression). A take is one
// conditional upsert on the pipeline when the key is new or the caller's
// own: the two cases of nearly every send. Only a key held by another
// notification costs a transaction that locks the row, reads the owner's
// sends and takes the key over or leaves it (the rule in Go, as SQLite
// decides it); concurrent takes of one key queue on the row's lock, and
// the upsert's ON CONFLICT arbitrates two first takes.
//
// $2..$6 are the key (tenant, recipient, event_id, kind, channel) in every
// statement that names one; $1 now, $7 the owner, $8 the lease.
const (
	// qEventKeyTake takes a new key, or extends the owner's own lease
	// (never shortening it); on another's key it returns no row. taken is
	// whether the row was inserted: a row version this statement inserted
	// has no xmax, one it updated carries the updating transaction's.
	qEventKeyTake = `WITH t AS (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now)
` + qEventKeyUpsert
	// qEventKeyUpsert is qEventKeyTake's write, at the time t.now of its
	// statement's CTE t; qDeliveryClaimTake runs it too.
	qEventKeyUpsert = `INSERT INTO event_keys AS k (tenant, recipient, event_id, kind, channel, owner, lease_until, taken_at)
SELECT $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, t.now + $8::interval, t.now FROM t
ON CONFLICT (tenant, recipient, event_id, kind, channel) DO UPDATE SET lease_until = greatest(k.lease_until, excluded.lease_until)
WHERE k.owner = excluded.owner
RETURNING k.xmax = 0 AS taken, k.lease_until`
	// qEventKeyLock locks another's key and reads its owner and lease
	// with the time the decision is made at.
	qEventKeyLock = `SELECT owner, lease_until, coalesce($1::timestamptz, clock_timestamp()) FROM event_keys
WHERE tenant = $2::text AND recipient = $3::text AND event_id = $4::text AND kind = $5::text AND channel = $6::text
FOR UPDATE`
	// qEventKeyOwnerSends lists a notification's sends that have a
	// delivery row: each planned send's channel and state.
	qEventKeyOwnerSends = `SELECT o.channel, d.state FROM outbox o JOIN deliveries d ON d.message_id = o.message_id
WHERE o.notification_id = $1::text`
	// qEventKeyTakeOver hands the locked key to $7; taken_from is the
	// owner before it (SET reads the row as it was).
	qEventKeyTakeOver = `UPDATE event_keys SET owner = $7::text, lease_until = $1::timestamptz + $8::interval, taken_at = $1::timestamptz,
    taken_from = owner
WHERE tenant = $2::text AND recipient = $3::text AND event_id = $4::text AND kind = $5::text AND channel = $6::text
RETURNING lease_until`
	// qEventKeyPurge deletes up to $3 keys whose lease ended more than $2
	// before now, oldest first (event_keys_lease); a key a take extended
	// meanwhile is left (the DELETE checks the row it locks again).
	qEventKeyPurge = `WITH t AS (SELECT coalesce($1::timestamptz, clock_timestamp()) - $2::interval AS cutoff)
DELETE FROM event_keys k USING t, (
    SELECT tenant, recipient, event_id, kind, channel FROM event_keys, t
    WHERE lease_until < t.cutoff ORDER BY lease_until LIMIT $3::integer
) old
WHERE k.tenant = old.tenant AND k.recipient = old.recipient AND k.event_id = old.event_id AND k.kind = old.kind
    AND k.channel = old.channel AND k.lease_until < t.cutoff`
	qEventKeysTakenOver = `SELECT count(*) FROM event_keys WHERE taken_from IS NOT NULL AND taken_at >= $1::timestamptz`
)

// eventKeyTries bounds the rounds of a take: a round starts again only
// when the key changed hands between its upsert and its lock (purged, or
// taken over by another copy of the caller's own notification), each a
// move the next round's upsert settles.
const eventKeyTries = 3

// EventKeyTake decides whether p.Owner may send under p.Key and records it.
func (s *Store) EventKeyTake(ctx context.Context, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error) {
	k := p.Key
	args := []any{s.now(), k.Tenant, k.Recipient, k.EventID, k.Kind, string(k.Channel), p.Owner, p.Lease}
	for range eventKeyTries {
		var taken bool
		var until time.Time
		err := s.pipe.QueryRow(ctx, qEventKeyTake, args...).Scan(&taken, &until)
		switch {
		case err == nil && taken:
			return store.EventKeyTakeResult{Outcome: store.EventKeyTaken, Owner: p.Owner, LeaseUntil: utc(until)}, nil
		case err == nil:
			return store.EventKeyTakeResult{Outcome: store.EventKeyOwned, Owner: p.Owner, LeaseUntil: utc(until)}, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return store.EventKeyTakeResult{}, s.fail("take event key", err)
		}
		res, again, err := s.eventKeyContest(ctx, p, args)
		if err != nil || !again {
			return res, err
		}
	}
	return store.EventKeyTakeResult{}, fmt.Errorf("take event key: it changed hands %d times", eventKeyTries)
}

// eventKeyContest decides a take of a key another notification held at
// the upsert, with the row locked: again when the next round's upsert
// decides instead.
func (s *Store) eventKeyContest(ctx context.Context, p store.EventKeyTakeParams, args []any) (store.EventKeyTakeResult, bool, error) {
	var res store.EventKeyTakeResult
	again := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var owner string
		var until, now time.Time
		err := tx.QueryRow(ctx, qEventKeyLock, args[:6]...).Scan(&owner, &until, &now)
		switch {
		case errors.Is(err, pgx.ErrNoRows), err == nil && owner == p.Owner:
			again = true
			return nil
		case err != nil:
			return err
		}
		held := until.After(now)
		if !held {
			if held, err = eventKeyOwnerHolds(ctx, tx, owner, p.Key); err != nil {
				return err
			}
		}
		if held {
			res = store.EventKeyTakeResult{Outcome: store.EventKeyHeld, Owner: owner, LeaseUntil: utc(until)}
			return nil
		}
		takeover := append([]any{now}, args[1:]...)
		if err := tx.QueryRow(ctx, qEventKeyTakeOver, takeover...).Scan(&until); err != nil {
			return err
		}
		res = store.EventKeyTakeResult{Outcome: store.EventKeyTakenOver, Owner: p.Owner, Previous: owner, LeaseUntil: utc(until)}
		return nil
	})
	if err != nil {
		return store.EventKeyTakeResult{}, false, s.fail("take event key held by another notification", err)
	}
	return res, again, nil
}

// eventKeyOwnerHolds reports whether one of owner's sends under k holds
// the key.
func eventKeyOwnerHolds(ctx context.Context, tx pgx.Tx, owner string, k store.EventKey) (bool, error) {
	rows, err := tx.Query(ctx, qEventKeyOwnerSends, owner)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	return store.EventKeyHeldBy(k, rows)
}

// EventKeyPurge deletes up to p.Limit keys whose lease ended more than
// p.Keep ago.
func (s *Store) EventKeyPurge(ctx context.Context, p store.EventKeyPurgeParams) (int, error) {
	tag, err := s.pool.Exec(ctx, qEventKeyPurge, s.now(), p.Keep, p.Limit)
	if err != nil {
		return 0, s.fail("purge event keys", err)
	}
	return int(tag.RowsAffected()), nil
}

// EventKeysTakenOver counts the keys last taken over at since or later.
func (s *Store) EventKeysTakenOver(ctx context.Context, since time.Time) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, qEventKeysTakenOver, since).Scan(&n); err != nil {
		return 0, s.fail("count event keys taken over", err)
	}
	return n, nil
}
