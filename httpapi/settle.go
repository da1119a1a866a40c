package httpapi

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/settle"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// settleAPI records a person's word on an UNKNOWN delivery (package
// settle, "A person's word"):
//
//	POST /v1/deliveries/{message_id}/settle  body {"result": "delivered" | "failed"}
//	  → 200 {"message_id", "state", "reason"}: DELIVERED(SETTLED_DELIVERED) or PERMANENT_FAILURE(SETTLED_FAILED);
//	        also for a retry of a settle that took effect (the same result again), which records nothing more
//	  → 404 no delivery of that message id is the tenant's
//	  → 409 the delivery is not UNKNOWN (the problem names its state): a report, a receipt or
//	        another person settled it first, or it never was UNKNOWN
//	  → 422 a result that is neither
//
// An admin key's route, audited (delivery.settle, the message id, the
// result as a figure).
type settleAPI struct {
	store   settle.Store
	metrics *metrics.Metrics
	logger  *slog.Logger
}

func routeSettle(mux *router, cfg Config, authed func(http.Handler) http.Handler) {
	sa := &settleAPI{store: cfg.Store, metrics: cfg.Metrics, logger: cfg.Logger}
	mux.Handle("POST /v1/deliveries/{message_id}/settle", authed(http.HandlerFunc(sa.settle)))
}

type settleBody struct {
	Result settle.Result `json:"result"`
}

// settled is the answer: the delivery as the person left it.
type settled struct {
	MessageID string `json:"message_id"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
}

func (sa *settleAPI) settle(w http.ResponseWriter, r *http.Request) {
	var body settleBody
	if !validate.DecodeJSON(w, r, &body, 4<<10, false) {
		return
	}
	mid, tenant := r.PathValue("message_id"), auth.Tenant(r.Context())
	if tenant == "" {
		// "" is the operator's reach (every tenant's): never an API key's.
		sa.logger.LogAttrs(r.Context(), slog.LevelError, "settle: a request with no tenant reached the route")
		problem.New(w, http.StatusNotFound, "no delivery of that message id")
		return
	}
	out, err := settle.ByPerson(r.Context(), sa.store, tenant, mid, body.Result)
	switch {
	case errors.Is(err, settle.ErrResult):
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Detail: `result must be "delivered" or "failed"`, Param: "result"})
		return
	case errors.Is(err, store.ErrNotFound):
		problem.New(w, http.StatusNotFound, "no delivery of that message id")
		return
	case errors.Is(err, settle.ErrNotUnknown):
		problem.New(w, http.StatusConflict, "only an UNKNOWN delivery is settled by a person; this one is "+string(out.From))
		return
	case err != nil:
		sa.logger.LogAttrs(r.Context(), slog.LevelError, "settle: a person's settle failed",
			slog.String("message_id", mid), slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the delivery could not be settled; retry it")
		return
	}
	state, reason, _ := body.Result.Moves()
	if out.Moved {
		audit.Took(r, map[string]int{string(body.Result): 1})
		sa.metrics.SettledByPerson(string(body.Result))
	} else {
		audit.Skip(r) // settled so by an earlier call, which was recorded
	}
	writeJSON(w, http.StatusOK, settled{MessageID: mid, State: string(state), Reason: reason})
}
