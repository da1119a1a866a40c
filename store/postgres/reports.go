package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Provider reports (POST /v1/callbacks/{provider}, status look-ups).
const (
	// qReport reads the message's delivery, only if the provider made it,
	// and moves it in the same statement when its state is one of $4,
	// conditional on the state it read: a write that committed in between
	// leaves the row changed, the update takes nothing, and the caller
	// reads again. A move of an ended first step's delivery records its
	// end on a lazy chain first (qFallbackClose, fallback.go).
	//
	// $1 now, $2 message id, $3 provider ('' any), $4 the states it may
	// move, $5 the state it writes, $6 the reason, $7 tenant ('' any), $8
	// the other providers it reaches (its account's,
	// store.ReportParams.AlsoProviders; empty for none).
	qReport = `WITH cur AS (
    SELECT message_id, state, reason, channel, notification_id, tenant FROM deliveries
    WHERE message_id = $2::text AND ($3::text = '' OR provider = $3::text OR provider = ANY($8::text[]))
      AND ($7::text = '' OR tenant = $7::text)
),
u AS (
    UPDATE deliveries d
    SET state = $5::text, reason = $6::text, updated_at = coalesce($1::timestamptz, clock_timestamp())
    FROM cur
    WHERE d.message_id = cur.message_id AND d.state = cur.state AND cur.state = ANY($4::text[])
    RETURNING 1
)` + qFallbackClose + `SELECT cur.state, cur.channel, cur.tenant, cur.reason, (SELECT count(*) FROM u) FROM cur`
	// qUnknownPage walks deliveries_unknown (provider, message_id);
	// 'LOOKUP_' is store.ReasonLookupPrefix.
	qUnknownPage = `SELECT message_id, coalesce(provider_ref, ''), coalesce(claimed_at, updated_at)
FROM deliveries
WHERE provider = $1::text AND state = 'UNKNOWN' AND message_id > $2::text AND substr(reason, 1, 7) <> 'LOOKUP_'
ORDER BY provider, message_id LIMIT $3::integer`
	// qUnknownList walks deliveries_unknown (provider, message_id) after
	// ($1, $2); $3 provider ('' any), $4 tenant ('' any), $5 limit.
	qUnknownList = `SELECT message_id, notification_id, tenant, provider, channel, reason, attempts, updated_at
FROM deliveries
WHERE state = 'UNKNOWN' AND (provider, message_id) > ($1::text, $2::text)
  AND ($3::text = '' OR provider = $3::text) AND ($4::text = '' OR tenant = $4::text)
ORDER BY provider, message_id LIMIT $5::integer`
)

// DeliveryUnknownList lists UNKNOWN deliveries for a person.
func (s *Store) DeliveryUnknownList(ctx context.Context, p store.UnknownListParams) ([]store.UnknownEntry, error) {
	rows, err := s.pool.Query(ctx, qUnknownList, p.After.Provider, p.After.MessageID, p.Provider, p.Tenant, p.Limit)
	if err != nil {
		return nil, s.fail("list unknown deliveries", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.UnknownEntry, error) {
		var e store.UnknownEntry
		err := row.Scan(&e.MessageID, &e.NotificationID, &e.Tenant, &e.Provider, &e.Channel, &e.Reason, &e.Attempts, &e.Since)
		e.Since = e.Since.UTC()
		return e, err
	})
	if err != nil {
		return nil, s.fail("list unknown deliveries", err)
	}
	return out, nil
}

// reportTries bounds how often a report reads again after a concurrent
// write changed the row between its read and its write.
const reportTries = 3

// DeliveryReport moves a provider's delivery as its report says.
func (s *Store) DeliveryReport(ctx context.Context, p store.ReportParams) (store.ReportOutcome, error) {
	what := fmt.Sprintf("report for %s", p.MessageID)
	if err := p.Check(); err != nil {
		return store.ReportOutcome{}, err
	}
	from := make([]string, len(p.From))
	for i, st := range p.From {
		from[i] = string(st)
	}
	also := append([]string{}, p.AlsoProviders...) // an empty array, never NULL
	for range reportTries {
		var state, ch, tenant, reason string
		var moved int64
		err := s.pool.QueryRow(ctx, qReport, s.now(), p.MessageID, p.Provider, from, string(p.To), p.Reason, p.Tenant, also).
			Scan(&state, &ch, &tenant, &reason, &moved)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ReportOutcome{}, store.ErrNotFound
		}
		if err != nil {
			return store.ReportOutcome{}, s.fail(what, err)
		}
		out := store.ReportOutcome{From: heraldtype.DeliveryState(state), Channel: heraldtype.Channel(ch), Tenant: tenant, Reason: reason,
			Moved: moved == 1}
		if out.Moved || !store.ReportMoves(p, out.From) {
			return out, nil
		}
		// Changed between the statement's snapshot and its update.
	}
	return store.ReportOutcome{}, fmt.Errorf("%s: the delivery kept changing under %d tries", what, reportTries)
}

// DeliveryUnknownPage lists a provider's UNKNOWN deliveries a look-up may
// settle.
func (s *Store) DeliveryUnknownPage(ctx context.Context, p store.UnknownPageParams) ([]store.UnknownDelivery, error) {
	what := fmt.Sprintf("list unknown deliveries of %s", p.Provider)
	rows, err := s.pool.Query(ctx, qUnknownPage, p.Provider, p.After, p.Limit)
	if err != nil {
		return nil, s.fail(what, err)
	}
	page, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.UnknownDelivery])
	if err != nil {
		return nil, s.fail(what, err)
	}
	return page, nil
}
