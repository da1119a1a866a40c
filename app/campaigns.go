package app

import (
	"context"
	"sync"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
)

// runCampaigns starts the leader's campaign fan-out (package campaign) on
// wg until ctx ends: every second it ends the drafts past their deadline
// (campaign_draft_ttl after their creation) and fans each RUNNING campaign
// out in batches of 10,000 recipients, each batch its own transaction (two
// at once on PostgreSQL), paced to the tenant's lane quota where it has
// one. A store that keeps no campaigns runs none.
func (a *App) runCampaigns(ctx context.Context, wg *sync.WaitGroup, isLeader func() bool) {
	cs, ok := a.store.(store.Campaigns)
	if !ok {
		return
	}
	// On PostgreSQL two batches are written at once, on two backends
	// (more may wait there for their turn to commit).
	parallel := 1
	if _, pg := cs.(*postgres.Store); pg {
		parallel = 2
	}
	r := campaign.NewRunner(campaign.RunnerConfig{Store: cs, IsLeader: isLeader, Quotas: a.quotas, Parallel: parallel,
		Alerts: a.alerts, Metrics: a.metrics, Logger: a.logger})
	wg.Go(func() { r.Run(ctx) })
}
