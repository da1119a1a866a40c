package campaign

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/heraldhq/herald/limits"
	"github.com/heraldhq/herald/store"
)

// RunnerConfig configures the leader's fan-out.
type RunnerConfig struct {
	Store store.Campaigns
	// Batch is how many recipients one transaction fans out. Defaults to
	// 10,000.
	Batch int
	// Parallel is how many batches of a campaign are written at once, each
	// on its own connection (store.CampaignFanOutParams.Range): a batch's
	// inserts keep one database backend busy, so on PostgreSQL two side by
	// side use two cores. The cursor still moves batch by batch in seq
	// order. Defaults to 1 (one batch after the other, as on SQLite, whose
	// single writer would only take them in turn).
	Parallel int
	// Interval is how often the runner looks for RUNNING campaigns.
	// Defaults to 1 second.
	Interval time.Duration
	// Quotas paces each campaign to its tenant's send quota in the
	// campaign's lane (limits.Quota): a batch fans out no more recipients
	// than the quota's bucket holds, and a campaign whose bucket is empty
	// waits for a later round. A campaign whose last batch took exactly
	// its tokens becomes DONE at the next batch, which finds no one left,
	// when the bucket holds a token again. Nil: no quotas.
	Quotas *limits.Limiter
	// IsLeader, when set, gates each round: only the leader fans out
	// (PostgreSQL's advisory lock), like the sweeps.
	IsLeader func() bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Runner fans RUNNING campaigns out into notifications.
type Runner struct {
	cfg RunnerConfig
}

// NewRunner returns a runner.
func NewRunner(cfg RunnerConfig) *Runner {
	if cfg.Batch <= 0 {
		cfg.Batch = 10_000
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Parallel < 1 {
		cfg.Parallel = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Runner{cfg: cfg}
}

// Run fans out every Interval until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		if r.cfg.IsLeader == nil || r.cfg.IsLeader() {
			if _, err := r.Round(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "campaign: fan-out round failed", slog.Any("error", err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Round fans out every RUNNING campaign to its end, the earliest started
// first, batch by batch, and returns how many recipients it fanned out. A
// failed batch wrote nothing (its transaction rolled back): the next round
// starts again at the campaign's cursor, and this one goes on with the
// next campaign (the errors are returned joined). It stops between batches when
// ctx ends or this process stops being the leader.
func (r *Runner) Round(ctx context.Context) (int, error) {
	refs, err := r.cfg.Store.CampaignsRunning(ctx, 100)
	if err != nil {
		return 0, fmt.Errorf("list running campaigns: %w", err)
	}
	total := 0
	var errs []error
	for _, c := range refs {
		n, err := r.FanOut(ctx, c)
		total += n
		if err != nil {
			if ctx.Err() != nil {
				return total, err
			}
			// One campaign whose batches keep failing must not hold back
			// the campaigns started after it: they go on this round.
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// FanOut runs one campaign's batches until it is done (or no longer
// RUNNING), its lane quota's bucket is empty, ctx ends or leadership is
// lost.
func (r *Runner) FanOut(ctx context.Context, c store.CampaignRef) (int, error) {
	tenant, id := c.Tenant, c.ID
	total := 0
	for ctx.Err() == nil && (r.cfg.IsLeader == nil || r.cfg.IsLeader()) {
		limit := r.cfg.Quotas.LaneTake(tenant, c.Lane, r.cfg.Parallel*r.cfg.Batch)
		if limit == 0 {
			break // paced: the rest in a later round
		}
		var res store.CampaignFanOutResult
		var err error
		if size := limit / r.cfg.Parallel; size > 0 && r.cfg.Parallel > 1 {
			res, err = r.fanOutSideBySide(ctx, c, size)
		} else {
			res, err = r.cfg.Store.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: tenant, ID: id, Limit: limit})
		}
		total += res.Recipients // side by side, the batches before a failed one count
		if err != nil {
			return total, fmt.Errorf("fan out campaign %s: %w", id, err)
		}
		if res.Done {
			if res.Recipients > 0 || total > 0 {
				r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "campaign: fan-out finished",
					slog.String("tenant", tenant), slog.String("campaign", id), slog.Int("recipients", total))
			}
			break
		}
	}
	return total, nil
}

// fanOutSideBySide writes the campaign's next Parallel batches of size
// recipients at once, each in its own transaction (Range), and returns
// what they wrote together. Each commits after the one before it; when one
// fails, those after it write nothing (store.ErrCampaignBehind) and the
// first failure is returned: the next round starts again at the cursor. A
// batch refused although the one before it was written (it took the
// campaign's lock first: store.CampaignFanOutParams.Range) is not a
// failure: the caller's next call writes it.
// When no recipient is left, one batch after the cursor ends the campaign
// DONE, as the one-by-one loop does.
func (r *Runner) fanOutSideBySide(ctx context.Context, c store.CampaignRef, size int) (store.CampaignFanOutResult, error) {
	ranges, err := r.cfg.Store.CampaignBatches(ctx, c.Tenant, c.ID, size, r.cfg.Parallel)
	if err != nil {
		return store.CampaignFanOutResult{}, fmt.Errorf("read batches: %w", err)
	}
	if len(ranges) == 0 {
		return r.cfg.Store.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: c.Tenant, ID: c.ID, Limit: size})
	}
	results := make([]store.CampaignFanOutResult, len(ranges))
	errs := make([]error, len(ranges))
	var wg sync.WaitGroup
	for i := range ranges {
		wg.Go(func() {
			results[i], errs[i] = r.cfg.Store.CampaignFanOut(ctx, store.CampaignFanOutParams{
				Tenant: c.Tenant, ID: c.ID, Limit: size, Range: &ranges[i],
			})
		})
	}
	wg.Wait()
	var sum store.CampaignFanOutResult
	for i, res := range results {
		if i > 0 && errs[i-1] == nil && errors.Is(errs[i], store.ErrCampaignBehind) {
			// It took the campaign's lock before the batch before it had
			// begun and wrote nothing; the next call writes it again.
			return sum, nil
		}
		if errs[i] != nil {
			return sum, errs[i] // those after it were refused
		}
		sum.Recipients += res.Recipients
		sum.Notifications += res.Notifications
		sum.Outbox += res.Outbox
		sum.Done = sum.Done || res.Done
		sum.Lane = res.Lane
	}
	return sum, nil
}
