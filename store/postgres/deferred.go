package postgres

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// qOutboxDefer puts a publication's row back to PENDING (store.Deferrals),
// conditional on the row being PUBLISHED with the publication's token,
// and reads the row as it was when it does not: the outer SELECT sees the
// statement's snapshot, which is enough, since only a row it saw PUBLISHED
// can be moved. Like the fenced writes, the state is written as an
// expression so that only the primary key drives it, never the partial
// index of PUBLISHED rows.
//
// $1 now, $2 delay, $3 reason, $4 notification id, $5 channel, $6 token.
const qOutboxDefer = `WITH d AS (
    UPDATE outbox
    SET state = 'PENDING', available_at = coalesce($1::timestamptz, clock_timestamp()) + $2::interval, last_reason = $3::text,
        claimed_by = NULL, claimed_until = NULL, updated_at = coalesce($1::timestamptz, clock_timestamp()),
        deferred = $2::interval > ` + qDeferHorizon + `
    WHERE notification_id = $4::text AND channel = $5::text AND token = $6::bigint AND state || '' = 'PUBLISHED'
    RETURNING lane
)
SELECT (SELECT lane FROM d), o.state, o.token
FROM (SELECT 1) AS one LEFT JOIN outbox o ON o.notification_id = $4::text AND o.channel = $5::text`

// qOutboxAwaitHold waits for the transaction that holds a row locked (a
// relay's held claim, store.OutboxHolder) to end, taking and at once
// giving up a share lock. $1 notification id, $2 channel.
const qOutboxAwaitHold = `SELECT 1 FROM outbox WHERE notification_id = $1::text AND channel = $2::text FOR SHARE`

var _ store.Deferrals = (*Store)(nil)

// OutboxDefer moves a published row back to PENDING for a deferral (see
// store.Deferrals).
//
// A row found with an older token than the publication's is held by the
// relay's claim that published it (hold.go), not committed yet: its copy
// reached the consumer before the confirm did. Every other transaction
// still sees the row PENDING, which would read as superseded, and the copy
// would be dropped while the claim commits the row PUBLISHED: so the put
// back waits for that claim to end and looks again. A claim that rolled
// back leaves the row PENDING with the older token, for the next claim to
// publish: the copy is then superseded indeed.
func (s *Store) OutboxDefer(ctx context.Context, p store.OutboxDeferParams) (store.OutboxDeferResult, error) {
	res, err := s.outboxDefer(ctx, p)
	if err != nil || res.Deferred || res.State == "" || res.Token >= p.Fence.Token {
		return res, err
	}
	if _, err := s.pool.Exec(ctx, qOutboxAwaitHold, p.Fence.NotificationID, string(p.Fence.Channel)); err != nil {
		return store.OutboxDeferResult{}, s.fail(fmt.Sprintf("wait for the claim of outbox row %d", p.Fence.ID), err)
	}
	return s.outboxDefer(ctx, p)
}

func (s *Store) outboxDefer(ctx context.Context, p store.OutboxDeferParams) (store.OutboxDeferResult, error) {
	var lane, state *string
	var token *int64
	err := s.pipe.QueryRow(ctx, qOutboxDefer, s.now(), p.Delay, p.Reason, p.Fence.NotificationID, string(p.Fence.Channel), p.Fence.Token).
		Scan(&lane, &state, &token)
	if err != nil {
		return store.OutboxDeferResult{}, s.fail(fmt.Sprintf("defer outbox row %d", p.Fence.ID), err)
	}
	if lane != nil {
		if p.Delay <= 0 {
			s.wakeups.Notify(heraldtype.Lane(*lane))
		}
		return store.OutboxDeferResult{Deferred: true}, nil
	}
	var res store.OutboxDeferResult
	if state != nil {
		res.State, res.Token = heraldtype.OutboxState(*state), *token
	}
	return res, nil
}
