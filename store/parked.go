package store

import (
	"context"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Parked is the operator's side of PARKED deliveries (DESIGN §2): messages
// whose failure would recur until a person fixes its cause (a missing
// template, an unknown kind). Requeueing keeps the message id, so the
// deliveries claim still blocks a duplicate.
type Parked interface {
	// ParkedList returns PARKED deliveries, oldest first.
	ParkedList(ctx context.Context, p ParkedListParams) ([]ParkedEntry, error)
	// ParkedRequeue turns PARKED deliveries into RETRY_WAIT due now
	// (reason REQUEUED), which the sender's claim accepts, and returns them.
	// With Outbox (the db transport) it also puts each one's finished (DONE)
	// outbox row back to PENDING, due now, with a fresh fencing token; a
	// delivery whose outbox row is not DONE yet is left PARKED.
	ParkedRequeue(ctx context.Context, p ParkedRequeueParams) ([]ParkedEntry, error)
	// ParkedRestore undoes a requeue whose copy never reached its lane (the
	// rabbitmq transport): a delivery still RETRY_WAIT with reason REQUEUED
	// becomes PARKED again with p.Reason, so it does not wait for a copy
	// that is not coming. It reports whether the row was restored.
	ParkedRestore(ctx context.Context, p ParkedRestoreParams) (bool, error)
	// ParkedDiscard ends a parked message for good, a person's decision,
	// and writes its audit row (ParkedDiscardEntry) in the same
	// transaction. It reports whether its delivery entered
	// SUPPRESSED(DISCARDED) by this call, and the tenant its audit row
	// names (the delivery's, or p.Tenant for a broker copy); see
	// ParkedDiscardParams for what each transport's discard writes.
	ParkedDiscard(ctx context.Context, p ParkedDiscardParams) (ParkedDiscarded, error)
	// ParkedDiscardList returns the discards' audit rows, oldest first.
	ParkedDiscardList(ctx context.Context, p ParkedDiscardListParams) ([]ParkedDiscardEntry, error)
}

// ParkedListParams selects parked deliveries.
type ParkedListParams struct {
	// Tenant limits the list to one tenant; empty lists every tenant.
	Tenant string
	// Limit caps the rows returned. Defaults to 100.
	Limit int
}

// ParkedRequeueParams selects parked deliveries to requeue.
type ParkedRequeueParams struct {
	// Tenant limits the requeue to one tenant; empty means every tenant.
	Tenant string
	// MessageID requeues that message only; empty requeues parked messages
	// of Tenant, up to Limit per call.
	MessageID string
	// Outbox also returns the messages' DONE outbox rows to PENDING (the db
	// transport, where the outbox row is what offers a message again).
	Outbox bool
	// Limit caps the rows requeued at once. Defaults to 1000.
	Limit int
	// ParkedBefore, when set, takes only deliveries parked (last written)
	// before it: a requeue of every message pages with it set to its first
	// page's time, so rows that park again meanwhile (the cause is not
	// fixed) are not taken again and the requeue ends. Defaults to no bound.
	ParkedBefore time.Time
}

// ParkedRestoreParams names a requeued delivery to park again.
type ParkedRestoreParams struct {
	MessageID string
	// Reason is the reason it was parked with before the requeue.
	Reason string
}

// ParkedDiscarded is what a discard wrote.
type ParkedDiscarded struct {
	// Discarded: the delivery entered SUPPRESSED(DISCARDED) by this call.
	Discarded bool
	// Tenant is the tenant the audit row names: the delivery's (the db
	// transport, where an operator's discard may name none), or the
	// copy's.
	Tenant string
}

// ParkedDiscardParams is one discard.
//
// With the db transport (Broker false) the parked message is its PARKED
// delivery: only a delivery that is still PARKED (and of Tenant, when set)
// is discarded. It becomes SUPPRESSED with reason DISCARDED through a write
// conditional on that state, so a discard never overwrites a requeue or a
// claim that got there first; its outbox row, already DONE unless a
// claimer's lease ran out before it could finish it, is settled DONE if it
// is PENDING; and the audit row records the delivery's tenant and reason.
// The answer is true. Nothing PARKED: nothing is written and the answer is
// false.
//
// With a broker (Broker true) the parked message is a copy in the parking
// queue, which the caller removes only after this write. The audit row is
// always written, with Tenant and ParkedReason as the copy says. When the
// copy names a notification (NotificationID), its delivery becomes
// SUPPRESSED(DISCARDED) if it has no row yet or is waiting (PARKED,
// RETRY_WAIT) — the guard of the sender's own decision write, so another
// copy can never send it afterwards — and is left as it is when SENDING or
// ended (another copy already owns or finished it). The answer is true
// only when the delivery became SUPPRESSED(DISCARDED) here: false for a
// copy that names no notification, a delivery another copy owns or
// finished, or one an earlier discard already ended.
type ParkedDiscardParams struct {
	// Tenant is the message's tenant. db: limits the discard to that
	// tenant's delivery, empty for any tenant. Broker: recorded as is,
	// empty for a message that names none (a body that is not a job).
	Tenant    string
	MessageID string
	// Broker: the message is a broker's parked copy (see above).
	Broker bool
	// NotificationID and Channel identify a broker copy's delivery; an
	// empty NotificationID leaves the deliveries untouched.
	NotificationID string
	Channel        heraldtype.Channel
	// ParkedReason is the copy's parked reason (Broker); the db transport
	// records the delivery's own.
	ParkedReason string
	// Reason is why the person discarded it (required).
	Reason string
	// Actor is who discarded it: "api:<tenant>" or "cli:<OS user>".
	Actor string
}

// ParkedDiscardListParams selects discard audit rows.
type ParkedDiscardListParams struct {
	// Tenant limits the rows to one tenant; empty lists every tenant's.
	Tenant string
	// MessageID limits the rows to one message; empty lists every one.
	MessageID string
	// Limit caps the rows returned. Defaults to 100.
	Limit int
}

// LimitOrDefault returns p.Limit or its default.
func (p ParkedDiscardListParams) LimitOrDefault() int {
	if p.Limit <= 0 {
		return 100
	}
	return p.Limit
}

// ParkedDiscardEntry is the audit row of one discard. It holds ids, codes
// and the person's own words (Reason), nothing of the message itself.
type ParkedDiscardEntry struct {
	ID          int64
	DiscardedAt time.Time
	Actor       string
	MessageID   string
	// Tenant is the message's tenant; empty for one that names none.
	Tenant string
	// ParkedReason is why the message was parked.
	ParkedReason string
	Reason       string
}

// ParkedEntry is one parked message.
type ParkedEntry struct {
	MessageID      string
	NotificationID string
	Tenant         string
	// Kind is the notification's kind ("" when the notification row is missing).
	Kind     string
	Lane     heraldtype.Lane
	Channel  heraldtype.Channel
	Reason   string
	ParkedAt time.Time
}

// LimitOrDefault returns p.Limit or its default.
func (p ParkedListParams) LimitOrDefault() int {
	if p.Limit <= 0 {
		return 100
	}
	return p.Limit
}

// LimitOrDefault returns p.Limit or its default.
func (p ParkedRequeueParams) LimitOrDefault() int {
	if p.Limit <= 0 {
		return 1000
	}
	return p.Limit
}
