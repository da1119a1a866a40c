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

	// clock is when a refresh ended (nil: time.Now); the refresh starts
	// at the now it is given.
	clock func() time.Time

	mu      sync.Mutex
	have    bool
	at      time.Time     // when the values were computed
	tried   time.Time     // when the last refresh started (zero: none since forget)
	took    time.Duration // how long it read the store
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

// gaugeSpacing bounds the share of the leader's time, and of a database
// connection's, that the gauges take: after a refresh that read the store
// for d, the next comes no sooner than gaugeSpacing×d, however short the
// interval. The backlog is a count over the due outbox rows: with a
// million-recipient campaign queued it took 1.3–3.7 s on a loaded
// two-core PostgreSQL, every 15 s by default, beside the sends it
// measures (issue 12's isolation run).
const gaugeSpacing = 10

// refresh computes the values once; a failure keeps the last ones until
// they are staleAfter old (and is logged, without a scrape ever seeing it).
func (g *storeGauges) refresh(ctx context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	defer func() {
		end := time.Now
		if g.clock != nil {
			end = g.clock
		}
		g.mu.Lock()
		g.tried, g.took = now, end().Sub(now)
		g.mu.Unlock()
	}()
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
	g.have, g.tried = false, time.Time{}
	g.mu.Unlock()
}

// due reports whether a refresh is due: none was made (since this
// process last led), or the values are missing (a refresh failed) or older
// than interval; and in every case the last refresh started at least
// gaugeSpacing times as long ago as it read the store.
func (g *storeGauges) due(now time.Time, interval time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tried.IsZero() {
		return true
	}
	if now.Sub(g.tried) < gaugeSpacing*g.took {
		return false
	}
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
