package app

import (
	"context"
	"sync"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/store"
)

// runCampaigns starts the leader's campaign fan-out (package campaign) on
// wg until ctx ends: it looks for RUNNING campaigns every second and fans
// each out in batches of 10,000 recipients, each batch its own
// transaction, paced to the tenant's lane quota where it has one. A store
// that keeps no campaigns runs none.
func (a *App) runCampaigns(ctx context.Context, wg *sync.WaitGroup, isLeader func() bool) {
	cs, ok := a.store.(store.Campaigns)
	if !ok {
		return
	}
	r := campaign.NewRunner(campaign.RunnerConfig{Store: cs, IsLeader: isLeader, Quotas: a.quotas, Logger: a.logger})
	wg.Go(func() { r.Run(ctx) })
}
