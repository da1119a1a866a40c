package campaign

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
)

// MaxPageParams bounds the bytes of one page's recipient params after
// each is merged over the campaign's (the store keeps them merged): within
// the 64 KiB each, a page of 10,000 could otherwise make 640 MB of one
// request of a few hundred kilobytes.
const MaxPageParams = 32 << 20

// MaxPage is the most recipients one request may carry (DESIGN §8).
const MaxPage = 10_000

// Errors the HTTP layer maps to statuses.
var (
	// ErrNotFound: no campaign with that id for the tenant (404).
	ErrNotFound = store.ErrNotFound
	// ErrState: the campaign's state refuses the request (409): a page
	// after start, a start after cancel.
	ErrState = store.ErrCampaignState
	// ErrConflict: the Idempotency-Key was used with another body (409).
	ErrConflict = errors.New("campaign: this Idempotency-Key was used with a different request body")
)

// Recipient is one recipient of a request: its id and its own params,
// which override the campaign's key by key.
type Recipient struct {
	Recipient string          `json:"recipient"`
	Params    json.RawMessage `json:"params,omitempty"`
}

// Request is the body of POST /v1/campaigns.
type Request struct {
	Kind       string          `json:"kind"`
	Params     json.RawMessage `json:"params,omitempty"`
	Recipients []Recipient     `json:"recipients,omitempty"`
	SendAt     *time.Time      `json:"send_at,omitempty"`
	// Scope is given to each of the campaign's notifications (optional;
	// as a notification's "scope").
	Scope string `json:"scope,omitempty"`
}

// Service is the campaigns' logic: it checks requests against the
// catalog and writes through the store.
type Service struct {
	Store   store.Campaigns
	Catalog *catalog.Catalog
	Clock   clock.Clock
	// MaxRecipients caps one campaign's recipients (config
	// limits.campaign_max_recipients): a page that would take it past the
	// cap is refused whole (a *catalog.FieldError, param "recipients").
	// The store decides it, in the page's own transaction (store.
	// ErrCampaignFull). 0 is no cap.
	MaxRecipients int64
	// Seal seals the campaign's params and each recipient's before they
	// are stored (package seal); the fan-out copies them sealed into the
	// notifications. nil stores them plain.
	Seal *seal.Keyring
	// DraftTTL is how long a campaign may stay DRAFT after its creation:
	// its deadline (store.Campaign.DraftExpiresAt) is fixed then, by the
	// store's clock, and the leader's Runner ends it CANCELLED past it. 0
	// is DefaultDraftTTL.
	DraftTTL time.Duration
}

// DefaultDraftTTL is Service.DraftTTL's default: a week.
const DefaultDraftTTL = store.DefaultCampaignDraftTTL

// Create checks req and writes a DRAFT campaign with its first page. The
// same key and hash again answer the first campaign's id (replayed); the
// same key with another hash is ErrConflict. A request the catalog refuses
// is a *catalog.FieldError.
func (s *Service) Create(ctx context.Context, tenant, key, hash string, req Request) (id string, replayed bool, err error) {
	now := s.Clock.Now()
	kind, params, ferr := s.checkCampaign(now, tenant, req)
	if ferr != nil {
		return "", false, ferr
	}
	id = ids.New("cmp", now)
	rs, ferr := s.recipients(now, tenant, kind, params, id, req.Recipients)
	if ferr != nil {
		return "", false, ferr
	}
	s.sealParams(tenant, rs)
	res, err := s.Store.CampaignCreate(ctx, store.CampaignCreateParams{
		ID: id, Tenant: tenant, IdempotencyKey: key, RequestHash: hash, Kind: kind.Name, Lane: kind.Lane,
		Channels: kind.Channels, Fallback: kind.Fallback, Params: s.Seal.SealJSON(tenant, params), SendAt: req.SendAt, Recipients: rs,
		MaxRecipients: s.MaxRecipients, DraftTTL: s.DraftTTL, Scope: req.Scope,
	})
	if err != nil {
		return "", false, s.full(err)
	}
	switch res.Outcome {
	case store.Conflict:
		return "", false, ErrConflict
	case store.Replayed:
		return res.ID, true, nil
	}
	return id, false, nil
}

// AddRecipients checks a page against the campaign's kind and params and
// adds it; recipients the campaign has already are left as they are. It
// returns how many were new. A page whose new recipients would take the
// campaign past MaxRecipients adds nobody (a *catalog.FieldError); one
// sent again, which adds nobody, is accepted at the cap.
func (s *Service) AddRecipients(ctx context.Context, tenant, id string, page []Recipient) (int, error) {
	c, err := s.Store.CampaignGet(ctx, tenant, id)
	if err != nil {
		return 0, err
	}
	if c.State != store.CampaignDraft {
		return 0, ErrState
	}
	kind := s.Catalog.Kind(c.Kind)
	if kind == nil {
		return 0, &catalog.FieldError{Param: "kind", Detail: fmt.Sprintf("the campaign's kind %q is no longer in the catalog", c.Kind)}
	}
	params, err := s.Seal.OpenJSON(tenant, c.Params)
	if err != nil {
		return 0, fmt.Errorf("open the campaign's params: %w", err)
	}
	rs, ferr := s.recipients(s.Clock.Now(), tenant, kind, params, id, page)
	if ferr != nil {
		return 0, ferr
	}
	s.sealParams(tenant, rs)
	n, err := s.Store.CampaignAddRecipients(ctx, store.CampaignAddParams{Tenant: tenant, ID: id, Recipients: rs, MaxRecipients: s.MaxRecipients})
	return n, s.full(err)
}

// sealParams seals the recipients' own params in place.
func (s *Service) sealParams(tenant string, rs []store.CampaignRecipient) {
	for i := range rs {
		if rs[i].Params != nil {
			rs[i].Params = s.Seal.SealJSON(tenant, rs[i].Params)
		}
	}
}

// full turns the store's refusal of a page past the cap into the
// request's error naming the cap; any other err is returned as it is.
func (s *Service) full(err error) error {
	if !errors.Is(err, store.ErrCampaignFull) {
		return err
	}
	return &catalog.FieldError{Param: "recipients", Detail: fmt.Sprintf(
		"a campaign holds at most %d recipients (limits.campaign_max_recipients): this page's new recipients would take it past that; nothing of the page was added",
		s.MaxRecipients)}
}

// Start moves a DRAFT campaign to RUNNING (a RUNNING or DONE one is
// answered as it is); the leader's Runner fans it out on its next round.
func (s *Service) Start(ctx context.Context, tenant, id string) (store.Campaign, error) {
	return s.Store.CampaignStart(ctx, tenant, id)
}

// Cancel ends a campaign CANCELLED (store.Campaigns.CampaignCancel).
func (s *Service) Cancel(ctx context.Context, tenant, id string) (store.CampaignCancelResult, error) {
	return s.Store.CampaignCancel(ctx, tenant, id)
}

// Get returns a campaign with its counts.
func (s *Service) Get(ctx context.Context, tenant, id string) (store.Campaign, error) {
	return s.Store.CampaignGet(ctx, tenant, id)
}

// List returns a page of a tenant's campaigns with their counts, newest
// first (store.Campaigns.CampaignList).
func (s *Service) List(ctx context.Context, p store.CampaignListParams) ([]store.Campaign, error) {
	return s.Store.CampaignList(ctx, p)
}

// checkCampaign checks what the campaign's notifications share: the
// kind, its channels, send_at and the params as far as they go (a param
// each recipient brings is not missing here).
func (s *Service) checkCampaign(now time.Time, tenant string, req Request) (*catalog.Kind, json.RawMessage, *catalog.FieldError) {
	kind, params, _, ferr := s.Catalog.Validate(now, catalog.Request{
		Tenant: tenant, Recipient: "campaign", EventID: "campaign", Kind: req.Kind, Params: req.Params, SendAt: req.SendAt, Scope: req.Scope,
	})
	if ferr != nil && len(ferr.Missing) == 0 {
		return nil, nil, ferr
	}
	if ferr != nil {
		// Only params are missing: the recipients may bring them; each is
		// checked with its own below.
		kind = s.Catalog.Kind(req.Kind)
		if params, ferr = objectParams(req.Params, "params"); ferr != nil {
			return nil, nil, ferr
		}
	}
	for _, ch := range kind.Channels {
		if ch == heraldtype.ChannelInbox {
			return nil, nil, &catalog.FieldError{Param: "kind",
				Detail: fmt.Sprintf("kind %q writes an inbox item; campaigns do not support the inbox channel yet", req.Kind)}
		}
	}
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	return kind, params, nil
}

// recipients checks a page and turns it into the store's rows: each
// recipient's notification id, and its params merged over the campaign's
// when it has its own. The ids ascend in the page's order (ids.Ordered),
// the order the fan-out writes them in, so a batch's entries in the
// notifications' and the outbox's keys land side by side; the store keeps
// a recipient's first id (a page sent again proposes new ones, which are
// dropped with the recipient's repeat), and every write of its
// notification uses that one. Every recipient's notification must render: the
// campaign's params are rendered once, a recipient's own merge each time.
func (s *Service) recipients(now time.Time, tenant string, kind *catalog.Kind, params json.RawMessage, id string, page []Recipient) ([]store.CampaignRecipient, *catalog.FieldError) {
	if len(page) > MaxPage {
		return nil, &catalog.FieldError{Param: "recipients", Detail: fmt.Sprintf("a page holds at most %d recipients", MaxPage)}
	}
	base, ferr := objectParams(params, "params")
	if ferr != nil {
		return nil, ferr
	}
	var baseMap map[string]json.RawMessage
	_ = json.Unmarshal(base, &baseMap)
	baseChecked := false
	pageParams := 0 // bytes of the page's merged params, which the store keeps
	out := make([]store.CampaignRecipient, len(page))
	nids := ids.Ordered("ntf", now, len(page))
	first := make(map[string]int, len(page)) // each recipient's first place in the page
	// A recipient's params as its notification gets them, in one
	// spelling: its own merged (json.Marshal of a map: keys sorted,
	// compact), or the campaign's, spelt alike.
	campaignJSON, _ := mergedParams(baseMap, nil) // decoded from JSON: it encodes again
	campaignParams := string(campaignJSON)
	sent := func(own json.RawMessage) string {
		if own == nil {
			return campaignParams
		}
		return string(own)
	}
	for i, r := range page {
		at := fmt.Sprintf("recipients[%d]", i)
		rp := store.CampaignRecipient{Recipient: r.Recipient, NotificationID: nids[i]}
		merged := params
		if own := r.Params; len(own) > 0 && string(own) != "null" {
			o, ferr := objectParams(own, at+".params")
			if ferr != nil {
				return nil, ferr
			}
			var m map[string]json.RawMessage
			_ = json.Unmarshal(o, &m)
			b, err := mergedParams(baseMap, m)
			if err != nil {
				return nil, &catalog.FieldError{Param: at + ".params", Detail: "params must be a JSON object"}
			}
			if pageParams += len(b); pageParams > MaxPageParams {
				return nil, &catalog.FieldError{Param: "recipients", Detail: fmt.Sprintf(
					"the page's params, each recipient's merged over the campaign's, come to more than %d bytes: send smaller pages", MaxPageParams)}
			}
			merged, rp.Params = b, b
		}
		switch {
		case rp.Params != nil || !baseChecked:
			_, p, _, ferr := s.Catalog.Validate(now, catalog.Request{Tenant: tenant, Recipient: r.Recipient, EventID: id, Kind: kind.Name, Params: merged})
			if ferr != nil {
				ferr.Param = at + "." + ferr.Param
				return nil, ferr
			}
			if rp.Params != nil {
				rp.Params = p
			} else {
				baseChecked = true
			}
		case r.Recipient == "" || len(r.Recipient) > catalog.MaxRecipientLen || !catalog.Printable(r.Recipient):
			return nil, &catalog.FieldError{Param: at + ".recipient",
				Detail: fmt.Sprintf("recipient must be 1..%d printable characters", catalog.MaxRecipientLen)}
		}
		// A recipient gets one notification: a repeat with the same params
		// is the same one (the store keeps the first), with others it is
		// a mistake, which the page would otherwise drop without a word.
		if j, ok := first[r.Recipient]; ok && sent(out[j].Params) != sent(rp.Params) {
			return nil, &catalog.FieldError{Param: at, Detail: fmt.Sprintf(
				"%s repeats the recipient of recipients[%d] with other params: a recipient gets one notification", at, j)}
		} else if !ok {
			first[r.Recipient] = i
		}
		out[i] = rp
	}
	return out, nil
}

// mergedParams is own merged over base, as JSON with its keys sorted and
// its values compact (json.Marshal of a map of RawMessage): the params a
// recipient's notification gets, and equal params are equal bytes.
func mergedParams(base, own map[string]json.RawMessage) ([]byte, error) {
	all := maps.Clone(base)
	if all == nil {
		all = map[string]json.RawMessage{}
	}
	maps.Copy(all, own)
	return json.Marshal(all)
}

// objectParams returns raw if it is a JSON object (or "{}" for none).
func objectParams(raw json.RawMessage, param string) (json.RawMessage, *catalog.FieldError) {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}"), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, &catalog.FieldError{Param: param, Detail: param + " must be a JSON object"}
	}
	return raw, nil
}
