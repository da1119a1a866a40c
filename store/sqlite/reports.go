package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Provider reports (POST /v1/callbacks/{provider}, status look-ups). Rare
// next to the sender's writes, so they run unprepared.
const (
	// qReportRead reads the message's delivery, only if the provider made it
	// (any provider for '') or one of the providers of ?4 (a JSON array: the
	// provider's account, store.ReportParams.AlsoProviders), and it is the
	// tenant's (any tenant's for '').
	qReportRead = `SELECT state, reason, channel, notification_id, tenant FROM deliveries
WHERE message_id = ?1 AND (?2 = '' OR provider = ?2 OR provider IN (SELECT value FROM json_each(?4)))
  AND (?3 = '' OR tenant = ?3)`
	// qReportMove is conditional on the state the report read.
	qReportMove = `UPDATE deliveries SET state = ?, reason = ?, updated_at = ? WHERE message_id = ? AND state = ?`
	// qUnknownPage walks deliveries_unknown (provider, message_id);
	// 'LOOKUP_' is store.ReasonLookupPrefix.
	qUnknownPage = `SELECT message_id, coalesce(provider_ref, ''), coalesce(claimed_at, updated_at)
FROM deliveries
WHERE provider = ? AND state = 'UNKNOWN' AND message_id > ? AND substr(reason, 1, 7) <> 'LOOKUP_'
ORDER BY provider, message_id LIMIT ?`
	// qUnknownList walks deliveries_unknown (provider, message_id) after
	// (?1, ?2); ?3 provider ('' any), ?4 tenant ('' any), ?5 limit.
	qUnknownList = `SELECT message_id, notification_id, tenant, provider, channel, reason, attempts, updated_at
FROM deliveries
WHERE state = 'UNKNOWN' AND (provider, message_id) > (?1, ?2)
  AND (?3 = '' OR provider = ?3) AND (?4 = '' OR tenant = ?4)
ORDER BY provider, message_id LIMIT ?5`
)

// DeliveryUnknownList lists UNKNOWN deliveries for a person.
func (s *Store) DeliveryUnknownList(ctx context.Context, p store.UnknownListParams) ([]store.UnknownEntry, error) {
	rows, err := s.rdb.QueryContext(ctx, qUnknownList, p.After.Provider, p.After.MessageID, p.Provider, p.Tenant, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list unknown deliveries: %w", err)
	}
	defer rows.Close()
	var out []store.UnknownEntry
	for rows.Next() {
		var e store.UnknownEntry
		var since int64
		if err := rows.Scan(&e.MessageID, &e.NotificationID, &e.Tenant, &e.Provider, &e.Channel, &e.Reason, &e.Attempts, &since); err != nil {
			return nil, fmt.Errorf("list unknown deliveries: %w", err)
		}
		e.Since = fromMs(since)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list unknown deliveries: %w", err)
	}
	return out, nil
}

// DeliveryReport moves a provider's delivery as its report says. The read
// and the conditional write share the writer's transaction, so nothing
// writes between them.
func (s *Store) DeliveryReport(ctx context.Context, p store.ReportParams) (store.ReportOutcome, error) {
	if err := p.Check(); err != nil {
		return store.ReportOutcome{}, err
	}
	also, err := json.Marshal(append([]string{}, p.AlsoProviders...)) // [] for none, never null
	if err != nil {
		return store.ReportOutcome{}, fmt.Errorf("report for %s: %w", p.MessageID, err)
	}
	var out store.ReportOutcome
	found := false
	err = s.w.do(ctx, func(tx wtx) error {
		out, found = store.ReportOutcome{}, false
		var state, reason, ch, nid, tenant string
		err := tx.QueryRow(qReportRead, p.MessageID, p.Provider, p.Tenant, string(also)).Scan(&state, &reason, &ch, &nid, &tenant)
		if errors.Is(err, sql.ErrNoRows) {
			// Not an error: an error would roll back the writer's whole batch.
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the delivery: %w", err)
		}
		found = true
		out = store.ReportOutcome{From: heraldtype.DeliveryState(state), Channel: heraldtype.Channel(ch), Tenant: tenant, Reason: reason}
		if !store.ReportMoves(p, out.From) {
			return nil
		}
		now := s.now()
		if err := fallbackClose(tx, now, nid, p.MessageID, out.From, reason); err != nil {
			return err
		}
		r, err := tx.Exec(qReportMove, string(p.To), p.Reason, now, p.MessageID, state)
		if err != nil {
			return fmt.Errorf("move: %w", err)
		}
		if n, _ := r.RowsAffected(); n != 1 {
			// The single writer read the state in this transaction.
			return fmt.Errorf("move: %d rows changed, want 1", n)
		}
		out.Moved = true
		return nil
	})
	switch {
	case err != nil:
		return store.ReportOutcome{}, fmt.Errorf("report for %s: %w", p.MessageID, err)
	case !found:
		return store.ReportOutcome{}, store.ErrNotFound
	}
	return out, nil
}

// DeliveryUnknownPage lists a provider's UNKNOWN deliveries a look-up may
// settle.
func (s *Store) DeliveryUnknownPage(ctx context.Context, p store.UnknownPageParams) ([]store.UnknownDelivery, error) {
	rows, err := s.rdb.QueryContext(ctx, qUnknownPage, p.Provider, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list unknown deliveries of %s: %w", p.Provider, err)
	}
	defer rows.Close()
	var page []store.UnknownDelivery
	for rows.Next() {
		var u store.UnknownDelivery
		var at int64
		if err := rows.Scan(&u.MessageID, &u.ProviderRef, &at); err != nil {
			return nil, fmt.Errorf("list unknown deliveries of %s: %w", p.Provider, err)
		}
		u.ClaimedAt = fromMs(at)
		page = append(page, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list unknown deliveries of %s: %w", p.Provider, err)
	}
	return page, nil
}
