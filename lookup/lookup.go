// Package lookup answers the read API: GET /v1/notifications/{id} (the
// notification and one entry per planned send, from the moment of the 202,
// with each send's attempt history) and GET /v1/notifications (a tenant's
// notifications, newest first, keyset-paged; see List).
//
// An entry's state merges the dispatcher's outbox row and the sender's
// delivery row (store.NotificationView.EntryState): a terminal delivery state
// wins; an outbox row that ended without a send (EXPIRED, FAILED) comes next;
// then a waiting delivery state (SENDING, RETRY_WAIT, PARKED); and before the
// sender has written anything, SCHEDULED while send_at is ahead, PENDING
// after. A fallback chain's later step (a kind with policy first) shows
// WAITING until the step before it ends, and SKIPPED (reason
// FALLBACK_NOT_NEEDED) when it was not used; each entry of a chain says
// its step and why it was or was not used (Fallback), and the
// notification says channel_policy "first".
//
// A planned send the dispatcher or the sender put back to wait (quiet
// hours' QUIET_HOURS until the next opening, a rate limit's RATE_LIMITED)
// shows PENDING, as DESIGN §8 fixes it, with Deferred naming why and when
// it will be offered again: the outbox row's reason and due time, while
// no delivery row exists and that time is ahead. A field added to the
// entry; state and reason are as before.
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

// Store is what the read API reads.
type Store interface {
	store.Notifications
	store.Attempts
}

// Handler serves GET /v1/notifications/{id}.
type Handler struct {
	Store  Store
	Logger *slog.Logger
}

// Notification is the response body.
type Notification struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Recipient string `json:"recipient"`
	EventID   string `json:"event_id"`
	// Scope is the tenant's part the notification belongs to; absent for
	// none.
	Scope      string     `json:"scope,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	SendAt     *time.Time `json:"send_at,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	Deliveries []Delivery `json:"deliveries"`
	// ChannelPolicy is "first" for a fallback chain (fallback.go); absent
	// for a kind whose channels are all sent at once.
	ChannelPolicy string `json:"channel_policy,omitempty"`
}

// Delivery is one planned send.
type Delivery struct {
	MessageID string    `json:"message_id"`
	Channel   string    `json:"channel"`
	State     string    `json:"state"`
	Reason    string    `json:"reason"`
	Attempts  int       `json:"attempts"`
	UpdatedAt time.Time `json:"updated_at"`
	// NextAttemptAt is when a RETRY_WAIT send is tried again; null in every
	// other state.
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	// AttemptsLog is the send's provider calls, oldest first: on GET
	// /v1/notifications/{id} always (an empty list before the first call),
	// never in the list's items.
	AttemptsLog []Attempt `json:"attempts_log,omitzero"`
	// Fallback is the send's step in its fallback chain and why it was or
	// was not used (fallback.go); absent off a chain.
	Fallback *Fallback `json:"fallback,omitempty"`
	// Deferred says why a PENDING send waits and until when (deferredOf);
	// absent otherwise.
	Deferred *Deferred `json:"deferred,omitempty"`
}

// Deferred is a PENDING send put back to wait: its reason code
// (QUIET_HOURS…) and when it will be offered again.
type Deferred struct {
	Reason string    `json:"reason"`
	Until  time.Time `json:"until"`
}

// retrySlack is how much later than its delivery's next_attempt_at a
// retry's outbox row may be due and still be the retry's own wait, not a
// deferral: far more than two writes of one record apart, far less than
// any rule puts a send back by.
const retrySlack = time.Second

// deferredOf is the deferral of a send shown in state: one whose outbox
// row waits PENDING with a reason (a deferral's, a rate limit's, a
// backoff's) for a due time still ahead, with no delivery row. A row due
// by its send_at (SCHEDULED) has no reason, and one due already no wait.
//
// A retry (RETRY_WAIT) whose next attempt was put back further (quiet
// hours began before it was due) shows its deferral too: its outbox row
// waits past next_attempt_at, which alone would read as overdue. The
// retry's own row is due a little after next_attempt_at, not at it: the
// store reads its clock for each of the two writes (PostgreSQL's
// clock_timestamp(), microseconds apart), so only a row due more than
// retrySlack later was put back.
func deferredOf(v store.NotificationView, dv store.DeliveryView, state string) *Deferred {
	if dv.OutboxState != heraldtype.OutboxPending || dv.OutboxReason == "" || !dv.AvailableAt.After(v.Now) {
		return nil
	}
	switch {
	case state == heraldtype.ViewPending && dv.Delivery == nil:
	case state == string(heraldtype.DeliveryRetryWait) && dv.Delivery != nil && dv.Delivery.NextAttemptAt != nil &&
		dv.AvailableAt.Sub(*dv.Delivery.NextAttemptAt) > retrySlack:
	default:
		return nil
	}
	return &Deferred{Reason: dv.OutboxReason, Until: dv.AvailableAt}
}

// Attempt is one provider call: when, its outcome class (accepted,
// not_sent, permanent, unknown), its reason code and how long it took. It
// carries no provider body.
type Attempt struct {
	Attempt    int       `json:"attempt"`
	StartedAt  time.Time `json:"started_at"`
	Class      string    `json:"class"`
	Reason     string    `json:"reason"`
	DurationMS int64     `json:"duration_ms"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	v, err := h.Store.NotificationGet(r.Context(), auth.Tenant(r.Context()), id)
	if errors.Is(err, store.ErrNotFound) {
		problem.New(w, http.StatusNotFound, "no such notification")
		return
	}
	if err != nil {
		storeFailed(w, r, h.Logger, "lookup", err)
		return
	}
	ids := make([]string, len(v.Deliveries))
	for i, dv := range v.Deliveries {
		ids[i] = dv.MessageID
	}
	attempts, err := h.Store.AttemptList(r.Context(), ids)
	if err != nil {
		storeFailed(w, r, h.Logger, "lookup", err)
		return
	}
	n := View(v)
	WithAttempts(&n, attempts)
	writeJSON(w, n)
}

// View turns a stored notification into the response body, without the
// attempt history (WithAttempts adds it).
func View(v store.NotificationView) Notification {
	n := Notification{
		ID: v.ID, Kind: v.Kind, Recipient: v.Recipient, EventID: v.EventID, Scope: v.Scope,
		CreatedAt: v.CreatedAt, SendAt: v.SendAt, ExpiresAt: v.ExpiresAt,
		Deliveries: make([]Delivery, 0, len(v.Deliveries)),
	}
	for _, dv := range v.Deliveries {
		// A push to one device shows its channel; its message id names the
		// device (<id>.push.<device id>).
		e := Delivery{MessageID: dv.MessageID, Channel: string(dv.Channel.Base()), Fallback: fallbackOf(dv)}
		e.State, e.Reason, e.UpdatedAt = v.EntryState(dv)
		e.Deferred = deferredOf(v, dv, e.State)
		if d := dv.Delivery; d != nil {
			e.Attempts = d.Attempts
			if e.State == string(heraldtype.DeliveryRetryWait) {
				e.NextAttemptAt = d.NextAttemptAt
			}
		}
		n.Deliveries = append(n.Deliveries, e)
	}
	n.ChannelPolicy = channelPolicy(n)
	return n
}

// WithAttempts sets every entry's attempt history from the attempt log
// (store.Attempts.AttemptList of the entries' message ids).
func WithAttempts(n *Notification, log []store.Attempt) {
	for i := range n.Deliveries {
		e := &n.Deliveries[i]
		e.AttemptsLog = []Attempt{}
		for _, a := range log {
			if a.MessageID == e.MessageID {
				e.AttemptsLog = append(e.AttemptsLog, Attempt{
					Attempt: a.Attempt, StartedAt: a.StartedAt, Class: a.Class, Reason: a.Reason,
					DurationMS: a.Duration.Milliseconds(),
				})
			}
		}
	}
}

// storeFailed answers 503 and logs why (no personal data: the error is the
// store's).
func storeFailed(w http.ResponseWriter, r *http.Request, logger *slog.Logger, who string, err error) {
	logger.LogAttrs(r.Context(), slog.LevelError, who+": store unavailable", slog.Any("error", err))
	problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
}

func writeJSON(w http.ResponseWriter, body any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}
