package store

import (
	"context"

	"github.com/heraldhq/herald/heraldtype"
)

// Erasure is the erasure of a recipient's personal data (package erasure,
// DELETE /v1/recipients/{recipient}).
type Erasure interface {
	// RecipientErase erases one bounded batch of what herald keeps about
	// p.Recipient of p.Tenant, in one transaction, and says where the next
	// batch starts (Next nil: nothing is left). The first batch (p.After
	// nil) deletes the profile and the devices before anything else, so no
	// send that starts after it commits finds an address. Each batch, over
	// up to p.Limit of the recipient's notifications (oldest first) and up
	// to p.Limit of its inbox items:
	//
	//   - every planned send still waiting (no delivery row and the outbox
	//     row not EXPIRED or FAILED; a delivery in RETRY_WAIT or PARKED)
	//     ends SUPPRESSED with reason ERASED through the guard of the
	//     sender's decision write (DeliveryDecide): never over SENDING or
	//     an ended delivery;
	//   - the notification's params become {};
	//   - the audit rows of its discarded parked messages lose the person's
	//     words (reason ERASED);
	//   - inbox items are deleted, the unread counter lowered by the unread
	//     ones among them (its seq stays, so a later item never reuses one).
	//
	// Ids, states, reason codes, times and the recipient id stay; each
	// notification gets erased_at, the time of its erasure (kept). Erasing
	// again is harmless: it finds nothing left to change.
	RecipientErase(ctx context.Context, p RecipientEraseParams) (RecipientEraseResult, error)
	// NotificationErased reports whether the notification's recipient was
	// erased after it was accepted (its erased_at is set; false for an
	// unknown id). The sender asks before it claims a retry: a send that
	// was SENDING when the erasure ran, and later came back RETRY_WAIT,
	// must end SUPPRESSED(ERASED) instead of rendering the erased params.
	NotificationErased(ctx context.Context, notificationID string) (bool, error)
}

// ReasonErased is the reason of a send an erasure suppressed, and of a
// discard audit row whose words it erased.
const ReasonErased = "ERASED"

// RecipientEraseParams is one batch of an erasure.
type RecipientEraseParams struct {
	Tenant    string
	Recipient string
	// After is the previous batch's Next; nil for the first batch.
	After *ListPosition
	// Limit caps the notifications and the inbox items one batch erases.
	// Defaults to 500.
	Limit int
}

// LimitOrDefault returns p.Limit or its default.
func (p RecipientEraseParams) LimitOrDefault() int {
	if p.Limit <= 0 {
		return 500
	}
	return p.Limit
}

// RecipientEraseResult is what one batch erased.
type RecipientEraseResult struct {
	// Profile: the first batch deleted a profile row.
	Profile bool
	// Devices is how many device rows the first batch deleted.
	Devices int
	// Notifications is how many of the recipient's notifications the
	// batch erased (params {} and erased_at set); one erased before is not
	// counted again.
	Notifications int
	// InboxItems is how many inbox items were deleted.
	InboxItems int
	// Suppressed are the sends this batch ended SUPPRESSED(ERASED).
	Suppressed []ErasedSend
	// Next is where the next batch starts; nil when nothing is left.
	Next *ListPosition
}

// ErasedSend is a waiting send an erasure suppressed.
type ErasedSend struct {
	MessageID string
	Lane      heraldtype.Lane
	Channel   heraldtype.Channel
}

// EraseNext is where the batch after one starts: the batch of p went
// through notifications (the last at last) and deleted inboxDeleted inbox
// items. Nil when it found fewer of each than its limit: nothing is left.
// Both drivers answer RecipientEraseResult.Next with it.
func EraseNext(p RecipientEraseParams, notifications int, last ListPosition, inboxDeleted int) *ListPosition {
	limit := p.LimitOrDefault()
	switch {
	case notifications == limit:
		return &last
	case inboxDeleted < limit:
		return nil
	case notifications > 0:
		return &last
	case p.After != nil:
		return p.After
	}
	// Inbox items are left and no notification was: before every one.
	return &ListPosition{}
}
