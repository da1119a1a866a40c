package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The read API's list and attempt log (GET /v1/notifications, and the
// attempt history of GET /v1/notifications/{id}).
//
// The list walks one of two indexes of migration 5 backwards, newest first:
// notifications_tenant_created (tenant, created_at, id), or, with a
// recipient, notifications_tenant_recipient_created. The keyset, the row
// value (created_at, id), and since bound the index scan, with or without a
// cursor (infinity and -infinity stand in), so a generic plan bounds it too;
// kind and state filter the rows the walk meets. There are two statements,
// not one with an optional recipient, so that each has one plan that uses
// its own index.
const (
	// $1 now, $2 tenant, $3 recipient, $4 kind ('' any), $5 state ('' any),
	// $6 since, $7 before created_at, $8 before id, $9 limit.
	qNotificationList            = qNotificationListHead + `AND ($3::text = '' OR n.recipient = $3::text)` + qNotificationListFilters + qNotificationListTail
	qNotificationListByRecipient = qNotificationListHead + `AND n.recipient = $3::text` + qNotificationListFilters + qNotificationListTail

	qNotificationListHead = `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
page AS (
    SELECT n.id, n.tenant, n.recipient, n.event_id, n.kind, n.lane, n.send_at, n.expires_at, n.created_at, n.inbox_at, n.scope
    FROM notifications n
    WHERE n.tenant = $2::text `
	qNotificationListFilters = `
      AND n.created_at >= coalesce($6::timestamptz, '-infinity')
      AND (n.created_at, n.id) < (coalesce($7::timestamptz, 'infinity'), $8::text)
      AND ($4::text = '' OR n.kind = $4::text)
      AND ($5::text = '' OR EXISTS (
          SELECT 1 FROM outbox o LEFT JOIN deliveries d ON d.message_id = o.message_id
          WHERE o.notification_id = n.id AND ` + qEntryState + ` = $5::text)
        OR ($5::text = 'STORED' AND n.inbox_at > 0)
        OR ($5::text IN ('WAITING', 'SKIPPED') AND ` + qPlannedState + ` = $5::text))
    ORDER BY n.created_at DESC, n.id DESC
    LIMIT $9::integer
)
`
	// The columns of qNotificationGet, in its order (scanViewRow).
	qNotificationListTail = `SELECT p.id, p.tenant, p.recipient, p.event_id, p.kind, p.lane, p.send_at, p.expires_at, p.created_at, t.now, p.inbox_at,
       o.message_id, o.channel, o.state, o.last_reason, o.available_at, o.updated_at,
       d.notification_id, d.tenant, d.provider, d.state, d.reason, d.attempts, d.claimed_at, d.next_attempt_at, d.created_at, d.updated_at,
       o.fallback_step, o.fallback_after, o.fallback_plan, p.scope
FROM page p CROSS JOIN t
LEFT JOIN outbox o ON o.notification_id = p.id
LEFT JOIN deliveries d ON d.message_id = o.message_id
ORDER BY p.created_at DESC, p.id DESC, o.id`

	// qPlannedState is the state the read API shows for the later steps
	// of notification n's lazy chain that have no rows yet, as
	// store.WithPlannedSteps computes it (fallback.Decide): SKIPPED once a
	// first step's send has ended otherwise than by a definite failure,
	// else WAITING; NULL when n has no such steps. Read only when the
	// filter asks for WAITING or SKIPPED; each probe is of the primary
	// key's notification_id prefix.
	qPlannedState = `(SELECT CASE WHEN ` + qFirstStepEndedOtherwise + ` THEN 'SKIPPED' ELSE 'WAITING' END
          WHERE EXISTS (SELECT 1 FROM outbox f WHERE f.notification_id = n.id AND f.fallback_step = 1 AND f.fallback_plan IS NOT NULL)
            AND NOT EXISTS (SELECT 1 FROM outbox l WHERE l.notification_id = n.id AND l.fallback_step > 1))`

	// qEntryState is the state the read API shows for the planned send o
	// (with its delivery d) of notification n, as
	// store.NotificationView.EntryState computes it; t.now is now.
	qEntryState = `CASE
              WHEN d.state IN ('PROVIDER_ACCEPTED', 'DELIVERED', 'PERMANENT_FAILURE', 'RETRY_EXHAUSTED', 'UNKNOWN', 'SUPPRESSED') THEN d.state
              WHEN o.state IN ('EXPIRED', 'FAILED', 'WAITING', 'SKIPPED') THEN o.state
              WHEN d.state IS NOT NULL THEN d.state
              WHEN n.send_at > (SELECT now FROM t) THEN 'SCHEDULED'
              ELSE 'PENDING'
          END`

	// qAttemptList reads the attempt log of the messages $1 through
	// delivery_attempts_message_attempt, in its order.
	qAttemptList = `SELECT message_id, attempt, started_at, class, reason, duration_ms
FROM delivery_attempts WHERE message_id = ANY ($1::text[])
ORDER BY message_id, attempt, started_at`
)

// NotificationList reads a page of a tenant's notifications, newest first,
// with their planned sends, in one statement.
func (s *Store) NotificationList(ctx context.Context, p store.NotificationListParams) ([]store.NotificationView, error) {
	var since, beforeAt *time.Time
	beforeID := ""
	if p.Since != nil {
		since = p.Since
	}
	if p.Before != nil {
		beforeAt, beforeID = &p.Before.CreatedAt, p.Before.ID
	}
	q := qNotificationList
	if p.Recipient != "" {
		q = qNotificationListByRecipient
	}
	rows, err := s.pool.Query(ctx, q, s.now(), p.Tenant, p.Recipient, p.Kind, p.State, since, beforeAt, beforeID, p.Limit)
	if err != nil {
		return nil, s.fail("list notifications", err)
	}
	defer rows.Close()
	var out []store.NotificationView
	var inboxAt []int // each view's inbox place (store.WithInboxSend)
	for rows.Next() {
		var v store.NotificationView
		var at int
		dv, ok, err := scanViewRow(rows, &v, &at)
		if err != nil {
			return nil, s.fail("list notifications", err)
		}
		if n := len(out); n == 0 || out[n-1].ID != v.ID {
			out = append(out, v)
			inboxAt = append(inboxAt, at)
		}
		if ok {
			last := &out[len(out)-1]
			last.Deliveries = append(last.Deliveries, dv)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("list notifications", err)
	}
	for i := range out {
		out[i].Deliveries = store.WithInboxSend(out[i], inboxAt[i])
		out[i].Deliveries = store.WithPlannedSteps(out[i].ID, out[i].Deliveries) // a lazy chain's later steps (fallback.go)
	}
	return out, nil
}

// scanViewRow scans one row of qNotificationGet (or of the list, which
// selects the same columns): the notification's columns into v and its
// inbox place into inboxAt, and its planned send, if the row has one (ok).
func scanViewRow(rows pgx.Rows, v *store.NotificationView, inboxAt *int) (dv store.DeliveryView, ok bool, err error) {
	var (
		lane                                  string
		sendAt, expiresAt                     *time.Time
		created, now                          time.Time
		msgID, ch, ostate, oreason            *string
		avail, oupd                           *time.Time
		dNotif, dTenant, dProv, dState, dReas *string
		dAttempts                             *int
		dClaimed, dNext, dCreated, dUpdated   *time.Time
		fStep                                 *int32
		fAfter                                *string
		fPlan                                 []string
	)
	if err := rows.Scan(&v.ID, &v.Tenant, &v.Recipient, &v.EventID, &v.Kind, &lane, &sendAt, &expiresAt, &created, &now, inboxAt,
		&msgID, &ch, &ostate, &oreason, &avail, &oupd,
		&dNotif, &dTenant, &dProv, &dState, &dReas, &dAttempts, &dClaimed, &dNext, &dCreated, &dUpdated, &fStep, &fAfter, &fPlan, &v.Scope); err != nil {
		return dv, false, err
	}
	v.Lane, v.SendAt, v.ExpiresAt, v.CreatedAt, v.Now = heraldtype.Lane(lane), utcPtr(sendAt), utcPtr(expiresAt), utc(created), utc(now)
	if msgID == nil {
		return dv, false, nil // a notification without planned sends
	}
	dv = store.DeliveryView{
		MessageID: *msgID, Channel: heraldtype.Channel(deref(ch)), OutboxState: heraldtype.OutboxState(deref(ostate)),
		OutboxReason: deref(oreason), AvailableAt: utc(deref(avail)), OutboxUpdated: utc(deref(oupd)),
	}
	if dState != nil {
		dv.Delivery = &store.Delivery{
			MessageID: dv.MessageID, NotificationID: deref(dNotif), Tenant: deref(dTenant), Channel: dv.Channel,
			Provider: deref(dProv), State: heraldtype.DeliveryState(*dState), Reason: deref(dReas),
			Attempts: deref(dAttempts), ClaimedAt: utcPtr(dClaimed), NextAttemptAt: utcPtr(dNext),
			CreatedAt: utc(deref(dCreated)), UpdatedAt: utc(deref(dUpdated)),
		}
	}
	if fStep != nil {
		dv.Fallback = &store.FallbackStep{Step: int(*fStep), After: deref(fAfter)}
	}
	for _, ch := range fPlan { // a lazy chain's first step (fallback.go)
		dv.Planned = append(dv.Planned, heraldtype.Channel(ch))
	}
	return dv, true, nil
}

// AttemptList reads the attempt log of the given messages.
func (s *Store) AttemptList(ctx context.Context, messageIDs []string) ([]store.Attempt, error) {
	if len(messageIDs) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, qAttemptList, messageIDs)
	if err != nil {
		return nil, s.fail("read attempt log", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Attempt, error) {
		var a store.Attempt
		var took int64
		if err := r.Scan(&a.MessageID, &a.Attempt, &a.StartedAt, &a.Class, &a.Reason, &took); err != nil {
			return a, err
		}
		a.StartedAt, a.Duration = a.StartedAt.UTC(), time.Duration(took)*time.Millisecond
		return a, nil
	})
	if err != nil {
		return nil, s.fail("read attempt log", err)
	}
	return out, nil
}
