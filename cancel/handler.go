package cancel

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/problem"
)

// Handler serves POST /v1/notifications/{id}/cancel: 200 with the Result,
// 404 for an id the caller's tenant does not have, 503 when the store
// fails (nothing cancelled twice by a retry: the cancel is idempotent).
type Handler struct {
	Canceller *Canceller
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	res, err := h.Canceller.Cancel(r.Context(), auth.Tenant(r.Context()), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrNotFound):
		problem.New(w, http.StatusNotFound, "no such notification")
		return
	case err != nil:
		h.Canceller.logger().LogAttrs(r.Context(), slog.LevelError, "cancel: store unavailable", slog.Any("error", err))
		problem.Unavailable(w, "the store is unavailable; retry the cancel")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}
