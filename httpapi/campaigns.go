package httpapi

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/canonical"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/cursor"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// maxCampaignBody bounds a campaign request: a page of campaign.MaxPage
// recipients with their own params.
const maxCampaignBody = 16 << 20

// maxCampaignKeyLen bounds an Idempotency-Key, as intake does.
const maxCampaignKeyLen = 255

// DefaultCampaignBodies is how many campaign requests with a body (a create
// or a page) one router reads and writes at once (Config.CampaignBodies).
// A page of up to maxCampaignBody costs several times its size in memory
// while it is decoded, sealed and written (a page of 15 MiB: about 125 MB),
// so without a bound a few clients posting pages at once can take the
// process's memory, and every tenant's intake with it.
// It is limits.campaign_bodies' default.
const DefaultCampaignBodies = config.DefaultCampaignBodies

// DefaultCampaignBodyWait is how long a campaign request waits for one of
// the CampaignBodies slots before it is answered 503 (Config.CampaignBodyWait).
const DefaultCampaignBodyWait = 5 * time.Second

// campaignsAPI serves the campaigns (DESIGN §8; the logic is package
// campaign's):
//
//	POST /v1/campaigns                   {kind, params, recipients?, send_at?, scope?} → 202 {"id"} (Idempotency-Key)
//	POST /v1/campaigns/{id}/recipients   {"recipients": [{recipient, params?}]} → 200 {"added"}
//	POST /v1/campaigns/{id}/start        → 202 the campaign (started again: as it is, RUNNING or DONE)
//	POST /v1/campaigns/{id}/cancel       → 200 the campaign when cancelled, with "cancelled" and "in_flight"
//	GET  /v1/campaigns/{id}              → 200 {"id", "kind", "created_at", "state", "total", "enqueued", "sent", "suppressed", "failed", "unknown"},
//	                                           with "scope" and "send_at" when set, "expires_at" while DRAFT and "reason" once expired
//	GET  /v1/campaigns?state=&limit=&cursor= → 200 {"campaigns": [as GET shows each], "next_cursor"}, newest first
type campaignsAPI struct {
	svc    *campaign.Service
	logger *slog.Logger
	// bodies holds a token for each campaign request with a body being
	// read and written (DefaultCampaignBodies); bodyWait bounds the wait
	// for one.
	bodies   chan struct{}
	bodyWait time.Duration
}

// body takes one of the slots of the campaign requests with a body,
// waiting at most bodyWait for one. When none comes free it answers 503
// with Retry-After (the body read past and dropped: nothing was accepted,
// and the same request may be sent again) and ok is false; otherwise release gives the
// slot back.
func (a *campaignsAPI) body(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	select {
	case a.bodies <- struct{}{}:
		return func() { <-a.bodies }, true
	default:
	}
	t := time.NewTimer(a.bodyWait)
	defer t.Stop()
	select {
	case a.bodies <- struct{}{}:
		return func() { <-a.bodies }, true
	case <-t.C:
		// Read the body past, unkept (a small buffer at a time), so the
		// client, still sending it, gets the 503 rather than a reset.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxCampaignBody))
		problem.Unavailable(w, fmt.Sprintf("%d campaign requests with a body are being read at once on this server: retry", cap(a.bodies)))
	case <-r.Context().Done():
		problem.Unavailable(w, "the request ended while it waited for its turn: retry")
	}
	return nil, false
}

// routeCampaigns adds the campaign endpoints when the store keeps
// campaigns and there is a catalog to check them against.
func routeCampaigns(mux *router, cfg Config, authed func(http.Handler) http.Handler) {
	cs, ok := cfg.Store.(store.Campaigns)
	if !ok || cfg.Intake == nil || cfg.Intake.Catalog == nil {
		return
	}
	a := &campaignsAPI{svc: &campaign.Service{Store: cs, Catalog: cfg.Intake.Catalog, Clock: cfg.Intake.Clock, Seal: cfg.Seal,
		MaxRecipients: cfg.CampaignMaxRecipients, DraftTTL: cfg.CampaignDraftTTL}, logger: cfg.Logger,
		bodies:   make(chan struct{}, cmp.Or(max(cfg.CampaignBodies, 0), DefaultCampaignBodies)),
		bodyWait: cmp.Or(max(cfg.CampaignBodyWait, 0), DefaultCampaignBodyWait)}
	mux.Handle("POST /v1/campaigns", authed(http.HandlerFunc(a.create)))
	mux.Handle("POST /v1/campaigns/{id}/recipients", authed(http.HandlerFunc(a.add)))
	mux.Handle("POST /v1/campaigns/{id}/start", authed(http.HandlerFunc(a.start)))
	mux.Handle("POST /v1/campaigns/{id}/cancel", authed(http.HandlerFunc(a.cancel)))
	mux.Handle("GET /v1/campaigns/{id}", authed(http.HandlerFunc(a.get)))
	mux.Handle("GET /v1/campaigns", authed(http.HandlerFunc(a.list)))
}

// campaignView is a campaign as the API shows it.
type campaignView struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	CreatedAt  time.Time `json:"created_at"`
	Scope      string    `json:"scope,omitempty"`
	State      string    `json:"state"`
	Total      int64     `json:"total"`
	Enqueued   int64     `json:"enqueued"`
	Sent       int64     `json:"sent"`
	Suppressed int64     `json:"suppressed"`
	Failed     int64     `json:"failed"`
	Unknown    int64     `json:"unknown"`
	// SendAt is when the campaign's sends are due, when it was scheduled.
	SendAt *time.Time `json:"send_at,omitempty"`
	// ExpiresAt is when a DRAFT campaign not started by then is ended
	// CANCELLED; Reason is DRAFT_EXPIRED on one that was.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	// Cancelled and InFlight answer a cancel only.
	Cancelled *int64 `json:"cancelled,omitempty"`
	InFlight  *int64 `json:"in_flight,omitempty"`
}

func viewOf(c store.Campaign) campaignView {
	return campaignView{ID: c.ID, Kind: c.Kind, CreatedAt: c.CreatedAt, Scope: c.Scope, State: c.State, Total: c.Total, Enqueued: c.Enqueued,
		Sent: c.Counts.Sent, Suppressed: c.Counts.Suppressed, Failed: c.Counts.Failed, Unknown: c.Counts.Unknown,
		SendAt: c.SendAt, ExpiresAt: draftExpiresAt(c), Reason: c.Reason}
}

// draftExpiresAt is a DRAFT campaign's deadline; nil in any other state.
func draftExpiresAt(c store.Campaign) *time.Time {
	if c.State != store.CampaignDraft {
		return nil
	}
	return c.DraftExpiresAt
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers err as a problem: a catalog refusal 422 (a page past the
// campaign's cap among them, param "recipients"), no such campaign
// 404, a state or key conflict 409, anything else 503.
func (a *campaignsAPI) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	var ferr *catalog.FieldError
	switch {
	case errors.As(err, &ferr):
		intake.Unprocessable(w, ferr)
	case errors.Is(err, campaign.ErrNotFound):
		problem.New(w, http.StatusNotFound, "no such campaign")
	case errors.Is(err, campaign.ErrState):
		problem.New(w, http.StatusConflict, a.stateConflict(r))
	case errors.Is(err, campaign.ErrConflict):
		problem.Write(w, problem.Problem{Status: http.StatusConflict, Detail: err.Error(), Param: "Idempotency-Key"})
	default:
		a.logger.LogAttrs(r.Context(), slog.LevelError, "campaigns: "+what+" failed", slog.String("tenant", auth.Tenant(r.Context())), slog.Any("error", err))
		problem.Unavailable(w, "the store is unavailable; retry")
	}
}

// stateConflict says why the campaign r names refused a page or a start
// (campaign.ErrState): the state it is in, read now, and what that state
// allows.
func (a *campaignsAPI) stateConflict(r *http.Request) string {
	const rule = "pages are added while it is DRAFT, before its expires_at; a cancelled campaign, or a draft past its expires_at, does not start"
	c, err := a.svc.Get(r.Context(), auth.Tenant(r.Context()), r.PathValue("id"))
	switch {
	case err != nil:
		return "the campaign's state does not allow this (" + rule + ")"
	case c.State == store.CampaignDraft:
		return "the campaign is a DRAFT past its expires_at; it takes no pages and does not start (" + rule + ")"
	case c.State == store.CampaignCancelled && c.Reason != "":
		return fmt.Sprintf("the campaign is CANCELLED (%s); it takes no pages and does not start", c.Reason)
	case c.State == store.CampaignCancelled:
		return "the campaign is CANCELLED; it takes no pages and does not start"
	}
	return fmt.Sprintf("the campaign is %s: it has started, and takes no more pages (%s)", c.State, rule)
}

func (a *campaignsAPI) create(w http.ResponseWriter, r *http.Request) {
	key, err := validate.OneHeader(r, "Idempotency-Key")
	if err != nil {
		problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: "Idempotency-Key", Detail: err.Error()})
		return
	}
	if key == "" || len(key) > maxCampaignKeyLen || !catalog.Printable(key) {
		problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: "Idempotency-Key",
			Detail: fmt.Sprintf("the Idempotency-Key header is required: 1..%d printable characters", maxCampaignKeyLen)})
		return
	}
	release, ok := a.body(w, r)
	if !ok {
		return
	}
	defer release()
	var req campaign.Request
	raw := validate.ReadJSON(w, r, &req, maxCampaignBody)
	if raw == nil {
		return
	}
	c, err := canonical.JSON(raw)
	if err != nil {
		problem.New(w, http.StatusBadRequest, "the body is not valid JSON")
		return
	}
	sum := sha256.Sum256(c)
	id, replayed, err := a.svc.Create(r.Context(), auth.Tenant(r.Context()), key, hex.EncodeToString(sum[:]), req)
	if err != nil {
		a.fail(w, r, "create", err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", "/v1/campaigns/"+id)
	writeJSON(w, http.StatusAccepted, map[string]string{"id": id})
}

func (a *campaignsAPI) add(w http.ResponseWriter, r *http.Request) {
	release, ok := a.body(w, r)
	if !ok {
		return
	}
	defer release()
	var page struct {
		Recipients []campaign.Recipient `json:"recipients"`
	}
	if validate.ReadJSON(w, r, &page, maxCampaignBody) == nil {
		return
	}
	n, err := a.svc.AddRecipients(r.Context(), auth.Tenant(r.Context()), r.PathValue("id"), page.Recipients)
	if err != nil {
		a.fail(w, r, "add recipients", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"added": n})
}

func (a *campaignsAPI) start(w http.ResponseWriter, r *http.Request) {
	c, err := a.svc.Start(r.Context(), auth.Tenant(r.Context()), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, "start", err)
		return
	}
	writeJSON(w, http.StatusAccepted, viewOf(c))
}

func (a *campaignsAPI) cancel(w http.ResponseWriter, r *http.Request) {
	res, err := a.svc.Cancel(r.Context(), auth.Tenant(r.Context()), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, "cancel", err)
		return
	}
	v := viewOf(res.Campaign)
	if !res.Already {
		v.Cancelled, v.InFlight = &res.Cancelled, &res.InFlight
	}
	writeJSON(w, http.StatusOK, v)
}

// campaignListDomain names the campaigns' listing in its cursors
// (package cursor), which are bound to its tenant and state filter.
const campaignListDomain = "herald/v1/campaigns cursor"

// campaignStates are the states GET /v1/campaigns?state= takes.
var campaignStates = []string{store.CampaignDraft, store.CampaignRunning, store.CampaignDone, store.CampaignCancelled}

// list answers GET /v1/campaigns: the tenant's campaigns, newest first,
// each as GET /v1/campaigns/{id} shows it. Query parameters, each
// optional and given at most once: state (one of campaignStates), limit
// (1..cursor.MaxLimit, default cursor.DefaultLimit), cursor (the
// previous page's next_cursor, with the same state). Anything else is 400.
func (a *campaignsAPI) list(w http.ResponseWriter, r *http.Request) {
	bad := func(param, format string, args ...any) {
		problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: param, Detail: fmt.Sprintf(format, args...)})
	}
	q, perr := cursor.Query(r, "state", "limit", "cursor")
	var limit int
	if perr == nil {
		limit, perr = cursor.Limit(q)
	}
	if perr != nil {
		problem.Write(w, *perr)
		return
	}
	tenant := auth.Tenant(r.Context())
	p := store.CampaignListParams{Tenant: tenant, State: q.Get("state"), Limit: limit}
	if p.State != "" && !slices.Contains(campaignStates, p.State) {
		bad("state", "unknown state %q; one of %s", p.State, strings.Join(campaignStates, ", "))
		return
	}
	bound := []string{tenant, p.State}
	if s := q.Get("cursor"); s != "" {
		pos, err := cursor.Decode(campaignListDomain, bound, s)
		if err != nil {
			bad("cursor", "the cursor is not valid for this listing: pass next_cursor unchanged, with the same state")
			return
		}
		p.Before = &pos
	}
	want := p.Limit
	p.Limit++ // cursor.Page
	cs, err := a.svc.List(r.Context(), p)
	if err != nil {
		a.fail(w, r, "list", err)
		return
	}
	cs, more := cursor.Page(cs, want)
	page := struct {
		Campaigns  []campaignView `json:"campaigns"`
		NextCursor *string        `json:"next_cursor"`
	}{Campaigns: make([]campaignView, 0, len(cs))}
	for _, c := range cs {
		page.Campaigns = append(page.Campaigns, viewOf(c))
	}
	if more {
		c := cursor.Encode(campaignListDomain, bound, cs[len(cs)-1].Position())
		page.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, page)
}

func (a *campaignsAPI) get(w http.ResponseWriter, r *http.Request) {
	c, err := a.svc.Get(r.Context(), auth.Tenant(r.Context()), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, "read", err)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(c))
}
