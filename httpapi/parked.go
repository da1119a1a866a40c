package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/cursor"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/validate"
)

// parkedAPI serves a tenant's parked messages:
//
//	GET  /v1/parked[?limit=N]                  → {"parked": [{message_id, notification_id, kind, lane, channel, reason, parked_at}]}
//	POST /v1/parked/{message_id}/requeue       → {"requeued": 1}, or 404
//	POST /v1/parked/requeue                    → {"requeued": N} (every parked message of the tenant)
//	POST /v1/parked/{message_id}/discard       → {"discarded": 1}, or 404; body {"reason": "…"} (1..500 characters, else 422)
//
// A tenant sees and acts on only its own messages (parked.Tenant): never
// another tenant's, nor a message that names no tenant (a body that is not
// a job), which only the operator's CLI shows.
type parkedAPI struct {
	svc    parked.Service
	logger *slog.Logger
}

// routeParked adds the parked-message endpoints to mux, behind authed.
func routeParked(mux *router, svc parked.Service, logger *slog.Logger, authed func(http.Handler) http.Handler) {
	pa := &parkedAPI{svc: svc, logger: logger}
	mux.Handle("GET /v1/parked", authed(http.HandlerFunc(pa.list)))
	mux.Handle("POST /v1/parked/requeue", authed(http.HandlerFunc(pa.requeue)))
	mux.Handle("POST /v1/parked/{message_id}/requeue", authed(http.HandlerFunc(pa.requeue)))
	mux.Handle("POST /v1/parked/{message_id}/discard", authed(http.HandlerFunc(pa.discard)))
}

func parkedScope(r *http.Request) parked.Scope { return parked.Tenant(auth.Tenant(r.Context())) }

func (p *parkedAPI) list(w http.ResponseWriter, r *http.Request) {
	q, perr := cursor.Query(r, "limit") // an unknown or repeated parameter is 400
	if perr != nil {
		problem.Write(w, *perr)
		return
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Detail: "limit must be 1..1000", Param: "limit"})
			return
		}
		limit = n
	}
	entries, err := p.svc.List(r.Context(), parkedScope(r), limit)
	if err != nil {
		p.logger.LogAttrs(r.Context(), slog.LevelError, "parked: list failed", slog.Any("error", err))
		problem.Unavailable(w, "parked messages are unavailable (the database or the broker did not answer); retry it")
		return
	}
	if entries == nil {
		entries = []parked.Entry{}
	}
	answerParked(w, map[string]any{"parked": entries})
}

func (p *parkedAPI) requeue(w http.ResponseWriter, r *http.Request) {
	// The requeue takes no body: one that holds anything (a list of ids,
	// say) is refused, so that it cannot requeue everything by mistake.
	var none struct{}
	if !validate.DecodeJSON(w, r, &none, 4<<10, true) {
		return
	}
	done, err := p.svc.Requeue(r.Context(), parkedScope(r), r.PathValue("message_id"))
	n := done.Total()
	if n > 0 {
		audit.Took(r, map[string]int{"requeued": n}) // even if it failed after these
	}
	switch {
	case errors.Is(err, parked.ErrNotFound):
		problem.New(w, http.StatusNotFound, "no such parked message")
		return
	case err != nil:
		p.logger.LogAttrs(r.Context(), slog.LevelError, "parked: requeue failed", slog.Int("requeued", n), slog.Any("error", err))
		problem.Unavailable(w, fmt.Sprintf("requeue failed after %d were requeued; retry it", n))
		return
	}
	answerParked(w, map[string]int{"requeued": n})
}

// discardBody is POST /v1/parked/{message_id}/discard's body. No body at
// all is a discard without a reason (422).
type discardBody struct {
	Reason string `json:"reason"`
}

func (p *parkedAPI) discard(w http.ResponseWriter, r *http.Request) {
	var body discardBody
	if !validate.DecodeJSON(w, r, &body, 16<<10, true) {
		return
	}
	tenant := auth.Tenant(r.Context())
	done, err := p.svc.Discard(r.Context(), parked.Tenant(tenant), parked.Discard{
		MessageID: r.PathValue("message_id"), Reason: body.Reason, Actor: "api:" + tenant,
	})
	switch {
	case done.Total() > 0:
		// Recorded, even if removing a parked copy failed after it.
		audit.Took(r, map[string]int{"discarded": 1})
	case err == nil:
		// It removed what an earlier discard, audited, left.
		audit.Skip(r)
	}
	switch {
	case errors.Is(err, parked.ErrReason):
		detail, _ := strings.CutPrefix(err.Error(), parked.ErrReason.Error()+": ")
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Detail: detail, Param: "reason"})
		return
	case errors.Is(err, parked.ErrNotFound):
		problem.New(w, http.StatusNotFound, "no such parked message")
		return
	case err != nil:
		p.logger.LogAttrs(r.Context(), slog.LevelError, "parked: discard failed",
			slog.String("message_id", r.PathValue("message_id")), slog.Any("error", err))
		detail := "discard failed; retry it"
		if errors.Is(err, parked.ErrCopyLeft) {
			detail = parked.ErrCopyLeft.Error()
		}
		problem.Unavailable(w, detail)
		return
	}
	answerParked(w, map[string]int{"discarded": 1})
}

func answerParked(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
