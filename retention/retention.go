// Package retention purges inbox items past their tenant's retention
// (DESIGN §4: default 365 days, a policy value; config inbox.retention and
// inbox.tenant_retention). The leader alone runs it, like the sweeps and
// the watchdog: every purge_interval (an hour by default) one round
// deletes, for each tenant with a retention of its own and then for every
// other tenant at once, the items created before now minus that
// retention, oldest first, in batches of purge_batch items (1,000 by
// default). Each batch is one short transaction of the store
// (store.Inbox.InboxPurge) that also takes the unread items it deleted off
// their recipients' counters, so the badge stays exact while items go;
// between batches the round pauses (Config.Pause), so a backlog of
// millions (retention shortened, or the first round on an old database)
// costs intake a little at a time instead of one long lock.
//
// A round stops early when this process stops being the leader (checked
// between batches) or is shutting down; the next round goes on where it
// stopped, since the items left are simply still too old. Each item
// deleted is counted in herald_inbox_purged_total. Only the items go: the
// notifications, their deliveries and their accounting stay (package
// erasure is what removes a person's data on request).
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// Defaults.
const (
	DefaultRetention = 365 * 24 * time.Hour
	DefaultInterval  = time.Hour
	DefaultBatch     = 1000
	DefaultPause     = 100 * time.Millisecond
)

// Store is the one store call the purge makes.
type Store interface {
	InboxPurge(ctx context.Context, p store.InboxPurgeParams) (int, error)
}

// Config configures the purge.
type Config struct {
	Store Store
	// Retention is how long an item is kept. Defaults to 365 days.
	Retention time.Duration
	// TenantRetention overrides Retention per tenant.
	TenantRetention map[string]time.Duration
	// Interval is how often a round runs. Defaults to 1 hour.
	Interval time.Duration
	// Batch is how many items one transaction deletes. Defaults to 1,000.
	Batch int
	// Pause is the wait between two batches of a round. Defaults to 100 ms.
	Pause time.Duration
	// IsLeader, when set, gates every round and every batch.
	IsLeader func() bool
	// Clock says what now is; the cut-offs are now minus the retentions.
	// Defaults to the system clock.
	Clock clock.Clock
	// Sleep pauses between batches and reports whether the whole pause
	// passed. Defaults to clock.Sleep; tests record the pauses instead.
	Sleep   func(ctx context.Context, d time.Duration) bool
	Logger  *slog.Logger
	Metrics *metrics.Metrics
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.Retention <= 0 {
		c.Retention = DefaultRetention
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Pause <= 0 {
		c.Pause = DefaultPause
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Sleep == nil {
		c.Sleep = clock.Sleep
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Purger runs the rounds.
type Purger struct {
	cfg Config
}

// New returns a purger.
func New(cfg Config) *Purger { return &Purger{cfg: cfg.WithDefaults()} }

// Run runs rounds until ctx is cancelled: one as soon as this process
// leads, then one every interval while it keeps the lead. It looks every
// minute (or every interval, if shorter), so a process that gains the lead
// purges within a minute: counting only from its own start, a leader
// restarted more often than the interval would never purge.
func (p *Purger) Run(ctx context.Context) {
	look := min(p.cfg.Interval, time.Minute)
	every := max(int(p.cfg.Interval/look), 1) // looks per round
	tick := time.NewTicker(look)
	defer tick.Stop()
	since := -1 // looks since this process's last round as the leader; -1 while it does not lead
	for {
		switch {
		case !p.leader():
			since = -1
		case since < 0 || since+1 >= every:
			since = 0
			if _, err := p.Round(ctx); err != nil && ctx.Err() == nil {
				p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "retention: round failed", slog.Any("error", err))
			}
		default:
			since++
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *Purger) leader() bool { return p.cfg.IsLeader == nil || p.cfg.IsLeader() }

// Report is what one round did.
type Report struct {
	// Purged counts the items deleted, per tenant with a retention of its
	// own, and under "" for every other tenant.
	Purged map[string]int
	// Batches counts the store calls.
	Batches int
	// Stopped: the round ended early (leadership lost, or ctx done).
	Stopped bool
}

// Total is the items the round deleted.
func (r Report) Total() int {
	n := 0
	for _, v := range r.Purged {
		n += v
	}
	return n
}

// errStopped ends a round early without an error to report.
var errStopped = errors.New("stopped")

// Round purges every tenant's items past its retention once. A process
// that is not the leader does nothing.
func (p *Purger) Round(ctx context.Context) (Report, error) {
	r := Report{Purged: map[string]int{}}
	if !p.leader() {
		return r, nil
	}
	now := p.cfg.Clock.Now()
	own := make([]string, 0, len(p.cfg.TenantRetention))
	for t := range p.cfg.TenantRetention {
		own = append(own, t)
	}
	slices.Sort(own)
	var err error
	for _, t := range own {
		if err = p.purge(ctx, store.InboxPurgeParams{Tenant: t, Before: now.Add(-p.cfg.TenantRetention[t])}, &r); err != nil {
			break
		}
	}
	if err == nil {
		err = p.purge(ctx, store.InboxPurgeParams{Except: own, Before: now.Add(-p.cfg.Retention)}, &r)
	}
	if errors.Is(err, errStopped) {
		r.Stopped, err = true, nil
	}
	if n := r.Total(); n > 0 || err != nil {
		p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "retention: purged inbox items past their retention",
			slog.Int("purged", n), slog.Int("batches", r.Batches), slog.Bool("stopped", r.Stopped))
	}
	return r, err
}

// purge deletes q's items batch by batch until fewer than a batch are
// left, pausing between batches.
func (p *Purger) purge(ctx context.Context, q store.InboxPurgeParams, r *Report) error {
	q.Limit = p.cfg.Batch
	for {
		n, err := p.cfg.Store.InboxPurge(ctx, q)
		if err != nil {
			return fmt.Errorf("purge inbox items of %q before %s: %w", q.Tenant, q.Before.Format(time.RFC3339), err)
		}
		r.Batches++
		r.Purged[q.Tenant] += n
		p.cfg.Metrics.InboxPurged(n)
		if n < q.Limit {
			return nil
		}
		if !p.cfg.Sleep(ctx, p.cfg.Pause) || !p.leader() {
			return errStopped
		}
	}
}
