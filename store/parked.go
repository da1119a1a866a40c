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
}

// ParkedEntry is one parked message.
type ParkedEntry struct {
	MessageID      string
	NotificationID string
	Tenant         string
	Lane           heraldtype.Lane
	Channel        heraldtype.Channel
	Reason         string
	ParkedAt       time.Time
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
