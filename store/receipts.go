package store

import (
	"context"

	"github.com/heraldhq/herald/heraldtype"
)

// Receipts is the app's word on a push (POST /v1/me/receipts): "I showed
// it", which proves the provider delivered it.
type Receipts interface {
	// DeliveryReceipt settles messageID DELIVERED on a receipt from
	// recipient of tenant. Only a message of a notification of that tenant
	// and that recipient is theirs: any other message id, like one that
	// does not exist, is ErrNotFound, so a receipt learns nothing of other
	// recipients' messages.
	//
	// PROVIDER_ACCEPTED and UNKNOWN become DELIVERED (ReceiptDelivered)
	// through one write conditional on the state read, so a receipt never
	// writes over a result another write made meanwhile, and the sender's
	// own write, conditional on SENDING, never writes over DELIVERED. The
	// reason records what the receipt settled: ReasonReceipt, or
	// ReasonReceiptAfterUnknown for an UNKNOWN (which reconciliation then
	// counts as DELIVERED, no longer as unsettled). A second receipt finds
	// DELIVERED and changes nothing (ReceiptAlready). A delivery never goes
	// back: an ended one that was not sent (PERMANENT_FAILURE,
	// RETRY_EXHAUSTED, SUPPRESSED, STORED) is ReceiptRefused; one not
	// settled yet (SENDING, RETRY_WAIT, PARKED, or a planned send with no
	// delivery row) is ReceiptNotYet, for the app to send again later.
	DeliveryReceipt(ctx context.Context, tenant, recipient, messageID string) (ReceiptOutcome, error)
}

// Reasons a receipt writes with DELIVERED.
const (
	// ReasonReceipt: a receipt confirmed a PROVIDER_ACCEPTED delivery.
	ReasonReceipt = "RECEIPT"
	// ReasonReceiptAfterUnknown: a receipt settled an UNKNOWN delivery
	// (the call had gone out after all).
	ReasonReceiptAfterUnknown = "RECEIPT_AFTER_UNKNOWN"
)

// ReceiptResult is what a receipt did.
type ReceiptResult int

const (
	// ReceiptDelivered: this receipt moved the delivery to DELIVERED.
	ReceiptDelivered ReceiptResult = iota + 1
	// ReceiptAlready: the delivery was DELIVERED already; nothing changed.
	ReceiptAlready
	// ReceiptNotYet: the send is not settled yet (SENDING, RETRY_WAIT,
	// PARKED, or no delivery row yet); nothing changed, a receipt later
	// may settle it.
	ReceiptNotYet
	// ReceiptRefused: the delivery ended without a send a receipt could
	// confirm; nothing changed, ever.
	ReceiptRefused
	// ReceiptNotPush: the message is the recipient's, but not a push: a
	// receipt is the app's word that it showed a push, and says nothing
	// of an SMS, an e-mail, a webhook or the inbox. Nothing changed.
	// (Settling another channel's UNKNOWN is a person's, with the admin
	// scope and an audit entry: package settle.)
	ReceiptNotPush
)

// ReceiptOutcome is the answer to DeliveryReceipt.
type ReceiptOutcome struct {
	Result ReceiptResult
	// From is the delivery's state as the receipt found it (PROVIDER_ACCEPTED
	// or UNKNOWN when Delivered); "" when there is no delivery row yet.
	From heraldtype.DeliveryState
	// Lane is the notification's, Channel the planned send's.
	Lane    heraldtype.Lane
	Channel heraldtype.Channel
}

// ReceiptFor classifies what a receipt found, the send's channel and its
// delivery state ("" before any row): whether the receipt may settle it,
// and what it answers otherwise. Only a push is settled by a receipt. Both
// drivers decide through it.
func ReceiptFor(ch heraldtype.Channel, s heraldtype.DeliveryState) ReceiptResult {
	if ch.Base() != heraldtype.ChannelPush {
		return ReceiptNotPush
	}
	switch s {
	case heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryUnknown:
		return ReceiptDelivered
	case heraldtype.DeliveryDelivered:
		return ReceiptAlready
	case heraldtype.DeliverySending, heraldtype.DeliveryRetryWait, heraldtype.DeliveryParked, "":
		return ReceiptNotYet
	default:
		return ReceiptRefused
	}
}

// ReceiptReason is the reason DELIVERED is written with, settled from s.
func ReceiptReason(from heraldtype.DeliveryState) string {
	if from == heraldtype.DeliveryUnknown {
		return ReasonReceiptAfterUnknown
	}
	return ReasonReceipt
}

// ReceiptNotificationCandidates returns the notification ids an outbox
// row's message id may have been derived from (MessageID: the id, a dot,
// the channel): every prefix of messageID that ends before a dot, at most
// four. A driver looks a planned send without a delivery row up by them
// (the outbox's key) and then matches the message id itself exactly, so
// nothing is taken from the id's shape on trust.
func ReceiptNotificationCandidates(messageID string) []string {
	var c []string
	for i := 0; i < len(messageID) && len(c) < 4; i++ {
		if messageID[i] == '.' && i > 0 {
			c = append(c, messageID[:i])
		}
	}
	return c
}
