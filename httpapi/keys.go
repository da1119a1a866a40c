package httpapi

import (
	"net/http"
	"slices"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
)

// Every API-key route and the scope it needs (docs/api-keys.md lists them
// too). A route of the router that takes an API key and is missing here is
// refused with 500 (apikeys.Guard fails closed), and TestEveryRoute walks
// the router's own list of routes, so a new route cannot be forgotten.
// /v1/me/… (recipient tokens), /v1/ops/… (operator keys), the providers'
// callbacks and the health, readiness and metrics routes take no API key.
var routeScopes = map[string]apikeys.Scope{
	"POST /v1/notifications":                            apikeys.ScopeSend,
	"POST /v1/notifications/{id}/cancel":                apikeys.ScopeSend,
	"PUT /v1/recipients/{recipient}/profile":            apikeys.ScopeSend,
	"PATCH /v1/recipients/{recipient}/profile":          apikeys.ScopeSend,
	"PUT /v1/recipients/{recipient}/devices/{token}":    apikeys.ScopeSend,
	"DELETE /v1/recipients/{recipient}/devices/{token}": apikeys.ScopeSend,
	"POST /v1/recipients/{recipient}/tokens":            apikeys.ScopeSend,
	"POST /v1/campaigns":                                apikeys.ScopeSend,
	"POST /v1/campaigns/{id}/recipients":                apikeys.ScopeSend,
	"POST /v1/campaigns/{id}/start":                     apikeys.ScopeSend,
	"POST /v1/campaigns/{id}/cancel":                    apikeys.ScopeSend,

	"GET /v1/notifications":                          apikeys.ScopeRead,
	"GET /v1/notifications/{id}":                     apikeys.ScopeRead,
	"GET /v1/kinds":                                  apikeys.ScopeRead,
	"GET /v1/recipients/{recipient}/profile":         apikeys.ScopeRead,
	"GET /v1/recipients/{recipient}/devices":         apikeys.ScopeRead,
	"GET /v1/recipients/{recipient}/consent-history": apikeys.ScopeRead,
	"GET /v1/campaigns/{id}":                         apikeys.ScopeRead,
	"GET /v1/campaigns":                              apikeys.ScopeRead,

	"DELETE /v1/recipients/{recipient}":       apikeys.ScopeAdmin,
	"GET /v1/parked":                          apikeys.ScopeAdmin,
	"POST /v1/parked/requeue":                 apikeys.ScopeAdmin,
	"POST /v1/parked/{message_id}/requeue":    apikeys.ScopeAdmin,
	"POST /v1/parked/{message_id}/discard":    apikeys.ScopeAdmin,
	"POST /v1/deliveries/{message_id}/settle": apikeys.ScopeAdmin,
	"POST /v1/admin/keys":                     apikeys.ScopeAdmin,
	"GET /v1/admin/keys":                      apikeys.ScopeAdmin,
	"POST /v1/admin/keys/{id}/revoke":         apikeys.ScopeAdmin,
	"GET /v1/admin/audit":                     apikeys.ScopeAdmin,
}

// routeAudits are the API-key routes whose success is an audit entry
// (package audit), with the entry's action and target. The key routes
// write their own (they know the key's id).
var routeAudits = map[string]struct {
	action string
	target func(*http.Request) string
}{
	"DELETE /v1/recipients/{recipient}":       {audit.RecipientErase, audit.RecipientPath},
	"POST /v1/parked/requeue":                 {audit.ParkedRequeue, nil},
	"POST /v1/parked/{message_id}/requeue":    {audit.ParkedRequeue, audit.PathValue("message_id")},
	"POST /v1/parked/{message_id}/discard":    {audit.ParkedDiscard, audit.PathValue("message_id")},
	"POST /v1/deliveries/{message_id}/settle": {audit.DeliverySettle, audit.PathValue("message_id")},
}

// RouteScope is the scope a route pattern needs; false for a route that
// takes no API key.
func RouteScope(pattern string) (apikeys.Scope, bool) {
	s, ok := routeScopes[pattern]
	return s, ok
}

// router is the API's mux; it keeps the patterns it was given (Routes).
type router struct {
	*http.ServeMux
	patterns []string
}

func newRouter() *router { return &router{ServeMux: http.NewServeMux()} }

// Handle adds a route and keeps its pattern.
func (m *router) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc adds a route and keeps its pattern.
func (m *router) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Routes returns the route patterns New(cfg) serves, in the order they
// were added.
func Routes(cfg Config) []string {
	var out []string
	cfg.routes = &out
	New(cfg)
	return out
}

// tenantGuard is the middleware of every API-key route: the key with the
// route's scope (apikeys.Guard), its request rate (limits), and the
// route's audit entry.
func tenantGuard(cfg Config) func(http.Handler) http.Handler {
	keys := cfg.APIKeys
	if keys == nil {
		// Without a verifier (tests): cfg.Keys, with every scope.
		keys = apikeys.NewVerifier(apikeys.Config{Lookup: func(key string) (apikeys.Principal, bool) {
			tenant, ok := cfg.Keys.Lookup("Bearer " + key)
			return apikeys.Principal{KeyID: apikeys.StaticID(key), Name: "config", Tenant: tenant, Scopes: apikeys.Scopes}, ok
		}})
	}
	// An operator key maps to no tenant: a route of the tenants' says so,
	// rather than that the key is not known.
	operatorKey := func(key string) (string, bool) {
		if _, ok := cfg.Operators.Lookup("Bearer " + key); ok {
			return "an operator key opens /v1/ops/… only; this route takes a tenant's API key", true
		}
		return "", false
	}
	guard := keys.Guard(func(r *http.Request) (apikeys.Scope, bool) { return RouteScope(r.Pattern) }, cfg.Logger, operatorKey)
	keyID := func(r *http.Request) string {
		p, _ := apikeys.From(r.Context())
		return p.KeyID
	}
	return func(next http.Handler) http.Handler {
		audited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a, ok := routeAudits[r.Pattern]; ok && cfg.Audit != nil {
				cfg.Audit.Action(a.action, a.target, next).ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
		return guard(cfg.Limits.Keys(keyID, audited))
	}
}

// sendLimited is POST /v1/notifications' tenant send rate.
func sendLimited(cfg Config, next http.Handler) http.Handler {
	return cfg.Limits.Sends(func(r *http.Request) string { return auth.Tenant(r.Context()) }, next)
}

// routeAdmin adds a tenant's key administration and audit log (admin
// scope): package apikeys' Admin and package audit's Handler.
func routeAdmin(mux *router, cfg Config, authed func(http.Handler) http.Handler) {
	if cfg.Store == nil {
		return
	}
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	a := &apikeys.Admin{Store: cfg.Store, Now: now, Logger: cfg.Logger}
	if cfg.Audit != nil {
		a.Record = cfg.Audit.Record
	}
	mux.Handle("POST /v1/admin/keys", authed(http.HandlerFunc(a.Create)))
	mux.Handle("GET /v1/admin/keys", authed(http.HandlerFunc(a.List)))
	mux.Handle("POST /v1/admin/keys/{id}/revoke", authed(http.HandlerFunc(a.Revoke)))
	mux.Handle("GET /v1/admin/audit", authed(&audit.Handler{Store: cfg.Store, Logger: cfg.Logger}))
}

// report hands the patterns to out, when set.
func (m *router) report(out *[]string) {
	if out != nil {
		*out = slices.Clone(m.patterns)
	}
}
