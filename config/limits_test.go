package config_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
)

func TestLimitsAndKeyScopes(t *testing.T) {
	t.Parallel()
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c, err := config.Load(writeFile(t, base), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		l := c.Limits
		if l.KeyRate != 0 || l.SendRate != 0 || l.ParamsMax != 1000 || l.ParamsDepthMax != 8 || l.RenderedMaxBytes != 65536 || l.KeyRecheck.D() != time.Second {
			t.Errorf("limits = %+v; want no rates, 1000 params, depth 8, 64 KiB, recheck 1s", l)
		}
		if l.CampaignCap() != 1_000_000 {
			t.Errorf("campaign cap = %d; want 1,000,000", l.CampaignCap())
		}
	})
	t.Run("AsWritten", func(t *testing.T) {
		t.Parallel()
		text := edit(t, "    tenant: t1\n", "    tenant: t1\n    name: crm\n    scopes: [send]\n") +
			"limits: {key_rate: 50, key_burst: 100, send_rate: 20, params_max: 10, key_recheck: 5s}\n"
		c, err := config.Load(writeFile(t, text), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if k := c.APIKeys[0]; k.Name != "crm" || len(k.Scopes) != 1 || k.Scopes[0] != "send" {
			t.Errorf("api_keys[0] = %+v", k)
		}
		if l := c.Limits; l.KeyRate != 50 || l.KeyBurst != 100 || l.SendRate != 20 || l.ParamsMax != 10 || l.KeyRecheck.D() != 5*time.Second {
			t.Errorf("limits = %+v", l)
		}
	})
	t.Run("CampaignCapZeroIsNoCap", func(t *testing.T) {
		t.Parallel()
		for text, want := range map[string]int64{"limits: {campaign_max_recipients: 0}\n": 0, "limits: {campaign_max_recipients: 50000}\n": 50000} {
			c, err := config.Load(writeFile(t, base+text), noEnv)
			if err != nil {
				t.Fatalf("%q: %v", text, err)
			}
			if got := c.Limits.CampaignCap(); got != want {
				t.Errorf("%q: cap %d; want %d", text, got, want)
			}
		}
	})
	t.Run("CampaignBodies", func(t *testing.T) {
		t.Parallel()
		for text, want := range map[string]int{"": config.DefaultCampaignBodies, "limits: {campaign_bodies: 1}\n": 1} {
			c, err := config.Load(writeFile(t, base+text), noEnv)
			if err != nil {
				t.Fatalf("%q: %v", text, err)
			}
			if c.Limits.CampaignBodies != want {
				t.Errorf("%q: campaign_bodies %d; want %d", text, c.Limits.CampaignBodies, want)
			}
		}
		if _, err := config.Load(writeFile(t, base+"limits: {campaign_bodies: -1}\n"), noEnv); err == nil || !strings.Contains(err.Error(), "limits.campaign_bodies") {
			t.Errorf("campaign_bodies -1: %v; want an error naming limits.campaign_bodies", err)
		}
	})
	t.Run("LaneQuotas", func(t *testing.T) {
		t.Parallel()
		text := base + "limits:\n  lane_quotas:\n    - {lane: marketing, rate: 50, burst: 100}\n" +
			"    - {lane: marketing, tenant: t1, rate: 0}\n    - {lane: transactional, tenant: t1, rate: 2.5}\n"
		c, err := config.Load(writeFile(t, text), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		want := []config.LaneQuota{{Lane: "marketing", Rate: 50, Burst: 100}, {Lane: "marketing", Tenant: "t1"}, {Lane: "transactional", Tenant: "t1", Rate: 2.5}}
		if got := c.Limits.LaneQuotas; !slices.Equal(got, want) {
			t.Errorf("lane_quotas = %+v; want %+v", got, want)
		}
	})
	for _, tc := range []struct{ name, text, want string }{
		{"QuotaUnknownLane", base + "limits: {lane_quotas: [{lane: bulk, rate: 1}]}\n", `limits.lane_quotas[0].lane: unknown lane "bulk"`},
		{"QuotaNoRate", base + "limits: {lane_quotas: [{lane: marketing}]}\n", "limits.lane_quotas[0].rate: required"},
		{"QuotaNegativeRate", base + "limits: {lane_quotas: [{lane: marketing, tenant: t1, rate: -1}]}\n", "limits.lane_quotas[0].rate"},
		{"QuotaNegativeBurst", base + "limits: {lane_quotas: [{lane: marketing, rate: 1, burst: -1}]}\n", "limits.lane_quotas[0].burst"},
		{"QuotaTwice", base + "limits: {lane_quotas: [{lane: marketing, tenant: t1, rate: 1}, {lane: marketing, tenant: t1, rate: 2}]}\n",
			"limits.lane_quotas[1]: the same lane and tenant as lane_quotas[0]"},
		{"QuotaUnknownField", base + "limits: {lane_quotas: [{lane: marketing, rate: 1, per: day}]}\n", "per"},
		{"UnknownScope", edit(t, "    tenant: t1\n", "    tenant: t1\n    scopes: [root]\n"), `api_keys[0].scopes: unknown scope "root"`},
		{"NegativeRate", base + "limits: {key_rate: -1}\n", "key_rate"},
		{"LongRecheck", base + "limits: {key_recheck: 2m}\n", "limits.key_recheck"},
		{"NegativeCampaignCap", base + "limits: {campaign_max_recipients: -1}\n", "limits.campaign_max_recipients"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeFile(t, tc.text), noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
