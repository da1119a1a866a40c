package config

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Limits are the rates and caps of issue 13 (package limits, catalog's
// caps). A rate of 0 is no limit.
type Limits struct {
	// KeyRate is the requests a second one API key may make over every
	// route, per herald process. Defaults to 0 (no limit).
	KeyRate float64 `yaml:"key_rate"`
	// KeyBurst is the most requests of one key at once. Defaults to twice
	// key_rate (at least 1).
	KeyBurst int `yaml:"key_burst"`
	// SendRate is the notifications a second one tenant may send (POST
	// /v1/notifications, all its keys together), per herald process.
	// Defaults to 0 (no limit).
	SendRate float64 `yaml:"send_rate"`
	// SendBurst is the most sends of one tenant at once. Defaults to twice
	// send_rate (at least 1).
	SendBurst int `yaml:"send_burst"`
	// ParamsMax caps the values in a request's params, counted at every
	// depth (an object's members, an array's elements). Defaults to 1,000.
	ParamsMax int `yaml:"params_max"`
	// ParamsDepthMax caps how deep params nest (a flat object is 1).
	// Defaults to 8.
	ParamsDepthMax int `yaml:"params_depth_max"`
	// RenderedMaxBytes caps one rendered title or body, at intake (422)
	// and at send time. Defaults to 65,536.
	RenderedMaxBytes int `yaml:"rendered_max_bytes"`
	// KeyRecheck is how often a process reads the stored keys' revision
	// (package apikeys): the most a revocation may take to reach a process
	// that heard no announcement of it (SQLite processes sharing a file; a
	// lost PostgreSQL NOTIFY). Defaults to 1 second.
	KeyRecheck Duration `yaml:"key_recheck"`
	// CampaignMaxRecipients caps the recipients of one campaign, for every
	// tenant: a page that would take a campaign past it is refused whole
	// (422, param "recipients"); 0 is no cap. Defaults to 1,000,000.
	CampaignMaxRecipients *int64 `yaml:"campaign_max_recipients"`
	// CampaignBodies is how many campaign requests with a body (a create
	// with recipients, a page: up to 16 MiB each) one process reads and
	// writes at once; one more waits 5 s for its turn, then is 503. Each
	// costs up to about 150 MB of memory while it is decoded, sealed and
	// written: lower it on a host with little memory. Defaults to 4.
	CampaignBodies int `yaml:"campaign_bodies"`
	// LaneQuotas are the tenants' send quotas per lane (package limits,
	// Quota): an entry without a tenant is every tenant's quota in its
	// lane, each tenant with a bucket of its own; one with a tenant
	// replaces it for that tenant (rate 0 there: no quota). Per process,
	// like send_rate. Defaults to none.
	LaneQuotas []LaneQuota `yaml:"lane_quotas"`
}

// LaneQuota is one entry of limits.lane_quotas.
type LaneQuota struct {
	// Lane is alert, transactional, marketing or internal. Required.
	Lane string `yaml:"lane"`
	// Tenant, when set, makes the entry that tenant's own. Defaults to
	// every tenant.
	Tenant string `yaml:"tenant"`
	// Rate is the notifications a second one tenant may put into the
	// lane. Required (more than 0) without a tenant.
	Rate float64 `yaml:"rate"`
	// Burst is the most at once. Defaults to twice rate (at least 1).
	Burst int `yaml:"burst"`
}

// DefaultCampaignBodies is limits.campaign_bodies' default.
const DefaultCampaignBodies = 4

// DefaultCampaignMaxRecipients is limits.campaign_max_recipients' default.
const DefaultCampaignMaxRecipients = 1_000_000

// CampaignCap is campaign_max_recipients as set or defaulted (0: no cap).
func (l Limits) CampaignCap() int64 {
	if l.CampaignMaxRecipients == nil {
		return DefaultCampaignMaxRecipients
	}
	return *l.CampaignMaxRecipients
}

// apiKeyScopes are the scopes an api_keys entry may list.
var apiKeyScopes = []string{"send", "read", "admin"}

func (c *Config) limitsDefaults() {
	l := &c.Limits
	if l.ParamsMax == 0 {
		l.ParamsMax = 1000
	}
	if l.ParamsDepthMax == 0 {
		l.ParamsDepthMax = 8
	}
	if l.RenderedMaxBytes == 0 {
		l.RenderedMaxBytes = 64 << 10
	}
	if l.KeyRecheck == 0 {
		l.KeyRecheck = Duration(time.Second)
	}
	if l.CampaignBodies == 0 {
		l.CampaignBodies = DefaultCampaignBodies
	}
	if l.CampaignMaxRecipients == nil {
		n := int64(DefaultCampaignMaxRecipients)
		l.CampaignMaxRecipients = &n
	}
}

func (c *Config) validateLimits() error {
	l := c.Limits
	switch {
	case l.KeyRate < 0 || l.SendRate < 0:
		return fmt.Errorf("config: limits: key_rate and send_rate must not be negative")
	case l.KeyBurst < 0 || l.SendBurst < 0:
		return fmt.Errorf("config: limits: key_burst and send_burst must not be negative")
	case l.ParamsMax < 1 || l.ParamsDepthMax < 1 || l.RenderedMaxBytes < 1:
		return fmt.Errorf("config: limits: params_max, params_depth_max and rendered_max_bytes must be positive")
	case l.KeyRecheck <= 0 || l.KeyRecheck.D() > time.Minute:
		return fmt.Errorf("config: limits.key_recheck: must be more than 0 and at most 1m, got %s", l.KeyRecheck.D())
	case l.CampaignBodies < 1:
		return fmt.Errorf("config: limits.campaign_bodies: must be at least 1, got %d", l.CampaignBodies)
	case l.CampaignCap() < 0:
		return fmt.Errorf("config: limits.campaign_max_recipients: must not be negative (0 is no cap), got %d", l.CampaignCap())
	}
	if err := validateLaneQuotas(l.LaneQuotas); err != nil {
		return err
	}
	for i, k := range c.APIKeys {
		for _, s := range k.Scopes {
			if !slices.Contains(apiKeyScopes, s) {
				return fmt.Errorf("config: api_keys[%d].scopes: unknown scope %q (send, read, admin)", i, s)
			}
		}
	}
	return nil
}

func validateLaneQuotas(qs []LaneQuota) error {
	seen := map[[2]string]int{}
	for i, q := range qs {
		at := fmt.Sprintf("config: limits.lane_quotas[%d]", i)
		switch {
		case !heraldtype.Lane(q.Lane).Valid():
			return fmt.Errorf("%s.lane: unknown lane %q (alert, transactional, marketing, internal)", at, q.Lane)
		case q.Rate < 0 || math.IsNaN(q.Rate) || math.IsInf(q.Rate, 0):
			return fmt.Errorf("%s.rate: must be a number not below 0, got %v", at, q.Rate)
		case q.Rate == 0 && q.Tenant == "":
			return fmt.Errorf("%s.rate: required (more than 0) for every tenant's quota; rate 0 is only for one tenant's, to exempt it", at)
		case q.Burst < 0:
			return fmt.Errorf("%s.burst: must not be negative, got %d", at, q.Burst)
		}
		k := [2]string{q.Tenant, q.Lane}
		if j, ok := seen[k]; ok {
			return fmt.Errorf("%s: the same lane and tenant as lane_quotas[%d]", at, j)
		}
		seen[k] = i
	}
	return nil
}
