package app

import (
	"context"
	"log/slog"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/reconcile"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/watchdog"
)

// watchdogConfig is the watchdog configuration cfg asks for, without its
// wiring: its interval and its graces, which reconciliation counts with
// too.
func watchdogConfig(cfg *config.Config) watchdog.Config {
	return watchdog.Config{
		Interval: cfg.WatchdogInterval.D(), Broker: cfg.Transport == "rabbitmq", StaleClaimAfter: cfg.StaleClaimAfter.D(),
		RetryGrace: cfg.WatchdogRetryGrace.D(), PublishedGrace: cfg.WatchdogPublishedGrace.D(), SweepGrace: cfg.WatchdogSweepGrace.D(),
	}
}

// ReconcileOptions wire a reconciler; zero fields take reconcile's
// defaults.
type ReconcileOptions struct {
	// RunBy names who runs it in the report: "server <owner>", "cli <user>".
	RunBy   string
	Logger  *slog.Logger
	Alerts  alert.Sink
	Metrics *metrics.Metrics
	Clock   clock.Clock
}

// Reconciler returns the reconciler of cfg on st, as `herald serve`'s
// leader and `herald reconcile` both run it: cfg's kinds recreate lost
// planned sends, the watchdog's graces under cfg decide what counts as
// unowned and the watchdog's re-drive (counted, alerted REDRIVEN) moves it
// on, and stale_claim_after is the grace of a finished send without a
// delivery and of an overdue PENDING one.
func Reconciler(cfg *config.Config, st store.Store, o ReconcileOptions) (*reconcile.Reconciler, error) {
	cat, err := catalog.New(cfg.Kinds)
	if err != nil {
		return nil, err
	}
	wdc := watchdogConfig(cfg)
	wdc.Store, wdc.Logger, wdc.Alerts, wdc.Metrics = st, o.Logger, o.Alerts, o.Metrics
	return reconcile.New(reconcile.Config{
		Store: st, Catalog: cat, Grace: cfg.StaleClaimAfter.D(), Watchdog: wdc, Redrive: watchdog.New(wdc).Redrive,
		RunBy: o.RunBy, Clock: o.Clock, Logger: o.Logger, Alerts: o.Alerts, Metrics: o.Metrics,
	}), nil
}

// reconcileFigures reads the last report's figures for the gauges.
func (a *App) reconcileFigures(ctx context.Context) (metrics.ReconcileFigures, error) {
	return reconcile.Figures(ctx, a.store)
}
