package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/recount"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// The operator's routes, which show every tenant's figures:
//
//	GET /v1/ops/reconcile   → 200 the last reconciliation's report (package reconcile), as it was kept;
//	                          404 before the first run
//	POST /v1/ops/inbox/recount  body {"tenant"?, "recipient"?} (or none: every tenant) → 200 the
//	                          recount's report (package recount): {"checked", "repaired", "drifted":
//	                          [{"tenant", "recipient", "was", "now"}]}; 422 for a recipient without
//	                          its tenant
//
// They take an operator key (Config.Operators, config operator_keys): a
// tenant's API key is refused with 403, no key or an unknown one with 401.
// An operator key maps to no tenant, so every tenant route refuses it (401).
type opsAPI struct {
	store   store.Store
	metrics *metrics.Metrics
	logger  *slog.Logger
}

// routeOps adds the operator's routes to mux.
func routeOps(mux *router, cfg Config) {
	o := &opsAPI{store: cfg.Store, metrics: cfg.Metrics, logger: cfg.Logger}
	isAPIKey := func(r *http.Request) bool {
		authz := r.Header.Get("Authorization")
		if _, ok := cfg.Keys.Lookup(authz); ok {
			return true
		}
		key, ok := auth.Bearer(authz)
		if !ok || cfg.APIKeys == nil {
			return false
		}
		_, err := cfg.APIKeys.Verify(r.Context(), key)
		return err == nil
	}
	mux.Handle("GET /v1/ops/reconcile", requireOperator(cfg.Operators, isAPIKey, http.HandlerFunc(o.reconcile)))
	mux.Handle("POST /v1/ops/inbox/recount", requireOperator(cfg.Operators, isAPIKey,
		cfg.Audit.Action(audit.InboxRecount, nil, http.HandlerFunc(o.inboxRecount))))
}

// requireOperator lets through a request with an operator key; a valid
// API key (isAPIKey: a config key or a stored one) is 403, anything else
// 401.
func requireOperator(operators *auth.Keys, isAPIKey func(*http.Request) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authz, ok := auth.Authorization(w, r)
		if !ok {
			return
		}
		if operators != nil {
			if _, ok := operators.Lookup(authz); ok {
				// Who acts, for the audit log: the key's digest, not the key.
				key, _ := auth.Bearer(authz)
				id := "operator:" + strings.TrimPrefix(apikeys.StaticID(key), "config:")
				next.ServeHTTP(w, r.WithContext(apikeys.WithPrincipal(r.Context(), apikeys.Principal{KeyID: id, Name: "operator"})))
				return
			}
		}
		if isAPIKey(r) {
			problem.New(w, http.StatusForbidden, "an operator key is required: an API key reads only its tenant's routes")
			return
		}
		auth.Refuse(w, "herald operator", "", "a valid operator key is required: Authorization: Bearer <operator key>")
	})
}

func (o *opsAPI) reconcile(w http.ResponseWriter, r *http.Request) {
	run, err := o.store.ReconcileRunLast(r.Context())
	switch {
	case errors.Is(err, store.ErrNotFound):
		problem.New(w, http.StatusNotFound, "no reconciliation has run yet")
		return
	case err != nil:
		o.logger.LogAttrs(r.Context(), slog.LevelError, "ops: reading the last reconciliation failed", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(run.Report, '\n'))
}

func (o *opsAPI) inboxRecount(w http.ResponseWriter, r *http.Request) {
	var p recount.Params
	if !validate.DecodeJSON(w, r, &p, 4<<10, true) {
		return
	}
	rep, err := recount.Run(r.Context(), o.store, p, o.metrics, o.logger)
	switch {
	case errors.Is(err, recount.ErrRecipientWithoutTenant):
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Detail: "a recipient needs its tenant", Param: "tenant"})
		return
	case err != nil:
		o.logger.LogAttrs(r.Context(), slog.LevelError, "ops: inbox recount failed", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}
