package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// A recipient's erasure (store.Erasure), one batch per write transaction.
// The batch of notifications walks notifications_tenant_recipient_created
// forwards from the previous batch's last row; every other statement finds
// its rows by key (outbox by notification_id, deliveries and the discard
// audit by message_id; profiles, devices, inbox items and the counter by
// the recipient's primary-key prefix). The batch's ids travel as a JSON
// array (json_each). The writer is the only writer of the file, so the
// inbox delete and the counter's change cannot interleave with another
// inbox write (inbox.go).
const (
	// ?1 tenant, ?2 recipient.
	qEraseProfile = `DELETE FROM profiles WHERE tenant = ?1 AND recipient = ?2`

	// ?1 tenant, ?2 recipient.
	qEraseDevices = `DELETE FROM devices WHERE tenant = ?1 AND recipient = ?2`
	// qEraseCampaignTotals and qEraseCampaignRecipients take the recipient
	// out of the tenant's campaigns that have not fanned it out yet (its
	// seq past the cursor of a DRAFT or RUNNING campaign), off their total
	// first: no notification is ever written for it. The writer is the
	// file's only writer, so no fan-out batch interleaves (PostgreSQL locks
	// the campaigns first). ?1 tenant, ?2 recipient.
	qEraseCampaignTotals = `UPDATE campaigns SET total = total - 1
WHERE tenant = ?1 AND state IN ('DRAFT', 'RUNNING')
  AND EXISTS (SELECT 1 FROM campaign_recipients cr WHERE cr.campaign_id = campaigns.id AND cr.recipient = ?2 AND cr.seq > campaigns.fanout_seq)`
	qEraseCampaignRecipients = `DELETE FROM campaign_recipients
WHERE campaign_id IN (SELECT id FROM campaigns WHERE tenant = ?1 AND state IN ('DRAFT', 'RUNNING')) AND recipient = ?2
  AND seq > (SELECT c.fanout_seq FROM campaigns c WHERE c.id = campaign_recipients.campaign_id)`
	// qEraseCampaignParams clears the recipient's own params in the
	// tenant's campaigns, as PostgreSQL's twin.
	qEraseCampaignParams = `UPDATE campaign_recipients SET params = NULL
WHERE recipient = ?2 AND params IS NOT NULL AND campaign_id IN (SELECT id FROM campaigns WHERE tenant = ?1)`

	// qEraseInboxItems lists the inbox items of the batch's notifications
	// (?3, a JSON array of their ids), each with whether it counts as
	// unread; qEraseInbox clears them off their rows (words, marks and
	// seq). The counter's seq stays. ?1 tenant, ?2 recipient.
	qEraseInboxItems = `SELECT inbox_read_at IS NULL AND inbox_archived_at IS NULL FROM notifications
WHERE id IN (SELECT value FROM json_each(?3)) AND tenant = ?1 AND recipient = ?2 AND inbox_seq IS NOT NULL`
	qEraseInbox = `UPDATE notifications SET ` + qInboxClear + `
WHERE id IN (SELECT value FROM json_each(?3)) AND tenant = ?1 AND recipient = ?2 AND inbox_seq IS NOT NULL`

	// ?1 tenant, ?2 recipient, ?3 after created_at, ?4 after id, ?5 limit.
	qEraseBatch = `SELECT id, created_at FROM notifications
WHERE tenant = ?1 AND recipient = ?2 AND (created_at, id) > (?3, ?4)
ORDER BY created_at, id
LIMIT ?5`

	// ?1 now, ?2 notification ids (JSON array).
	qEraseParams = `UPDATE notifications SET params = '{}', erased_at = ?1
WHERE id IN (SELECT value FROM json_each(?2)) AND erased_at IS NULL`

	// ?1 notification id.
	qNotificationErased = `SELECT erased_at IS NOT NULL FROM notifications WHERE id = ?1`

	// qEraseWaiting lists the batch's waiting sends: no delivery row and
	// the outbox row not EXPIRED, FAILED or SKIPPED (a fallback step that
	// was not needed has ended), or a delivery in RETRY_WAIT or PARKED.
	// ?1 notification ids (JSON array).
	qEraseWaiting = `SELECT o.message_id, o.notification_id, o.tenant, o.channel, o.lane
FROM outbox o LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE o.notification_id IN (SELECT value FROM json_each(?1))
  AND ((d.message_id IS NULL AND o.state NOT IN ('EXPIRED', 'FAILED', 'SKIPPED')) OR d.state IN ('RETRY_WAIT', 'PARKED'))`

	// qEraseSuppress is the sender's decision write with SUPPRESSED(ERASED):
	// an insert when there is no row, an update of a waiting one, nothing
	// over SENDING or an ended delivery. ?1 now, ?2 message id,
	// ?3 notification id, ?4 tenant, ?5 channel.
	qEraseSuppress = `INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, reason, created_at, updated_at)
VALUES (?2, ?3, ?4, ?5, 'SUPPRESSED', 'ERASED', ?1, ?1)
ON CONFLICT (message_id) DO UPDATE SET state = excluded.state, reason = excluded.reason, next_attempt_at = NULL,
    claimed_by = NULL, updated_at = excluded.updated_at
WHERE deliveries.state IN ('RETRY_WAIT', 'PARKED')`

	// qEraseDiscardWords erases the person's words from the discard audit
	// rows of the batch's messages. ?1 notification ids (JSON array).
	qEraseDiscardWords = `UPDATE parked_discards SET reason = 'ERASED'
WHERE reason <> 'ERASED' AND message_id IN (
    SELECT message_id FROM outbox WHERE notification_id IN (SELECT value FROM json_each(?1)))`
)

// RecipientErase erases one batch of what herald keeps about a recipient.
func (s *Store) RecipientErase(ctx context.Context, p store.RecipientEraseParams) (store.RecipientEraseResult, error) {
	var res store.RecipientEraseResult
	err := s.w.do(ctx, func(tx wtx) error {
		res = store.RecipientEraseResult{}
		now := s.now()
		if p.After == nil {
			if err := eraseContacts(tx, p, &res); err != nil {
				return err
			}
		}
		afterAt, afterID := int64(math.MinInt64), ""
		if p.After != nil {
			afterAt, afterID = p.After.CreatedAt.UnixMilli(), p.After.ID
		}
		ids, last, err := eraseBatch(tx, p, afterAt, afterID)
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			if err := eraseNotifications(tx, now, ids, &res); err != nil {
				return err
			}
		}
		// Every item has its notification, so the batch's items are the
		// items left before the batch's end.
		var counted, deleted int64
		if len(ids) > 0 {
			list := jsonList(ids)
			if counted, deleted, err = countTrue(tx, qEraseInboxItems, p.Tenant, p.Recipient, list); err != nil {
				return fmt.Errorf("read inbox items: %w", err)
			}
			if _, err := tx.Exec(qEraseInbox, p.Tenant, p.Recipient, list); err != nil {
				return fmt.Errorf("clear inbox items: %w", err)
			}
		}
		res.InboxItems = int(deleted)
		if _, err := lowerUnread(tx, p.Tenant, p.Recipient, counted); err != nil {
			return err
		}
		res.Next = store.EraseNext(p, len(ids), last, int(deleted))
		return nil
	})
	if err != nil {
		return store.RecipientEraseResult{}, fmt.Errorf("erase recipient: %w", err)
	}
	if res.InboxItems > 0 {
		s.inboxChanged(store.InboxKey{Tenant: p.Tenant, Recipient: p.Recipient})
	}
	return res, nil
}

// eraseContacts deletes the profile, its consent history and the devices,
// takes the recipient out of the campaigns that have not fanned it out,
// and clears its own params in the others (the first batch).
func eraseContacts(tx wtx, p store.RecipientEraseParams, res *store.RecipientEraseResult) error {
	r, err := tx.Exec(qEraseProfile, p.Tenant, p.Recipient)
	if err != nil {
		return fmt.Errorf("delete profile: %w", err)
	}
	n, _ := r.RowsAffected()
	res.Profile = n > 0
	if _, err := tx.Exec(qEraseConsentHistory, p.Tenant, p.Recipient); err != nil {
		return fmt.Errorf("delete consent history: %w", err)
	}
	if r, err = tx.Exec(qEraseDevices, p.Tenant, p.Recipient); err != nil {
		return fmt.Errorf("delete devices: %w", err)
	}
	n, _ = r.RowsAffected()
	res.Devices = int(n)
	for _, q := range []string{qEraseCampaignTotals, qEraseCampaignRecipients} {
		if _, err := tx.Exec(q, p.Tenant, p.Recipient); err != nil {
			return fmt.Errorf("take the recipient out of campaigns not fanned out: %w", err)
		}
	}
	if _, err := tx.Exec(qEraseCampaignParams, p.Tenant, p.Recipient); err != nil {
		return fmt.Errorf("clear campaign params: %w", err)
	}
	return nil
}

// eraseNotifications empties the params of the batch's notifications,
// ends their waiting sends and erases their discard reasons.
func eraseNotifications(tx wtx, now int64, ids []string, res *store.RecipientEraseResult) error {
	idList := jsonList(ids)
	r, err := tx.Exec(qEraseParams, now, idList)
	if err != nil {
		return fmt.Errorf("erase params: %w", err)
	}
	n, _ := r.RowsAffected()
	res.Notifications = int(n)
	// A lazy chain's later steps are written first, to be suppressed and
	// skipped as an eager chain's are (fallback.go).
	if err := materialize(tx, now, ids...); err != nil {
		return err
	}
	if res.Suppressed, err = eraseSuppress(tx, now, idList); err != nil {
		return err
	}
	if _, err := tx.Exec(qFallbackErased, now, idList); err != nil { // fallback.go
		return fmt.Errorf("skip waiting fallback steps: %w", err)
	}
	if _, err := tx.Exec(qEraseDiscardWords, idList); err != nil {
		return fmt.Errorf("erase discard reasons: %w", err)
	}
	return nil
}

// NotificationErased reports whether the notification's recipient was
// erased after it was accepted.
func (s *Store) NotificationErased(ctx context.Context, notificationID string) (bool, error) {
	var erased bool
	err := s.queryRow(ctx, qNotificationErased, notificationID).Scan(&erased)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read erased_at: %w", err)
	}
	return erased, nil
}

// eraseBatch reads the ids of the batch's notifications and the position
// of its last one.
func eraseBatch(tx wtx, p store.RecipientEraseParams, afterAt int64, afterID string) ([]string, store.ListPosition, error) {
	var last store.ListPosition
	rows, err := tx.Query(qEraseBatch, p.Tenant, p.Recipient, afterAt, afterID, p.LimitOrDefault())
	if err != nil {
		return nil, last, fmt.Errorf("read notifications: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var created int64
		if err := rows.Scan(&last.ID, &created); err != nil {
			return nil, last, fmt.Errorf("read notifications: %w", err)
		}
		last.CreatedAt = fromMs(created)
		ids = append(ids, last.ID)
	}
	if err := rows.Err(); err != nil {
		return nil, last, fmt.Errorf("read notifications: %w", err)
	}
	return ids, last, nil
}

// eraseSuppress ends the batch's waiting sends SUPPRESSED(ERASED) and
// returns those it ended.
func eraseSuppress(tx wtx, now int64, idList string) ([]store.ErasedSend, error) {
	type send struct {
		store.ErasedSend
		notificationID, tenant string
	}
	rows, err := tx.Query(qEraseWaiting, idList)
	if err != nil {
		return nil, fmt.Errorf("read waiting sends: %w", err)
	}
	var waiting []send
	for rows.Next() {
		var w send
		var ch, lane string
		if err := rows.Scan(&w.MessageID, &w.notificationID, &w.tenant, &ch, &lane); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read waiting sends: %w", err)
		}
		w.Channel, w.Lane = heraldtype.Channel(ch), heraldtype.Lane(lane)
		waiting = append(waiting, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read waiting sends: %w", err)
	}
	var out []store.ErasedSend
	for _, w := range waiting {
		r, err := tx.Exec(qEraseSuppress, now, w.MessageID, w.notificationID, w.tenant, string(w.Channel))
		if err != nil {
			return nil, fmt.Errorf("suppress %s: %w", w.MessageID, err)
		}
		if n, _ := r.RowsAffected(); n > 0 {
			out = append(out, w.ErasedSend)
		}
	}
	return out, nil
}

// NotificationCancelled reads the notification's cancel mark
// (store.Cancels).
func (s *Store) NotificationCancelled(ctx context.Context, notificationID string) (bool, error) {
	var marked bool
	if err := s.queryRow(ctx, qNotificationCancelled, notificationID).Scan(&marked); err != nil {
		return false, fmt.Errorf("read the cancel mark: %w", err)
	}
	return marked, nil
}
