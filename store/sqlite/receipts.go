package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Receipts (POST /v1/me/receipts). Rare next to the sender's writes, so
// they run unprepared rather than join the writer's cached statements.
const (
	// qReceiptDelivery reads the message's delivery, only if its
	// notification is the tenant's and the recipient's.
	qReceiptDelivery = `SELECT d.state, d.reason, n.lane, d.channel, d.notification_id
FROM deliveries d JOIN notifications n ON n.id = d.notification_id
WHERE d.message_id = ? AND d.tenant = ? AND n.tenant = ? AND n.recipient = ?`
	// qReceiptPlanned finds a planned send with no delivery row yet, by
	// its notification (store.ReceiptNotificationCandidates) and then its
	// exact message id.
	qReceiptPlanned = `SELECT n.lane, o.channel
FROM outbox o JOIN notifications n ON n.id = o.notification_id
WHERE o.notification_id IN (SELECT value FROM json_each(?)) AND o.message_id = ? AND n.tenant = ? AND n.recipient = ?`
	// qReceiptInbox finds an inbox send, STORED (store.InboxDelivery), by
	// its notification.
	qReceiptInbox = `SELECT lane FROM notifications WHERE id = ? AND tenant = ? AND recipient = ? AND inbox_at > 0`
	// qReceiptSettle is conditional on the state the receipt read.
	qReceiptSettle = `UPDATE deliveries SET state = 'DELIVERED', reason = ?, updated_at = ?
WHERE message_id = ? AND state = ?`
)

// DeliveryReceipt settles a recipient's PROVIDER_ACCEPTED or UNKNOWN
// message DELIVERED. The read and the conditional write share the
// writer's transaction, so nothing writes between them.
func (s *Store) DeliveryReceipt(ctx context.Context, tenant, recipient, messageID string) (store.ReceiptOutcome, error) {
	var out store.ReceiptOutcome
	found := false
	err := s.w.do(ctx, func(tx wtx) error {
		out, found = store.ReceiptOutcome{}, false
		var state, reason, lane, ch, nid string
		err := tx.QueryRow(qReceiptDelivery, messageID, tenant, tenant, recipient).Scan(&state, &reason, &lane, &ch, &nid)
		if id, ok := store.InboxNotificationID(messageID); ok && errors.Is(err, sql.ErrNoRows) {
			if err = tx.QueryRow(qReceiptInbox, id, tenant, recipient).Scan(&lane); err == nil {
				state, ch = string(heraldtype.DeliveryStored), string(heraldtype.ChannelInbox)
			}
		}
		if errors.Is(err, sql.ErrNoRows) {
			cands := jsonList(store.ReceiptNotificationCandidates(messageID))
			err = tx.QueryRow(qReceiptPlanned, cands, messageID, tenant, recipient).Scan(&lane, &ch)
			if errors.Is(err, sql.ErrNoRows) {
				// Not an error: an error would roll back the writer's whole batch.
				return nil
			}
		}
		if err != nil {
			return fmt.Errorf("read the delivery: %w", err)
		}
		found = true
		out = store.ReceiptOutcome{From: heraldtype.DeliveryState(state), Lane: heraldtype.Lane(lane), Channel: heraldtype.Channel(ch)}
		out.Result = store.ReceiptFor(out.Channel, out.From)
		if out.Result != store.ReceiptDelivered {
			return nil
		}
		now := s.now()
		if err := fallbackClose(tx, now, nid, messageID, out.From, reason); err != nil {
			return err
		}
		r, err := tx.Exec(qReceiptSettle, store.ReceiptReason(out.From), now, messageID, state)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if n, _ := r.RowsAffected(); n != 1 {
			// The single writer read the state in this transaction.
			return fmt.Errorf("settle: %d rows changed, want 1", n)
		}
		return nil
	})
	switch {
	case err != nil:
		return store.ReceiptOutcome{}, fmt.Errorf("receipt for %s: %w", messageID, err)
	case !found:
		return store.ReceiptOutcome{}, store.ErrNotFound
	}
	return out, nil
}
