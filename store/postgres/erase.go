package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// A recipient's erasure (store.Erasure), one batch per transaction. The
// batch of notifications walks notifications_tenant_recipient_created
// forwards from the previous batch's last row; every other statement finds
// its rows by key (outbox by notification_id, deliveries and the discard
// audit by message_id; profiles, devices, inbox items and the counter by
// the recipient's primary-key prefix).
const (
	// $1 tenant, $2 recipient.
	qEraseProfile = `DELETE FROM profiles WHERE tenant = $1::text AND recipient = $2::text`

	// $1 tenant, $2 recipient.
	qEraseDevices = `DELETE FROM devices WHERE tenant = $1::text AND recipient = $2::text`

	// qEraseCampaignParams clears the recipient's own params in the
	// tenant's campaigns (campaign_recipients_recipient); its row, id and
	// notification id stay for the campaign's accounting, and a campaign
	// not fanned out yet sends it the campaign's params. $1 tenant, $2
	// recipient.
	qEraseCampaignParams = `UPDATE campaign_recipients SET params = NULL
WHERE recipient = $2::text AND params IS NOT NULL AND campaign_id IN (SELECT id FROM campaigns WHERE tenant = $1::text)`

	// qEraseCampaignsLock locks the tenant's campaigns not yet fanned
	// out (DRAFT, RUNNING) that hold the recipient, so that a fan-out
	// batch holding one commits first, and returns their ids; the next
	// statement then sees the cursor that batch left. $1 tenant, $2
	// recipient.
	qEraseCampaignsLock = `SELECT c.id FROM campaigns c
WHERE c.tenant = $1::text AND c.state IN ('DRAFT', 'RUNNING')
  AND EXISTS (SELECT 1 FROM campaign_recipients cr WHERE cr.campaign_id = c.id AND cr.recipient = $2::text)
ORDER BY c.id FOR UPDATE OF c`

	// qEraseCampaignRecipients deletes the recipient from the locked
	// campaigns ($3) that have not fanned it out yet (its seq past the
	// cursor) and takes it off their total: no notification is ever
	// written for it. A ranged fan-out batch that read it before the
	// delete finds the total changed once it takes the campaign's lock,
	// and writes nothing (fanOutRange). $1 tenant, $2 recipient.
	qEraseCampaignRecipients = `WITH gone AS (
    DELETE FROM campaign_recipients cr USING campaigns c
    WHERE c.id = ANY($3::text[]) AND c.tenant = $1::text AND cr.campaign_id = c.id AND cr.recipient = $2::text AND cr.seq > c.fanout_seq
    RETURNING cr.campaign_id
)
UPDATE campaigns c SET total = c.total - 1 FROM gone WHERE c.id = gone.campaign_id`

	// qEraseInboxLock locks the recipient's counter row, first, the order
	// every inbox write takes (store.Inbox), so an intake of a new item
	// waits for the erasure instead of deadlocking with it. $1 tenant,
	// $2 recipient.
	qEraseInboxLock = `SELECT 1 FROM inbox_counters WHERE tenant = $1::text AND recipient = $2::text FOR UPDATE`

	// qEraseInbox deletes up to $3 of the recipient's inbox items, oldest
	// first, takes the unread ones among them off the counter in the same
	// statement, and returns how many it deleted. It deletes a range of
	// the primary key, up to the seq of the $3-th oldest item (read first,
	// once), rather than "seq IN (the first $3)": the planner ran that as
	// a nested loop that read the first $3 again for every item of the
	// recipient (4.6 s for a batch of 500 of 10,000 items). The counter's
	// seq stays, so a later item never reuses one. $1 tenant, $2 recipient.
	qEraseInbox = `WITH cut AS (
    SELECT max(seq) AS seq FROM (
        SELECT seq FROM inbox_items WHERE tenant = $1::text AND recipient = $2::text ORDER BY seq LIMIT $3::integer) first
),
gone AS (
    DELETE FROM inbox_items i
    WHERE i.tenant = $1::text AND i.recipient = $2::text AND i.seq <= (SELECT seq FROM cut)
    RETURNING (i.read_at IS NULL AND i.archived_at IS NULL) AS unread
),
lowered AS (
    UPDATE inbox_counters SET unread = unread - (SELECT count(*) FROM gone WHERE unread)
    WHERE tenant = $1::text AND recipient = $2::text AND EXISTS (SELECT 1 FROM gone WHERE unread)
)
SELECT count(*) FROM gone`

	// $1 tenant, $2 recipient, $3 after created_at (NULL: from the
	// oldest), $4 after id, $5 limit.
	qEraseBatch = `SELECT n.id, n.created_at FROM notifications n
WHERE n.tenant = $1::text AND n.recipient = $2::text
  AND ($3::timestamptz IS NULL OR (n.created_at, n.id) > ($3::timestamptz, $4::text))
ORDER BY n.created_at, n.id
LIMIT $5::integer`

	// $1 now (NULL: the server's), $2 notification ids.
	qEraseParams = `UPDATE notifications SET params = '{}'::json, erased_at = coalesce($1::timestamptz, now())
WHERE id = ANY($2::text[]) AND erased_at IS NULL`

	// $1 notification id.
	qNotificationErased = `SELECT erased_at IS NOT NULL FROM notifications WHERE id = $1::text`

	// qEraseSuppress ends the batch's waiting sends SUPPRESSED(ERASED) with
	// the sender's decision write: an insert for a send that has no
	// delivery row (and whose outbox row has not ended EXPIRED, FAILED or,
	// a fallback step not needed, SKIPPED), an update of one in RETRY_WAIT
	// or PARKED; a row a
	// claim or a result got to first (SENDING, ended) is left as it is.
	// It returns the sends it ended, with their lanes. Each notification's
	// outbox rows and each send's delivery are probed by key (LATERAL with
	// OFFSET 0 or LIMIT, which the planner cannot flatten into a join it
	// plans by its estimates: on rows inserted since the last ANALYZE it
	// chose to scan both tables whole, per batch).
	//
	// $1 now, $2 notification ids.
	qEraseSuppress = `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
sends AS (
    SELECT o.message_id, o.notification_id, o.tenant, o.channel, o.lane
    FROM unnest($2::text[]) AS n(id)
    CROSS JOIN LATERAL (SELECT * FROM outbox WHERE notification_id = n.id OFFSET 0) o
    LEFT JOIN LATERAL (SELECT state FROM deliveries WHERE message_id = o.message_id LIMIT 1) d ON true
    WHERE (d.state IS NULL AND o.state NOT IN ('EXPIRED', 'FAILED', 'SKIPPED')) OR d.state IN ('RETRY_WAIT', 'PARKED')
),
decided AS (
    INSERT INTO deliveries AS d (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at)
    SELECT s.message_id, s.notification_id, s.tenant, s.channel, 'SUPPRESSED', 'ERASED', t.now, t.now FROM sends s, t
    ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO UPDATE
    SET state = excluded.state, reason = excluded.reason, next_attempt_at = NULL, claimed_by = NULL, updated_at = excluded.updated_at
    WHERE d.state IN ('RETRY_WAIT', 'PARKED')
    RETURNING d.message_id
)
SELECT s.message_id, s.lane, s.channel FROM decided JOIN sends s ON s.message_id = decided.message_id`

	// qEraseDiscardWords erases the person's words from the discard audit
	// rows of the batch's messages, found by key as qEraseSuppress finds
	// its rows. $1 notification ids.
	qEraseDiscardWords = `UPDATE parked_discards SET reason = 'ERASED'
WHERE id = ANY(ARRAY(
    SELECT p.id FROM unnest($1::text[]) AS n(id)
    CROSS JOIN LATERAL (SELECT message_id FROM outbox WHERE notification_id = n.id OFFSET 0) o
    CROSS JOIN LATERAL (SELECT id FROM parked_discards WHERE message_id = o.message_id AND reason <> 'ERASED' OFFSET 0) p))`

	// qEraseNoJIT keeps the batch's statements from JIT compilation, which
	// their estimates on rows not yet analyzed can trigger: it cost a
	// batch of 500 a second and more, against 30 ms of work.
	qEraseNoJIT = `SET LOCAL jit = off`
)

// RecipientErase erases one batch of what herald keeps about a recipient.
func (s *Store) RecipientErase(ctx context.Context, p store.RecipientEraseParams) (store.RecipientEraseResult, error) {
	var res store.RecipientEraseResult
	limit := p.LimitOrDefault()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = store.RecipientEraseResult{}
		if _, err := tx.Exec(ctx, qEraseNoJIT); err != nil {
			return err
		}
		if p.After == nil {
			tag, err := tx.Exec(ctx, qEraseProfile, p.Tenant, p.Recipient)
			if err != nil {
				return err
			}
			res.Profile = tag.RowsAffected() > 0
			if _, err := tx.Exec(ctx, qEraseConsentHistory, p.Tenant, p.Recipient); err != nil {
				return err
			}
			if tag, err = tx.Exec(ctx, qEraseDevices, p.Tenant, p.Recipient); err != nil {
				return err
			}
			res.Devices = int(tag.RowsAffected())
			if err := eraseFromCampaigns(ctx, tx, p); err != nil {
				return err
			}
		}
		var afterAt *time.Time
		afterID := ""
		if p.After != nil {
			afterAt, afterID = &p.After.CreatedAt, p.After.ID
		}
		rows, err := tx.Query(ctx, qEraseBatch, p.Tenant, p.Recipient, afterAt, afterID, limit)
		if err != nil {
			return err
		}
		var ids []string
		var last store.ListPosition
		_, err = pgx.ForEachRow(rows, []any{&last.ID, &last.CreatedAt}, func() error {
			ids = append(ids, last.ID)
			return nil
		})
		if err != nil {
			return err
		}
		last.CreatedAt = last.CreatedAt.UTC()
		if len(ids) > 0 {
			if err := s.eraseNotifications(ctx, tx, ids, &res); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, qEraseInboxLock, p.Tenant, p.Recipient); err != nil {
			return err
		}
		var deleted int64
		if err := tx.QueryRow(ctx, qEraseInbox, p.Tenant, p.Recipient, limit).Scan(&deleted); err != nil {
			return err
		}
		res.InboxItems = int(deleted)
		res.Next = store.EraseNext(p, len(ids), last, int(deleted))
		return nil
	})
	if err != nil {
		return store.RecipientEraseResult{}, s.fail("erase recipient", err)
	}
	if res.InboxItems > 0 {
		s.inboxChanged(store.InboxKey{Tenant: p.Tenant, Recipient: p.Recipient})
	}
	return res, nil
}

// eraseNotifications empties the params of the batch's notifications,
// ends their waiting sends and erases their discard reasons.
func (s *Store) eraseNotifications(ctx context.Context, tx pgx.Tx, ids []string, res *store.RecipientEraseResult) error {
	tag, err := tx.Exec(ctx, qEraseParams, s.now(), ids)
	if err != nil {
		return err
	}
	res.Notifications = int(tag.RowsAffected())
	// A lazy chain's later steps are written first, to be suppressed and
	// skipped as an eager chain's are (fallback.go).
	if err := s.materialize(ctx, tx, ids); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, qEraseSuppress, s.now(), ids)
	if err != nil {
		return err
	}
	var e store.ErasedSend
	var lane, ch string
	_, err = pgx.ForEachRow(rows, []any{&e.MessageID, &lane, &ch}, func() error {
		res.Suppressed = append(res.Suppressed, store.ErasedSend{MessageID: e.MessageID, Lane: heraldtype.Lane(lane), Channel: heraldtype.Channel(ch)})
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, qFallbackErased, s.now(), ids); err != nil { // fallback.go
		return err
	}
	_, err = tx.Exec(ctx, qEraseDiscardWords, ids)
	return err
}

// NotificationErased reports whether the notification's recipient was
// erased after it was accepted.
func (s *Store) NotificationErased(ctx context.Context, notificationID string) (bool, error) {
	var erased bool
	err := s.pool.QueryRow(ctx, qNotificationErased, notificationID).Scan(&erased)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, s.fail("read erased_at", err)
	}
	return erased, nil
}

// NotificationCancelled reads the notification's cancel mark
// (store.Cancels).
func (s *Store) NotificationCancelled(ctx context.Context, notificationID string) (bool, error) {
	var marked bool
	err := s.pipe.QueryRow(ctx, qNotificationCancelled, notificationID).Scan(&marked)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, s.fail("read the cancel mark", err)
	}
	return marked, nil
}

// eraseFromCampaigns takes the recipient out of the campaigns that have
// not fanned it out yet (qEraseCampaignsLock, qEraseCampaignRecipients)
// and clears its own params in the rest (qEraseCampaignParams).
func eraseFromCampaigns(ctx context.Context, tx pgx.Tx, p store.RecipientEraseParams) error {
	rows, err := tx.Query(ctx, qEraseCampaignsLock, p.Tenant, p.Recipient)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, qEraseCampaignRecipients, p.Tenant, p.Recipient, ids); err != nil {
			return err
		}
	}
	_, err = tx.Exec(ctx, qEraseCampaignParams, p.Tenant, p.Recipient)
	return err
}
