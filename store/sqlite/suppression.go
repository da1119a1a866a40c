package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldhq/herald/store"
)

// Event keys (store.EventKeys, package suppression). A take reads the key
// and writes it in one writer transaction, which holds the file's write
// lock, so no other take reads the key in between; the rule is decided
// here in Go: a new key (nearly every take) costs one insert, the rest a
// read and at most one write after it. Every statement finds the key by
// its primary key; a takeover
// reads the old owner's sends through outbox_notification and the
// deliveries' primary key.
//
// ?1..?5 are the key (tenant, recipient, event_id, kind, channel) in every
// statement that names one; ?6 the owner, ?7 now, ?8 the lease in
// milliseconds.
const (
	qEventKeyGet = `SELECT owner, lease_until FROM event_keys
WHERE tenant = ?1 AND recipient = ?2 AND event_id = ?3 AND kind = ?4 AND channel = ?5`
	// qEventKeyInsert takes a new key: nearly every take, one statement.
	qEventKeyInsert = `INSERT INTO event_keys (tenant, recipient, event_id, kind, channel, owner, lease_until, taken_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7 + ?8, ?7)
ON CONFLICT (tenant, recipient, event_id, kind, channel) DO NOTHING`
	// qEventKeyExtend never shortens the owner's lease.
	qEventKeyExtend = `UPDATE event_keys SET lease_until = max(lease_until, ?7 + ?8)
WHERE tenant = ?1 AND recipient = ?2 AND event_id = ?3 AND kind = ?4 AND channel = ?5 AND owner = ?6
RETURNING lease_until`
	// qEventKeyTakeOver hands the key to ?6; taken_from is the owner
	// before it (SET reads the row as it was).
	qEventKeyTakeOver = `UPDATE event_keys SET owner = ?6, lease_until = ?7 + ?8, taken_at = ?7, taken_from = owner
WHERE tenant = ?1 AND recipient = ?2 AND event_id = ?3 AND kind = ?4 AND channel = ?5`
	// qEventKeyOwnerSends lists a notification's sends that have a
	// delivery row: each planned send's channel and state.
	qEventKeyOwnerSends = `SELECT o.channel, d.state FROM outbox o JOIN deliveries d ON d.message_id = o.message_id
WHERE o.notification_id = ?1`
	// qEventKeyPurge deletes up to ?2 keys whose lease ended before ?1,
	// oldest first (event_keys_lease).
	qEventKeyPurge = `DELETE FROM event_keys WHERE (tenant, recipient, event_id, kind, channel) IN (
    SELECT tenant, recipient, event_id, kind, channel FROM event_keys WHERE lease_until < ?1 ORDER BY lease_until LIMIT ?2)`
	qEventKeysTakenOver = `SELECT count(*) FROM event_keys WHERE taken_from IS NOT NULL AND taken_at >= ?1`
)

// eventKeyQueries are the writer's to cache with the rest of
// writeQueries: a take runs before every send.
var eventKeyQueries = []string{qEventKeyGet, qEventKeyInsert, qEventKeyExtend, qEventKeyTakeOver, qEventKeyOwnerSends}

func init() { writeQueries = append(writeQueries, eventKeyQueries...) }

// EventKeyTake decides whether p.Owner may send under p.Key and records it.
func (s *Store) EventKeyTake(ctx context.Context, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error) {
	var res store.EventKeyTakeResult
	err := s.w.do(ctx, func(tx wtx) (err error) {
		res, err = takeEventKey(tx, s.now(), p)
		return err
	})
	if err != nil {
		return store.EventKeyTakeResult{}, fmt.Errorf("take event key: %w", err)
	}
	return res, nil
}

// takeEventKey is a take in the writer's transaction tx at now: the
// EventKeyTake's and DeliveryClaim's with an event key.
func takeEventKey(tx wtx, now int64, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error) {
	k, lease := p.Key, p.Lease.Milliseconds()
	args := []any{k.Tenant, k.Recipient, k.EventID, k.Kind, string(k.Channel), p.Owner, now, lease}
	r, err := tx.Exec(qEventKeyInsert, args...)
	if err != nil {
		return store.EventKeyTakeResult{}, err
	}
	switch n, err := r.RowsAffected(); {
	case err != nil:
		return store.EventKeyTakeResult{}, err
	case n == 1:
		return store.EventKeyTakeResult{Outcome: store.EventKeyTaken, Owner: p.Owner, LeaseUntil: fromMs(now + lease)}, nil
	}
	var owner string
	var until int64
	if err := tx.QueryRow(qEventKeyGet, args[:5]...).Scan(&owner, &until); err != nil {
		return store.EventKeyTakeResult{}, err
	}
	if owner == p.Owner {
		if err := tx.QueryRow(qEventKeyExtend, args...).Scan(&until); err != nil {
			return store.EventKeyTakeResult{}, err
		}
		return store.EventKeyTakeResult{Outcome: store.EventKeyOwned, Owner: p.Owner, LeaseUntil: fromMs(until)}, nil
	}
	held := until > now
	if !held {
		if held, err = ownerHolds(tx, owner, k); err != nil {
			return store.EventKeyTakeResult{}, err
		}
	}
	if held {
		return store.EventKeyTakeResult{Outcome: store.EventKeyHeld, Owner: owner, LeaseUntil: fromMs(until)}, nil
	}
	if _, err := tx.Exec(qEventKeyTakeOver, args...); err != nil {
		return store.EventKeyTakeResult{}, err
	}
	return store.EventKeyTakeResult{Outcome: store.EventKeyTakenOver, Owner: p.Owner, Previous: owner, LeaseUntil: fromMs(now + lease)}, nil
}

// ownerHolds reports whether one of owner's sends under k holds the key.
func ownerHolds(tx wtx, owner string, k store.EventKey) (bool, error) {
	rows, err := tx.Query(qEventKeyOwnerSends, owner)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	return store.EventKeyHeldBy(k, rows)
}

// EventKeyPurge deletes up to p.Limit keys whose lease ended more than
// p.Keep ago.
func (s *Store) EventKeyPurge(ctx context.Context, p store.EventKeyPurgeParams) (int, error) {
	var n int64
	err := s.w.do(ctx, func(tx wtx) error {
		r, err := tx.Exec(qEventKeyPurge, s.now()-p.Keep.Milliseconds(), p.Limit)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purge event keys: %w", err)
	}
	return int(n), nil
}

// EventKeysTakenOver counts the keys last taken over at since or later.
func (s *Store) EventKeysTakenOver(ctx context.Context, since time.Time) (int, error) {
	var n int
	if err := s.queryRow(ctx, qEventKeysTakenOver, ms(since)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count event keys taken over: %w", err)
	}
	return n, nil
}
