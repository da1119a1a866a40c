package app

import (
	"context"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/quiethours"
	"github.com/heraldhq/herald/sender"
)

// quietHours builds the quiet-hours rule (package quiethours) from the
// config; nil when no tenant has quiet hours.
func (a *App) quietHours() *quiethours.Rule {
	def, tenants, err := a.cfg.QuietHoursRules()
	if err != nil {
		// config.Validate refuses such a config before herald is built.
		panic("app: quiet hours of a config that did not validate: " + err.Error())
	}
	window := func(r config.QuietHoursRule) *quiethours.Window {
		if !r.Enabled {
			return nil
		}
		return &quiethours.Window{Start: r.Start, End: r.End, StopReleaseBefore: r.StopReleaseBefore, Zone: r.Zone}
	}
	cfg := quiethours.Config{Window: window(def), Tenants: map[string]*quiethours.Window{}, Clock: a.clock}
	held := cfg.Window != nil
	for t, r := range tenants {
		cfg.Tenants[t] = window(r)
		held = held || r.Enabled
	}
	if !held {
		return nil
	}
	rule, err := quiethours.New(cfg)
	if err != nil {
		panic("app: quiet hours of a config that did not validate: " + err.Error())
	}
	return rule
}

// quietHoursChecks is the sender's layer: marketing outside its window is
// deferred to the next opening (with rabbitmq the only layer).
func (a *App) quietHoursChecks() []sender.Check {
	if r := a.quietHours(); r != nil {
		return []sender.Check{r}
	}
	return nil
}

// quietHoursGates is the db claimers' layer: marketing is no longer
// released from stop_release_before ahead of the window's end.
func (a *App) quietHoursGates() []gate {
	if r := a.quietHours(); r != nil {
		return []gate{r.Gate}
	}
	return nil
}

// relayGate is the rabbitmq relay's layer, on the marketing lane (the
// only one quiet hours hold): a row claimed from stop_release_before
// ahead of the window's end is not published but waits in the outbox for
// the next opening (dispatch.RelayConfig.Gate). nil on the other lanes,
// whose claims then read no profiles.
func (a *App) relayGate(lane heraldtype.Lane) func(ctx context.Context, job heraldtype.Job) sender.Ruling {
	if lane != heraldtype.LaneMarketing {
		return nil
	}
	if r := a.quietHours(); r != nil {
		return r.Gate
	}
	return nil
}
