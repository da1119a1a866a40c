package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/provider/webhook"
	"github.com/heraldhq/herald/settle"
)

// buildProviders makes one adapter per configured provider (or takes the
// one Options gives for its name), registers it for its channel, and notes
// which take delivery reports and which answer status look-ups.
func (a *App) buildProviders(cfg *config.Config, opts Options) error {
	a.registry = provider.NewRegistry()
	a.receivers = map[string]provider.CallbackReceiver{}
	a.checkers = map[string]provider.StatusChecker{}
	for _, p := range cfg.Providers {
		impl, ok := opts.Providers[p.Name]
		if !ok {
			switch p.Type {
			case "webhook":
				impl = webhook.New(webhook.Config{URL: p.URL, Timeout: p.Timeout.D()})
			case "sim":
				s := sim.New(sim.Config{Latency: p.Latency.D(), NotSent: p.Faults.NotSent, Permanent: p.Faults.Permanent, Unknown: p.Faults.Unknown,
					DeadAddresses: p.Faults.DeadAddresses, ReportAfter: p.ReportAfter.D(), ReportFailed: p.ReportFailed,
					StatusLookup: p.StatusLookup})
				a.sims[p.Name] = s
				impl = s
			}
		}
		a.registry.Register(heraldtype.Channel(p.Channel), p.Name, impl)
		if r, ok := impl.(provider.CallbackReceiver); ok {
			a.receivers[p.Name] = r
		}
		if c, ok := impl.(provider.StatusChecker); ok {
			if s, isSim := impl.(*sim.Sim); !isSim || s.Lookups() {
				a.checkers[p.Name] = c
			}
		}
	}
	return nil
}

// simReportTries bounds how often a simulated delivery report is brought
// again while its send is still SENDING (the sender has not recorded the
// call's answer yet), a second apart.
const simReportTries = 10

// wireSimReports makes each simulator's delivery reports reach the store
// as a provider's callback would.
func (a *App) wireSimReports() {
	for name, s := range a.sims {
		s.SetReporter(func(r provider.Report) {
			ctx := context.Background()
			for range simReportTries {
				_, err := settle.Apply(ctx, a.store, a.metrics, name, metrics.ReportCallback, r)
				if !errors.Is(err, settle.ErrNotYet) {
					if err != nil {
						a.logger.LogAttrs(ctx, slog.LevelWarn, "sim: delivery report not applied",
							slog.String("provider", name), slog.String("message_id", r.MessageID), slog.Any("error", err))
					}
					return
				}
				time.Sleep(time.Second)
			}
		})
	}
}
