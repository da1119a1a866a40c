// Package lookup answers GET /v1/notifications/{id}: the notification and one
// entry per planned send, from the moment of the 202.
//
// An entry's state merges the dispatcher's outbox row and the sender's
// delivery row: a terminal delivery state wins; an outbox row that ended
// without a send (EXPIRED, FAILED) comes next; then a waiting delivery state
// (SENDING, RETRY_WAIT, PARKED); and before the sender has written anything,
// SCHEDULED while send_at is ahead, PENDING after.
package lookup

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
)

// Handler serves GET /v1/notifications/{id}.
type Handler struct {
	Store  store.Notifications
	Logger *slog.Logger
}

// Notification is the response body.
type Notification struct {
	ID         string     `json:"id"`
	Kind       string     `json:"kind"`
	Recipient  string     `json:"recipient"`
	EventID    string     `json:"event_id"`
	CreatedAt  time.Time  `json:"created_at"`
	SendAt     *time.Time `json:"send_at,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	Deliveries []Delivery `json:"deliveries"`
}

// Delivery is one planned send.
type Delivery struct {
	MessageID string    `json:"message_id"`
	Channel   string    `json:"channel"`
	State     string    `json:"state"`
	Reason    string    `json:"reason"`
	Attempts  int       `json:"attempts"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	v, err := h.Store.NotificationGet(r.Context(), auth.Tenant(r.Context()), id)
	if errors.Is(err, store.ErrNotFound) {
		problem.New(w, http.StatusNotFound, "no such notification")
		return
	}
	if err != nil {
		h.Logger.LogAttrs(r.Context(), slog.LevelError, "lookup: store unavailable", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(View(v))
}

// View turns a stored notification into the response body.
func View(v store.NotificationView) Notification {
	n := Notification{
		ID: v.ID, Kind: v.Kind, Recipient: v.Recipient, EventID: v.EventID,
		CreatedAt: v.CreatedAt, SendAt: v.SendAt, ExpiresAt: v.ExpiresAt,
		Deliveries: make([]Delivery, 0, len(v.Deliveries)),
	}
	for _, dv := range v.Deliveries {
		n.Deliveries = append(n.Deliveries, entry(dv, v.SendAt, v.Now))
	}
	return n
}

func entry(dv store.DeliveryView, sendAt *time.Time, now time.Time) Delivery {
	e := Delivery{MessageID: dv.MessageID, Channel: string(dv.Channel)}
	d := dv.Delivery
	if d != nil {
		e.Attempts = d.Attempts
	}
	switch {
	case d != nil && d.State.Terminal():
		e.State, e.Reason, e.UpdatedAt = string(d.State), d.Reason, d.UpdatedAt
	case dv.OutboxState == heraldtype.OutboxExpired || dv.OutboxState == heraldtype.OutboxFailed:
		e.State, e.Reason, e.UpdatedAt = string(dv.OutboxState), dv.OutboxReason, dv.OutboxUpdated
	case d != nil:
		e.State, e.Reason, e.UpdatedAt = string(d.State), d.Reason, d.UpdatedAt
	case sendAt != nil && sendAt.After(now):
		e.State, e.UpdatedAt = heraldtype.ViewScheduled, dv.OutboxUpdated
	default:
		e.State, e.UpdatedAt = heraldtype.ViewPending, dv.OutboxUpdated
	}
	return e
}
