// Package intake answers POST /v1/notifications: it validates the request,
// checks that every template of the kind renders with the given params, and
// writes the idempotency key, the notification and one outbox row per channel
// in one transaction. A 202 means all of that is committed. A 422 for
// params the templates need names every missing one at once, in the
// problem's missing_params member (catalog.Kind.Check).
//
// Idempotency: the key is scoped to the tenant and stored with a SHA-256 of
// the request body in canonical form (package canonical: keys sorted, numbers
// as written), so a retried request replays the first 202 body even if the
// client reordered its JSON; a different body under the same key is 409. Concurrent identical
// requests race on the key's unique index inside the store, not on a read.
package intake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/canonical"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/lograte"
	"github.com/heraldhq/herald/limits"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// MaxBody is the largest request body accepted.
const MaxBody = 64 << 10

// StatusClientClosed is the status intake records for a request whose
// client went away before its write ended (nginx's 499): it reaches no
// client, and herald_intake_responses_total keeps it apart from a 503.
const StatusClientClosed = 499

// maxKeyLen bounds an Idempotency-Key (the request's own identifiers are
// bounded by catalog.Validate).
const maxKeyLen = 255

// Handler serves POST /v1/notifications.
type Handler struct {
	Store          store.Notifications
	Catalog        *catalog.Catalog
	Clock          clock.Clock
	IdempotencyTTL time.Duration
	Logger         *slog.Logger
	Metrics        *metrics.Metrics
	// Seal seals the params before they are stored (package seal); nil
	// stores them plain.
	Seal *seal.Keyring
	// Quotas are the tenants' send quotas per lane (limits.Quota): a send
	// past its kind's lane quota is 429, with nothing written. Nil: none.
	Quotas *limits.Limiter
	// Handoff are this process's claimers (db transport) or relays
	// (rabbitmq transport): a notification whose one row is due now is
	// written claimed (or PUBLISHING) and handed to its lane's claimer or
	// relay when that has a place free (package dispatch, "Rows handed
	// over at intake"). Nil: every row waits in the outbox for a claim.
	Handoff dispatch.Lanes

	// unavailable passes one "store unavailable" line a second: each
	// request of an outage answers 503 and needs no line of its own.
	unavailable lograte.Limiter
}

// Request is the body of POST /v1/notifications.
type Request struct {
	Recipient string          `json:"recipient"`
	EventID   string          `json:"event_id"`
	Kind      string          `json:"kind"`
	Params    json.RawMessage `json:"params"`
	SendAt    *time.Time      `json:"send_at,omitempty"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	// Scope names the tenant's part the notification belongs to (a
	// clinic, a brand); optional. Its sends take turns with the tenant's
	// other scopes' (store.OutboxClaimParams.Scopes).
	Scope string `json:"scope,omitempty"`
}

// Accepted is the 202 body.
type Accepted struct {
	ID string `json:"id"`
}

// ServeHTTP answers POST /v1/notifications. Its answers are counted by the
// router's metrics.CountIntake, which sees the 401s of authentication too.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, detail, param string) {
		problem.Write(w, problem.Problem{Status: status, Detail: detail, Param: param})
	}
	tenant := auth.Tenant(r.Context())
	key, err := validate.OneHeader(r, "Idempotency-Key")
	switch {
	case err != nil:
		fail(http.StatusBadRequest, err.Error(), "Idempotency-Key")
		return
	case key == "":
		fail(http.StatusBadRequest, "the Idempotency-Key header is required", "Idempotency-Key")
		return
	case len(key) > maxKeyLen || !catalog.Printable(key):
		fail(http.StatusBadRequest, fmt.Sprintf("Idempotency-Key must be 1..%d printable characters", maxKeyLen), "Idempotency-Key")
		return
	}
	// validate.ReadJSON: 413 over MaxBody; 400 for what no store can hold,
	// an unknown field, or anything after the object.
	var req Request
	raw := validate.ReadJSON(w, r, &req, MaxBody)
	if raw == nil {
		return
	}
	canonicalBody, err := canonical.JSON(raw)
	if err != nil {
		fail(http.StatusBadRequest, "the body is not valid JSON: "+err.Error(), "")
		return
	}
	kind, params, inbox, ferr := h.Catalog.Validate(h.Clock.Now(), catalog.Request{
		Tenant: tenant, Recipient: req.Recipient, EventID: req.EventID, Kind: req.Kind,
		Params: req.Params, SendAt: req.SendAt, ExpiresAt: req.ExpiresAt, Scope: req.Scope,
	})
	if ferr != nil {
		Unprocessable(w, ferr)
		return
	}

	// The quota is taken once the kind names the lane, before the write;
	// a request that writes nothing new gives its token back.
	undo, wait := h.Quotas.LaneSend(tenant, kind.Lane)
	if wait > 0 {
		// Refused in its lane, it spends none of the send rate the
		// tenant's other lanes share.
		limits.GiveSendBack(r.Context())
		h.Metrics.QuotaRefused(kind.Lane)
		limits.OverQuota(w, wait, kind.Lane)
		return
	}

	now := h.Clock.Now()
	id := ids.New("ntf", now)
	body, _ := json.Marshal(Accepted{ID: id})
	sum := sha256.Sum256(canonicalBody)
	p := store.NotificationCreateParams{
		Tenant: tenant, IdempotencyKey: key, RequestHash: hex.EncodeToString(sum[:]), IdempotencyTTL: h.IdempotencyTTL,
		Response: body, ID: id, Recipient: req.Recipient, EventID: req.EventID, Kind: req.Kind,
		Lane: kind.Lane, Scope: req.Scope, Params: h.Seal.SealJSON(tenant, params), SendAt: req.SendAt, ExpiresAt: req.ExpiresAt, Channels: kind.Channels,
		Inbox: inbox, Fallback: kind.Fallback,
	}
	var hand dispatch.Hand // a place of this process's claimer or relay held for the row
	if p.Handable() {
		if hand = h.Handoff.Offer(kind.Lane, tenant, req.Scope); hand != nil {
			p.Claim = hand.Claim()
			defer func() {
				if hand != nil {
					// Nothing written claimed (or the store failed, and
					// what it may have committed claimed comes back when
					// its lease ends): the slot goes back, on every way
					// out of the handler.
					hand.Drop()
				}
			}()
		}
	}
	res, err := h.Store.NotificationCreate(r.Context(), p)
	if hand != nil && res.Claimed != nil && err == nil {
		hand.Take(*res.Claimed)
		hand = nil
		h.Metrics.Handed(kind.Lane)
	}
	if res.Outcome != store.Created {
		undo()
	}
	if err != nil && r.Context().Err() != nil {
		// The client went away (or the server is stopping) while the write
		// was under way: whether it committed is not known here, the client
		// hears no answer either way, and its retry with the same key
		// finds out. Not a store outage: 499, as proxies count a request
		// the client closed, and no error line.
		h.Logger.LogAttrs(r.Context(), slog.LevelDebug, "intake: the request ended before its write did", slog.String("tenant", tenant),
			slog.Any("error", err))
		w.WriteHeader(StatusClientClosed)
		return
	}
	if err != nil {
		if ok, held := h.unavailable.Allow(time.Now()); ok {
			h.Logger.LogAttrs(r.Context(), slog.LevelError, "intake: store unavailable", slog.String("tenant", tenant),
				slog.Int("more_since_last_line", held), slog.Any("error", err))
		}
		w.Header().Set("Retry-After", "1")
		fail(http.StatusServiceUnavailable, "the store is unavailable; retry with the same Idempotency-Key", "")
		return
	}
	switch res.Outcome {
	case store.Conflict:
		fail(http.StatusConflict, "this Idempotency-Key was used with a different request body", "Idempotency-Key")
		return
	case store.Replayed:
		w.Header().Set("Idempotent-Replayed", "true")
		body = res.Response
		var a Accepted
		if json.Unmarshal(body, &a) == nil {
			id = a.ID
		}
	case store.Created:
		h.Metrics.Accepted(kind.Lane)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/notifications/"+id)
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(body)
}

// Unprocessable answers 422 for a request catalog.Validate refused; an
// unknown kind's answer names the route that lists the known ones.
func Unprocessable(w http.ResponseWriter, ferr *catalog.FieldError) {
	detail := ferr.Detail
	if ferr.UnknownKind {
		detail += " (GET /v1/kinds lists the kinds this server knows)"
	}
	problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Detail: detail, Param: ferr.Param,
		MissingParams: ferr.Missing})
}
