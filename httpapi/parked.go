package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/problem"
)

// parkedAPI serves a tenant's parked messages:
//
//	GET  /v1/parked[?limit=N]                  → {"parked": [{message_id, notification_id, lane, channel, reason, parked_at}]}
//	POST /v1/parked/{message_id}/requeue       → {"requeued": 1}, or 404
//	POST /v1/parked/requeue                    → {"requeued": N} (every parked message of the tenant)
//
// A tenant sees and requeues only its own messages.
type parkedAPI struct {
	svc    parked.Service
	logger *slog.Logger
}

func (p *parkedAPI) list(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Detail: "limit must be 1..1000", Param: "limit"})
			return
		}
		limit = n
	}
	entries, err := p.svc.List(r.Context(), auth.Tenant(r.Context()), limit)
	if err != nil {
		p.logger.LogAttrs(r.Context(), slog.LevelError, "parked: list failed", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "parked messages are unavailable")
		return
	}
	if entries == nil {
		entries = []parked.Entry{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"parked": entries})
}

func (p *parkedAPI) requeue(w http.ResponseWriter, r *http.Request) {
	n, err := p.svc.Requeue(r.Context(), auth.Tenant(r.Context()), r.PathValue("message_id"))
	switch {
	case errors.Is(err, parked.ErrNotFound):
		problem.New(w, http.StatusNotFound, "no such parked message")
		return
	case err != nil:
		p.logger.LogAttrs(r.Context(), slog.LevelError, "parked: requeue failed", slog.Int("requeued", n), slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "requeue failed; retry it")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"requeued": n})
}
