// Package httpapi assembles herald's HTTP surface: authentication, the intake
// and read endpoints, the list, cancel and kinds endpoints (everyday.go),
// recipient profiles, health, readiness (the handler it is given) and
// metrics, and the operator's routes (ops.go). Every error is
// application/problem+json.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/consent"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/inbox"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/limits"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/stream"
	"github.com/heraldhq/herald/validate"
)

// Config wires the API.
type Config struct {
	// Keys are the config-file keys (every scope) where APIKeys is nil;
	// /v1/me/… and /v1/ops/… name them in their refusals either way.
	Keys *auth.Keys
	// APIKeys verifies API keys, stored and configured, and their scopes
	// (keys.go).
	APIKeys *apikeys.Verifier
	// Limits are the per-key request and per-tenant send rates; nil
	// limits nothing.
	Limits *limits.Limiter
	// Audit records admin actions; nil records none.
	Audit *audit.Log
	// Now is the time key expiries are checked against. Defaults to
	// time.Now.
	Now func() time.Time
	// routes, when set, receives the patterns (Routes).
	routes *[]string
	// Operators are the operator keys of /v1/ops/… (ops.go); nil refuses
	// every request there.
	Operators *auth.Keys
	Intake    *intake.Handler
	Lookup    *lookup.Handler
	// Parked lists, requeues and discards parked messages; nil leaves
	// /v1/parked out.
	Parked parked.Service
	Store  store.Store
	// Seal seals and opens the personal data the profile, device and
	// campaign routes take and show (package seal); nil keeps it plain.
	Seal    *seal.Keyring
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Inbox serves the recipient token mint and /v1/me/… (me.go); nil
	// leaves them out.
	Inbox *inbox.API
	// Stream serves GET /v1/me/stream (stream.go); nil leaves it out.
	Stream *stream.Hub
	// Callbacks serves POST /v1/callbacks/{provider} (callbacks.go); nil
	// leaves it out.
	Callbacks http.Handler
	// Ready answers GET /readyz (app's readiness checks); nil leaves
	// /readyz out.
	Ready http.Handler
	// MetricsToken, when set, is the bearer token GET /metrics requires
	// (MetricsHandler); MetricsApart leaves /metrics out (config
	// metrics.listen serves it on a listener of its own).
	MetricsToken string
	MetricsApart bool
	// CampaignMaxRecipients caps one campaign's recipients (config
	// limits.campaign_max_recipients; campaigns.go); 0 is no cap.
	CampaignMaxRecipients int64
	// CampaignDraftTTL fixes a new campaign's deadline to start (config
	// campaign_draft_ttl; campaign.Service.DraftTTL). 0 is
	// campaign.DefaultDraftTTL.
	CampaignDraftTTL time.Duration
	// CampaignBodies bounds the campaign requests with a body (a create or
	// a page, campaigns.go) read and written at once; one that finds none
	// free within CampaignBodyWait is 503 with Retry-After. Defaults to
	// DefaultCampaignBodies (4).
	CampaignBodies int
	// CampaignBodyWait is how long a campaign request waits for a free
	// CampaignBodies slot. Defaults to DefaultCampaignBodyWait (5 seconds).
	CampaignBodyWait time.Duration
}

// New returns the router.
func New(cfg Config) http.Handler {
	mux := newRouter()
	defer mux.report(cfg.routes)
	authed := tenantGuard(cfg) // keys.go: the key, its scope and rate, the audit
	mux.Handle("POST /v1/notifications", cfg.Metrics.CountIntake(authed(sendLimited(cfg, cfg.Intake))))
	mux.Handle("GET /v1/notifications/{id}", authed(cfg.Lookup))
	// The everyday API: list, cancel, kinds (everyday.go).
	routeEveryday(mux, cfg, authed)
	pr := &profiles{store: cfg.Store, logger: cfg.Logger, seal: cfg.Seal}
	mux.Handle("PUT /v1/recipients/{recipient}/profile", authed(http.HandlerFunc(pr.put)))
	mux.Handle("PATCH /v1/recipients/{recipient}/profile", authed(http.HandlerFunc(pr.patch)))
	mux.Handle("GET /v1/recipients/{recipient}/profile", authed(http.HandlerFunc(pr.get)))
	routeDevices(mux, cfg, authed)   // devices.go
	routeErasure(mux, cfg, authed)   // erasure.go
	routeConsent(mux, cfg, authed)   // consent.go
	routeCampaigns(mux, cfg, authed) // campaigns.go
	if cfg.Parked != nil {
		routeParked(mux, cfg.Parked, cfg.Logger, authed) // parked.go
	}
	routeSettle(mux, cfg, authed) // settle.go
	// The recipient token mint and /v1/me/… (me.go).
	routeMe(mux, cfg, authed)
	routeStream(mux, cfg)        // stream.go
	routeAdmin(mux, cfg, authed) // keys.go
	routeOps(mux, cfg)           // ops.go
	routeCallbacks(mux, cfg)     // callbacks.go
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	if cfg.Ready != nil {
		mux.Handle("GET /readyz", cfg.Ready)
	}
	if cfg.Metrics != nil && !cfg.MetricsApart {
		mux.Handle("GET /metrics", MetricsHandler(cfg.Metrics, cfg.MetricsToken, cfg.Logger))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// This pattern matches every path and method the others do not,
		// so the mux never answers 405 itself: a path that another method
		// serves gets it here.
		if allow := allowedMethods(mux.ServeMux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			problem.New(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not served here; this endpoint takes %s", r.Method, strings.Join(allow, ", ")))
			return
		}
		problem.New(w, http.StatusNotFound, "no such endpoint")
	})
	// validate.Edge: a path or query no store can hold is a 400 before any
	// route runs.
	return recoverer(cfg.Logger, validate.Edge(mux))
}

// allowedMethods lists the methods mux serves r's path with, by a route
// other than the catch-all.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	probe := r.Clone(r.Context())
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

func recoverer(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				// The route, not the path: a path names a recipient (often
				// an e-mail address or a phone number) or a device token.
				logger.LogAttrs(r.Context(), slog.LevelError, "http: handler panicked", slog.String("route", r.Pattern), slog.Any("panic", v))
				problem.New(w, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// profiles serves a recipient's contact points and consent.
type profiles struct {
	store  store.Store
	logger *slog.Logger
	seal   *seal.Keyring
}

// maxProfileBody bounds PUT /v1/recipients/{recipient}/profile's body.
const maxProfileBody = 16 << 10

type profileBody struct {
	Addresses map[string]string `json:"addresses"`
	Consent   map[string]bool   `json:"consent"`
	Language  string            `json:"language,omitempty"`
	TimeZone  string            `json:"time_zone,omitempty"`
}

func (p *profiles) put(w http.ResponseWriter, r *http.Request) {
	var body profileBody
	if !validate.DecodeJSON(w, r, &body, maxProfileBody, false) {
		return
	}
	prof := store.Profile{
		Tenant: auth.Tenant(r.Context()), Recipient: r.PathValue("recipient"),
		Addresses: map[heraldtype.Channel]string{}, Consent: map[heraldtype.Channel]bool{},
		Language: body.Language, TimeZone: body.TimeZone,
	}
	for ch, a := range body.Addresses {
		if p := checkAddress(ch, a); p != nil {
			problem.Write(w, *p)
			return
		}
		prof.Addresses[heraldtype.Channel(ch)] = a
	}
	for ch, c := range body.Consent {
		if p := checkChannel("consent", ch); p != nil {
			problem.Write(w, *p)
			return
		}
		prof.Consent[heraldtype.Channel(ch)] = c
	}
	if p := checkLanguageAndZone(body.Language, body.TimeZone); p != nil {
		problem.Write(w, *p)
		return
	}
	seal.SealMap(p.seal, seal.Address, prof.Tenant, prof.Addresses)
	if err := p.store.ProfilePutBy(r.Context(), prof, consent.Actor(r)); err != nil {
		p.logger.LogAttrs(r.Context(), slog.LevelError, "profiles: store unavailable", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (p *profiles) get(w http.ResponseWriter, r *http.Request) {
	prof, err := p.store.ProfileGet(r.Context(), auth.Tenant(r.Context()), r.PathValue("recipient"))
	if errors.Is(err, store.ErrNotFound) {
		problem.New(w, http.StatusNotFound, "no profile for this recipient")
		return
	}
	if err != nil {
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	if err := seal.OpenMap(p.seal, seal.Address, prof.Tenant, prof.Addresses); err != nil {
		p.logger.LogAttrs(r.Context(), slog.LevelError, "profiles: an address does not open", slog.Any("error", err))
		detail := "the profile's addresses are sealed with a key this herald does not hold (personal_data.keys)"
		if errors.Is(err, seal.ErrCorrupt) {
			// The key is held: the value was changed, or sealed for
			// another tenant (a row copied between tenants).
			detail = "the profile's addresses do not open with this herald's keys: changed, or sealed for another tenant"
		}
		problem.New(w, http.StatusInternalServerError, detail)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(prof)
}
