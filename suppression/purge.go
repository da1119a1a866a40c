package suppression

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/store"
)

// PurgeConfig configures the leader's purge of old keys.
type PurgeConfig struct {
	Store interface {
		EventKeyPurge(ctx context.Context, p store.EventKeyPurgeParams) (int, error)
	}
	// TTL is how long a key is kept after its lease ended. Positive.
	TTL time.Duration
	// Interval is how often a round runs. Positive.
	Interval time.Duration
	// Batch is how many keys one statement deletes. Defaults to 1,000.
	Batch int
	// MaxBatches caps the statements of one round, so that a backlog (the
	// first round after a long stop) is worked off over several rounds
	// rather than in one long burst. Defaults to 100.
	MaxBatches int
	// IsLeader, when set, gates each round (PostgreSQL's advisory lock).
	IsLeader func() bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Purger deletes keys whose lease ended TTL ago.
type Purger struct{ cfg PurgeConfig }

// NewPurger returns a purger.
func NewPurger(cfg PurgeConfig) *Purger {
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.MaxBatches <= 0 {
		cfg.MaxBatches = 100
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Purger{cfg: cfg}
}

// Run purges every Interval until ctx ends.
func (p *Purger) Run(ctx context.Context) {
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		if p.cfg.IsLeader == nil || p.cfg.IsLeader() {
			if n, err := p.Purge(ctx); err != nil && ctx.Err() == nil {
				p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "suppression: purge of old event keys failed",
					slog.Int("keys", n), slog.Any("error", err))
			} else if n > 0 {
				p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "suppression: purged old event keys", slog.Int("keys", n))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Purge runs one round: statements of up to Batch keys each, until one
// deletes fewer or MaxBatches have run. It returns how many keys it deleted.
func (p *Purger) Purge(ctx context.Context) (int, error) {
	total := 0
	for range p.cfg.MaxBatches {
		n, err := p.cfg.Store.EventKeyPurge(ctx, store.EventKeyPurgeParams{Keep: p.cfg.TTL, Limit: p.cfg.Batch})
		if err != nil {
			return total, fmt.Errorf("purge event keys: %w", err)
		}
		total += n
		if n < p.cfg.Batch {
			break
		}
	}
	return total, nil
}
