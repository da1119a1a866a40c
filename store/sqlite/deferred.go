package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// qOutboxDefer puts a publication's row back to PENDING (store.Deferrals),
// conditional on the row being PUBLISHED with the publication's token,
// deferred (its second value) when it is due beyond store.DeferHorizon
// (deferredAt; quiet hours until 08:00); qOutboxDeferFound reads the row,
// in the same transaction, when it was not.
const (
	qOutboxDefer = `UPDATE outbox
SET state = 'PENDING', available_at = ?, deferred = ?, last_reason = ?, claimed_by = NULL, claimed_until = NULL, updated_at = ?
WHERE id = ? AND token = ? AND state = 'PUBLISHED'
RETURNING lane`
	qOutboxDeferFound = `SELECT state, token FROM outbox WHERE id = ?`
)

var _ store.Deferrals = (*Store)(nil)

// OutboxDefer moves a published row back to PENDING for a deferral (see
// store.Deferrals).
func (s *Store) OutboxDefer(ctx context.Context, p store.OutboxDeferParams) (store.OutboxDeferResult, error) {
	var res store.OutboxDeferResult
	var lane string
	err := s.w.do(ctx, func(tx wtx) error {
		res, lane = store.OutboxDeferResult{}, ""
		now := s.now()
		at := s.after(p.Delay)
		err := tx.QueryRow(qOutboxDefer, at, deferredAt(at, now), p.Reason, now, p.Fence.ID, p.Fence.Token).Scan(&lane)
		if err == nil {
			res.Deferred = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var state string
		err = tx.QueryRow(qOutboxDeferFound, p.Fence.ID).Scan(&state, &res.Token)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		res.State = heraldtype.OutboxState(state)
		return err
	})
	if err != nil {
		return store.OutboxDeferResult{}, fmt.Errorf("defer outbox row %d: %w", p.Fence.ID, err)
	}
	if res.Deferred && p.Delay <= 0 {
		s.wakeups.Notify(heraldtype.Lane(lane))
	}
	return res, nil
}
