package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Receipts (POST /v1/me/receipts). Each finds the message by its own key
// first and its notification by id after (LATERAL … OFFSET 0, which the
// planner cannot turn around): on estimates from before a bulk of
// inserts it would otherwise walk the recipient's notifications by
// (tenant, recipient) and filter them, a probe per notification the
// recipient has (19 ms at 20,000).
const (
	// qReceipt reads the message's delivery, only if its notification is
	// the tenant's and the recipient's, and settles it DELIVERED in the
	// same statement when it is a push (store.ReceiptFor) and was
	// PROVIDER_ACCEPTED or UNKNOWN, conditional
	// on the state it read: a write that committed in between (another
	// receipt) leaves the row changed, the update takes nothing, and the
	// caller reads again. Settling an ended first step's delivery records
	// its end on a lazy chain first (qFallbackClose, fallback.go).
	//
	// $1 now, $2 message id, $3 tenant, $4 recipient, $5 the reason after
	// PROVIDER_ACCEPTED, $6 after UNKNOWN.
	qReceipt = `WITH cur AS (
    SELECT d.message_id, d.state, d.reason, n.lane, d.channel, d.notification_id
    FROM deliveries d CROSS JOIN LATERAL (SELECT * FROM notifications n WHERE n.id = d.notification_id OFFSET 0) n
    WHERE d.message_id = $2::text AND d.tenant = $3::text AND n.tenant = $3::text AND n.recipient = $4::text
),
u AS (
    UPDATE deliveries d
    SET state = 'DELIVERED', reason = CASE WHEN cur.state = 'UNKNOWN' THEN $6::text ELSE $5::text END,
        updated_at = coalesce($1::timestamptz, clock_timestamp())
    FROM cur
    WHERE d.message_id = cur.message_id AND d.state = cur.state AND cur.state IN ('PROVIDER_ACCEPTED', 'UNKNOWN')
      AND split_part(cur.channel, '.', 1) = 'push'
    RETURNING 1
)` + qFallbackClose + `SELECT cur.state, cur.lane, cur.channel, (SELECT count(*) FROM u) FROM cur`
	// qReceiptPlanned finds a planned send with no delivery row yet, by
	// the outbox's key (store.ReceiptNotificationCandidates, one LATERAL
	// probe each: on an outbox never analyzed, "notification_id = ANY"
	// was planned as a scan once migration 24 had added fallback_plan,
	// the planner sizing such a table's rows from its columns) and then
	// its exact message id.
	qReceiptPlanned = `SELECT n.lane, o.channel
FROM unnest($1::text[]) AS c (id)
CROSS JOIN LATERAL (SELECT * FROM outbox o WHERE o.notification_id = c.id AND o.message_id = $2::text OFFSET 0) o
CROSS JOIN LATERAL (SELECT * FROM notifications n WHERE n.id = o.notification_id OFFSET 0) n
WHERE n.tenant = $3::text AND n.recipient = $4::text`
	// qReceiptInbox finds an inbox send, STORED (store.InboxDelivery), by
	// its notification.
	qReceiptInbox = `SELECT lane FROM notifications WHERE id = $1::text AND tenant = $2::text AND recipient = $3::text AND inbox_at > 0`
)

// receiptTries bounds how often a receipt reads again after a concurrent
// write changed the row between its read and its write; each change moves
// the row on for good (to DELIVERED), so a second read settles it.
const receiptTries = 3

// DeliveryReceipt settles a recipient's PROVIDER_ACCEPTED or UNKNOWN
// message DELIVERED.
func (s *Store) DeliveryReceipt(ctx context.Context, tenant, recipient, messageID string) (store.ReceiptOutcome, error) {
	what := fmt.Sprintf("receipt for %s", messageID)
	for range receiptTries {
		var state, lane, ch string
		var settled int64
		err := s.pool.QueryRow(ctx, qReceipt, s.now(), messageID, tenant, recipient, store.ReasonReceipt, store.ReasonReceiptAfterUnknown).
			Scan(&state, &lane, &ch, &settled)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.receiptPlanned(ctx, tenant, recipient, messageID)
		}
		if err != nil {
			return store.ReceiptOutcome{}, s.fail(what, err)
		}
		out := store.ReceiptOutcome{From: heraldtype.DeliveryState(state), Lane: heraldtype.Lane(lane), Channel: heraldtype.Channel(ch)}
		out.Result = store.ReceiptFor(out.Channel, out.From)
		if out.Result != store.ReceiptDelivered || settled == 1 {
			return out, nil
		}
		// Changed between the statement's snapshot and its update.
	}
	return store.ReceiptOutcome{}, fmt.Errorf("%s: the delivery kept changing under %d tries", what, receiptTries)
}

// receiptPlanned answers a receipt for a message with no delivery row:
// ReceiptNotPush if it is the recipient's inbox send (STORED) or a planned
// send of another channel, ReceiptNotYet if it is a planned push of the
// recipient's, else ErrNotFound.
func (s *Store) receiptPlanned(ctx context.Context, tenant, recipient, messageID string) (store.ReceiptOutcome, error) {
	var lane, ch string
	if id, ok := store.InboxNotificationID(messageID); ok {
		err := s.pool.QueryRow(ctx, qReceiptInbox, id, tenant, recipient).Scan(&lane)
		switch {
		case err == nil:
			out := store.ReceiptOutcome{From: heraldtype.DeliveryStored, Lane: heraldtype.Lane(lane), Channel: heraldtype.ChannelInbox}
			out.Result = store.ReceiptFor(out.Channel, out.From)
			return out, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return store.ReceiptOutcome{}, s.fail(fmt.Sprintf("receipt for %s: read the inbox send", messageID), err)
		}
	}
	err := s.pool.QueryRow(ctx, qReceiptPlanned, store.ReceiptNotificationCandidates(messageID), messageID, tenant, recipient).Scan(&lane, &ch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.ReceiptOutcome{}, store.ErrNotFound
	case err != nil:
		return store.ReceiptOutcome{}, s.fail(fmt.Sprintf("receipt for %s: read the planned send", messageID), err)
	}
	out := store.ReceiptOutcome{Lane: heraldtype.Lane(lane), Channel: heraldtype.Channel(ch)}
	out.Result = store.ReceiptFor(out.Channel, "")
	return out, nil
}
