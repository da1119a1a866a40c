package app

import (
	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/limits"
)

// security builds what issue 13 items 1, 2 and 4 add to the API from cfg:
// the key verifier (stored keys and cfg's api_keys), the per-key and
// per-tenant rates and the tenants' lane quotas, the audit log; and it sets the catalog's caps on
// params and rendered text for the process.
func (a *App) security(cfg *config.Config) (*apikeys.Verifier, *limits.Limiter, *audit.Log) {
	l := cfg.Limits
	catalog.SetLimits(l.ParamsMax, l.ParamsDepthMax, l.RenderedMaxBytes)
	static := make([]apikeys.StaticKey, 0, len(cfg.APIKeys))
	for _, k := range cfg.APIKeys {
		sk := apikeys.StaticKey{Key: k.Key, Tenant: k.Tenant, Name: k.Name}
		for _, s := range k.Scopes {
			sk.Scopes = append(sk.Scopes, apikeys.Scope(s))
		}
		static = append(static, sk)
	}
	keys := apikeys.NewVerifier(apikeys.Config{Store: a.store, Static: static, Recheck: l.KeyRecheck.D(), Clock: a.clock})
	quotas := make([]limits.Quota, 0, len(l.LaneQuotas))
	for _, q := range l.LaneQuotas {
		quotas = append(quotas, limits.Quota{Tenant: q.Tenant, Lane: heraldtype.Lane(q.Lane), Rate: q.Rate, Burst: q.Burst})
	}
	lim := limits.New(limits.Config{KeyRate: l.KeyRate, KeyBurst: l.KeyBurst, SendRate: l.SendRate, SendBurst: l.SendBurst,
		Quotas: quotas, Clock: a.clock})
	return keys, lim, &audit.Log{Store: a.store, Logger: a.logger}
}
