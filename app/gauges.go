package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
)

// storeGauges holds the /metrics gauges that read the store — the due
// outbox backlog (a count over the outbox) and the last reconciliation's
// figures — computed by the leader on a timer (config
// metrics.refresh_interval) and served from memory, so a scrape costs the
// store nothing however often it comes (issue 13: each scrape ran a
// count(*) on the intake's pool). A process that does not lead has no
// values: its scrape leaves those gauges out (metrics.ErrNoValue); the
// leader's scrape has them.
type storeGauges struct {
	backlogOf func(context.Context) (map[heraldtype.Lane]int, error)
	figuresOf func(context.Context) (metrics.ReconcileFigures, error)
	logger    *slog.Logger
	// staleAfter is the age past which failed refreshes drop the values
	// (0: never), so /metrics leaves the gauges out rather than serve old
	// figures as current for as long as the store fails.
	staleAfter time.Duration

	mu      sync.Mutex
	have    bool
	at      time.Time // when the values were computed
	backlog map[heraldtype.Lane]int
	figures metrics.ReconcileFigures
}

// Backlog is the backlog gauge's read function.
func (g *storeGauges) Backlog(context.Context) (map[heraldtype.Lane]int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.have {
		return nil, metrics.ErrNoValue
	}
	return g.backlog, nil
}

// Figures is the reconciliation gauges' read function.
func (g *storeGauges) Figures(context.Context) (metrics.ReconcileFigures, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.have {
		return metrics.ReconcileFigures{}, metrics.ErrNoValue
	}
	return g.figures, nil
}

// refresh computes the values once; a failure keeps the last ones until
// they are staleAfter old (and is logged, without a scrape ever seeing it).
func (g *storeGauges) refresh(ctx context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	backlog, err := g.backlogOf(ctx)
	if err != nil {
		g.failed(ctx, now, err)
		return
	}
	figures, err := g.figuresOf(ctx)
	if err != nil {
		g.failed(ctx, now, err)
		return
	}
	g.mu.Lock()
	g.have, g.at, g.backlog, g.figures = true, now, backlog, figures
	g.mu.Unlock()
}

func (g *storeGauges) failed(ctx context.Context, now time.Time, err error) {
	if ctx.Err() == nil {
		g.logger.LogAttrs(ctx, slog.LevelWarn, "metrics: computing the store's gauges failed", slog.Any("error", err))
	}
	g.mu.Lock()
	if g.staleAfter > 0 && now.Sub(g.at) > g.staleAfter {
		g.have = false
	}
	g.mu.Unlock()
}

// forget drops the values when this process stops leading: another
// process computes them now.
func (g *storeGauges) forget() {
	g.mu.Lock()
	g.have = false
	g.mu.Unlock()
}

// due reports whether the values are older than interval (or missing).
func (g *storeGauges) due(now time.Time, interval time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.have || now.Sub(g.at) >= interval
}

// run refreshes the values every interval while this process leads
// (isLeader nil: always), checking every second whether it leads, until
// ctx ends.
func (g *storeGauges) run(ctx context.Context, interval time.Duration, isLeader func() bool) {
	tick := time.NewTicker(min(interval, time.Second))
	defer tick.Stop()
	for {
		switch now := time.Now(); {
		case isLeader != nil && !isLeader():
			g.forget()
		case g.due(now, interval):
			g.refresh(ctx, now)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
