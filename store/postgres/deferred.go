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

var _ store.Deferrals = (*Store)(nil)

// OutboxDefer moves a published row back to PENDING for a deferral (see
// store.Deferrals).
func (s *Store) OutboxDefer(ctx context.Context, p store.OutboxDeferParams) (store.OutboxDeferResult, error) {
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
