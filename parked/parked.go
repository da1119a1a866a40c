// Package parked is the operator's view of parked messages (DESIGN §2): a
// message whose failure would recur (a missing template, an unknown kind, a
// body that is not a job, a message that kept killing its consumer) waits
// until a person fixes the cause and requeues it. Requeueing keeps the
// message id, so the deliveries claim still blocks a duplicate.
//
// Each transport keeps parked messages where it re-offers them from: with
// db, the PARKED deliveries and their finished outbox rows (DB, here); with
// rabbitmq, the parking queue (rabbitmq.Parking).
package parked

import (
	"context"
	"errors"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Entry is one parked message. It carries ids and a reason code only.
type Entry struct {
	MessageID      string             `json:"message_id"`
	NotificationID string             `json:"notification_id,omitempty"`
	Tenant         string             `json:"-"`
	Lane           heraldtype.Lane    `json:"lane,omitempty"`
	Channel        heraldtype.Channel `json:"channel,omitempty"`
	Reason         string             `json:"reason"`
	ParkedAt       time.Time          `json:"parked_at"`
}

// Service lists and requeues parked messages. Tenant "" means every tenant
// (the CLI); the HTTP API always passes the caller's tenant.
type Service interface {
	List(ctx context.Context, tenant string, limit int) ([]Entry, error)
	// Requeue re-offers the parked message messageID, or every parked
	// message of the tenant when messageID is "", and returns how many.
	Requeue(ctx context.Context, tenant, messageID string) (int, error)
}

// ErrNotFound is a requeue of a message id that is not parked (or belongs
// to another tenant).
var ErrNotFound = errors.New("parked: no such parked message")

// DB is the db transport's Service: the deliveries table's PARKED rows.
type DB struct {
	Store store.Parked
}

var _ Service = DB{}

// List returns parked deliveries, oldest first.
func (d DB) List(ctx context.Context, tenant string, limit int) ([]Entry, error) {
	rows, err := d.Store.ParkedList(ctx, store.ParkedListParams{Tenant: tenant, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(rows))
	for i, r := range rows {
		out[i] = FromStore(r)
	}
	return out, nil
}

// Requeue turns the deliveries into due retries and their outbox rows back
// to PENDING, so a claimer offers them to the sender again. Requeueing every
// message goes page by page (a requeued row is no longer PARKED) until a
// page comes back short.
func (d DB) Requeue(ctx context.Context, tenant, messageID string) (int, error) {
	p := store.ParkedRequeueParams{Tenant: tenant, MessageID: messageID, Outbox: true}
	total := 0
	for {
		rows, err := d.Store.ParkedRequeue(ctx, p)
		if err != nil {
			return total, err
		}
		total += len(rows)
		if messageID != "" || len(rows) < p.LimitOrDefault() {
			break
		}
	}
	if messageID != "" && total == 0 {
		return 0, ErrNotFound
	}
	return total, nil
}

// FromStore converts a store row.
func FromStore(r store.ParkedEntry) Entry {
	return Entry{
		MessageID: r.MessageID, NotificationID: r.NotificationID, Tenant: r.Tenant, Lane: r.Lane,
		Channel: r.Channel, Reason: r.Reason, ParkedAt: r.ParkedAt,
	}
}
