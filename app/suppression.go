package app

import (
	"context"
	"slices"
	"sync"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/suppression"
)

// suppressionChecks is event-level suppression (package suppression): the
// last of the sender's rules, its key taken by the claim itself; none
// when event_suppression.enabled is false.
func (a *App) suppressionChecks() []sender.Check {
	if !a.cfg.EventSuppression.On() {
		return nil
	}
	kinds := map[string]suppression.Kind{}
	for _, k := range a.cfg.Kinds {
		kinds[k.Name] = suppression.Kind{First: k.FirstAvailable(), Inbox: slices.Contains(k.Channels, string(heraldtype.ChannelInbox))}
	}
	return []sender.Check{suppression.New(suppression.Config{
		InClaim: true, Lease: a.cfg.EventSuppression.Lease.D(), Kinds: kinds, Logger: a.logger,
	})}
}

// runSuppressionPurge starts the leader's purge of event keys past their
// ttl, every sweep_interval, on wg until ctx ends. It runs whether or not
// the rule is on, so the keys of a rule turned off do not stay.
func (a *App) runSuppressionPurge(ctx context.Context, wg *sync.WaitGroup, isLeader func() bool) {
	p := suppression.NewPurger(suppression.PurgeConfig{
		Store: a.store, TTL: a.cfg.EventSuppression.TTL.D(), Interval: a.cfg.SweepInterval.D(), IsLeader: isLeader, Logger: a.logger,
	})
	wg.Go(func() { p.Run(ctx) })
}
