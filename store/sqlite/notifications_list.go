package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The read API's list and attempt log (GET /v1/notifications, and the
// attempt history of GET /v1/notifications/{id}).
//
// The list walks one of two indexes of migration 5 backwards, newest first:
// notifications_tenant_created (tenant, created_at, id), or, with a
// recipient, notifications_tenant_recipient_created. The keyset, the
// row value (created_at, id), is a range condition on the index, as is
// since; kind and state filter the rows the walk meets.
const (
	// ?1 now, ?2 tenant, ?3 recipient, ?4 kind ('' any), ?5 state ('' any),
	// ?6 since, ?7 before created_at, ?8 before id, ?9 limit.
	qNotificationList            = qNotificationListHead + qNotificationListFilters + qNotificationListTail
	qNotificationListByRecipient = qNotificationListHead + `AND n.recipient = ?3
` + qNotificationListFilters + qNotificationListTail

	qNotificationListHead = `WITH page AS (
    SELECT n.id, n.tenant, n.recipient, n.event_id, n.kind, n.lane, n.send_at, n.expires_at, n.created_at, n.inbox_at, n.scope
    FROM notifications n
    WHERE n.tenant = ?2
`
	qNotificationListFilters = `      AND n.created_at >= ?6 AND (n.created_at, n.id) < (?7, ?8)
      AND (?4 = '' OR n.kind = ?4)
      AND (?5 = '' OR EXISTS (
          SELECT 1 FROM outbox o LEFT JOIN deliveries d ON d.message_id = o.message_id
          WHERE o.notification_id = n.id AND ` + qEntryState + ` = ?5)
        OR (?5 = 'STORED' AND n.inbox_at > 0)
        OR (?5 IN ('WAITING', 'SKIPPED') AND ` + qPlannedState + ` = ?5))
    ORDER BY n.created_at DESC, n.id DESC
    LIMIT ?9
)
`
	qNotificationListTail = `SELECT p.id, p.tenant, p.recipient, p.event_id, p.kind, p.lane, p.send_at, p.expires_at, p.created_at, p.inbox_at, p.scope,
       o.message_id, o.channel, o.state, o.last_reason, o.available_at, o.updated_at,
       d.notification_id, d.tenant, d.provider, d.state, d.reason, d.attempts, d.claimed_at, d.next_attempt_at, d.created_at, d.updated_at,
       o.fallback_step, o.fallback_after, o.fallback_plan
FROM page p
LEFT JOIN outbox o ON o.notification_id = p.id
LEFT JOIN deliveries d ON d.message_id = o.message_id
ORDER BY p.created_at DESC, p.id DESC, o.id`

	// qEntryState is the state the read API shows for the planned send o
	// (with its delivery d) of notification n, as
	// store.NotificationView.EntryState computes it; ?1 is now.
	qEntryState = `CASE
              WHEN d.state IN ('PROVIDER_ACCEPTED', 'DELIVERED', 'PERMANENT_FAILURE', 'RETRY_EXHAUSTED', 'UNKNOWN', 'SUPPRESSED') THEN d.state
              WHEN o.state IN ('EXPIRED', 'FAILED', 'WAITING', 'SKIPPED') THEN o.state
              WHEN d.state IS NOT NULL THEN d.state
              WHEN n.send_at > ?1 THEN 'SCHEDULED'
              ELSE 'PENDING'
          END`

	// qPlannedState is the state the read API shows for the later steps
	// of notification n's lazy chain that have no rows yet, as
	// store.WithPlannedSteps computes it (fallback.Decide): SKIPPED once a
	// first step's send has ended otherwise than by a definite failure,
	// else WAITING; NULL when n has no such steps.
	qPlannedState = `(SELECT CASE WHEN ` + qFirstStepEndedOtherwise + ` THEN 'SKIPPED' ELSE 'WAITING' END
          WHERE EXISTS (SELECT 1 FROM outbox f WHERE f.notification_id = n.id AND f.fallback_plan IS NOT NULL)
            AND NOT EXISTS (SELECT 1 FROM outbox l WHERE l.notification_id = n.id AND l.fallback_step > 1))`

	// qAttemptList reads the attempt log of the messages in the JSON array ?1.
	qAttemptList = `SELECT message_id, attempt, started_at, class, reason, duration_ms
FROM delivery_attempts WHERE message_id IN (SELECT value FROM json_each(?1))
ORDER BY message_id, attempt, id`
)

// NotificationList reads a page of a tenant's notifications, newest first,
// with their planned sends.
func (s *Store) NotificationList(ctx context.Context, p store.NotificationListParams) ([]store.NotificationView, error) {
	now := s.clock.Now()
	since, beforeAt, beforeID := int64(math.MinInt64), int64(math.MaxInt64), ""
	if p.Since != nil {
		since = p.Since.UnixMilli()
	}
	if p.Before != nil {
		beforeAt, beforeID = p.Before.CreatedAt.UnixMilli(), p.Before.ID
	}
	q := qNotificationList
	if p.Recipient != "" {
		q = qNotificationListByRecipient
	}
	rows, err := s.query(ctx, q, ms(now), p.Tenant, p.Recipient, p.Kind, p.State, since, beforeAt, beforeID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	defer rows.Close()
	var out []store.NotificationView
	var inboxAt []int // each view's inbox place (store.WithInboxSend)
	for rows.Next() {
		var v store.NotificationView
		var lane string
		var sendAt, expiresAt sql.NullInt64
		var created int64
		var at int
		dest := []any{&v.ID, &v.Tenant, &v.Recipient, &v.EventID, &v.Kind, &lane, &sendAt, &expiresAt, &created, &at, &v.Scope}
		var send plannedSend
		if err := rows.Scan(append(dest, send.dest()...)...); err != nil {
			return nil, fmt.Errorf("list notifications: scan: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].ID != v.ID {
			v.Lane, v.SendAt, v.ExpiresAt, v.CreatedAt, v.Now = heraldtype.Lane(lane), fromNullMs(sendAt), fromNullMs(expiresAt), fromMs(created), now
			out = append(out, v)
			inboxAt = append(inboxAt, at)
		}
		if dv, ok := send.view(); ok {
			last := &out[len(out)-1]
			last.Deliveries = append(last.Deliveries, dv)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	for i := range out {
		out[i].Deliveries = store.WithInboxSend(out[i], inboxAt[i])
		out[i].Deliveries = store.WithPlannedSteps(out[i].ID, out[i].Deliveries) // a lazy chain's later steps (fallback.go)
	}
	return out, nil
}

// plannedSend scans the outbox and delivery columns of one planned send, as
// qNotificationSends and the list select them; both are NULL for a
// notification without planned sends.
type plannedSend struct {
	msgID, ch, ostate, oreason                     sql.NullString
	avail, oupd                                    sql.NullInt64
	dNotif, dTenant, dProvider, dState, dReason    sql.NullString
	dAttempts, dClaimed, dNext, dCreated, dUpdated sql.NullInt64
	fStep                                          sql.NullInt64
	fAfter, fPlan                                  sql.NullString
}

func (p *plannedSend) dest() []any {
	return []any{&p.msgID, &p.ch, &p.ostate, &p.oreason, &p.avail, &p.oupd,
		&p.dNotif, &p.dTenant, &p.dProvider, &p.dState, &p.dReason, &p.dAttempts, &p.dClaimed, &p.dNext, &p.dCreated, &p.dUpdated,
		&p.fStep, &p.fAfter, &p.fPlan}
}

// view returns the planned send, or false when the row had none.
func (p *plannedSend) view() (store.DeliveryView, bool) {
	if !p.msgID.Valid {
		return store.DeliveryView{}, false
	}
	dv := store.DeliveryView{
		MessageID: p.msgID.String, Channel: heraldtype.Channel(p.ch.String), OutboxState: heraldtype.OutboxState(p.ostate.String),
		OutboxReason: p.oreason.String, AvailableAt: fromMs(p.avail.Int64), OutboxUpdated: fromMs(p.oupd.Int64),
	}
	if p.dState.Valid {
		dv.Delivery = &store.Delivery{
			MessageID: dv.MessageID, NotificationID: p.dNotif.String, Tenant: p.dTenant.String, Channel: dv.Channel,
			Provider: p.dProvider.String, State: heraldtype.DeliveryState(p.dState.String), Reason: p.dReason.String,
			Attempts: int(p.dAttempts.Int64), ClaimedAt: fromNullMs(p.dClaimed), NextAttemptAt: fromNullMs(p.dNext),
			CreatedAt: fromMs(p.dCreated.Int64), UpdatedAt: fromMs(p.dUpdated.Int64),
		}
	}
	if p.fStep.Valid {
		dv.Fallback = &store.FallbackStep{Step: int(p.fStep.Int64), After: p.fAfter.String}
	}
	if p.fPlan.Valid {
		// Written by newChain from a []heraldtype.Channel; a plan that does
		// not decode shows no later steps rather than fail the read.
		_ = json.Unmarshal([]byte(p.fPlan.String), &dv.Planned)
	}
	return dv, true
}

// AttemptList reads the attempt log of the given messages.
func (s *Store) AttemptList(ctx context.Context, messageIDs []string) ([]store.Attempt, error) {
	if len(messageIDs) == 0 {
		return nil, nil
	}
	ids, err := json.Marshal(messageIDs)
	if err != nil {
		return nil, fmt.Errorf("read attempt log: %w", err)
	}
	rows, err := s.query(ctx, qAttemptList, string(ids))
	if err != nil {
		return nil, fmt.Errorf("read attempt log: %w", err)
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		var a store.Attempt
		var started, took int64
		if err := rows.Scan(&a.MessageID, &a.Attempt, &started, &a.Class, &a.Reason, &took); err != nil {
			return nil, fmt.Errorf("read attempt log: scan: %w", err)
		}
		a.StartedAt, a.Duration = fromMs(started), time.Duration(took)*time.Millisecond
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read attempt log: %w", err)
	}
	return out, nil
}
