package app

import (
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/provider/webhook"
)

// buildProviders makes one adapter per configured provider (or takes the
// one Options gives for its name) and registers it for its channel.
func (a *App) buildProviders(cfg *config.Config, opts Options) error {
	a.registry = provider.NewRegistry()
	for _, p := range cfg.Providers {
		impl, ok := opts.Providers[p.Name]
		if !ok {
			switch p.Type {
			case "webhook":
				impl = webhook.New(webhook.Config{URL: p.URL, Timeout: p.Timeout.D()})
			case "sim":
				s := sim.New(sim.Config{Latency: p.Latency.D(), NotSent: p.Faults.NotSent, Permanent: p.Faults.Permanent, Unknown: p.Faults.Unknown,
					DeadAddresses: p.Faults.DeadAddresses})
				a.sims[p.Name] = s
				impl = s
			}
		}
		a.registry.Register(heraldtype.Channel(p.Channel), p.Name, impl)
	}
	return nil
}
