// Package sweep runs the periodic repairs that keep the promise when a
// process dies mid-step: expired outbox leases go back to PENDING, rows past
// their expires_at become EXPIRED, SENDING claims older than
// stale_claim_after become UNKNOWN (never resent), and expired idempotency
// keys are deleted. Each sweep is a conditional write, so running one twice,
// or in two processes at once, is harmless; with PostgreSQL a leader lock
// still keeps it to one process.
//
// A stale claim the sweep turns UNKNOWN is a delivery entering UNKNOWN: it
// is counted in herald_deliveries_total once, for the write that turned it
// (the crashed sender's late result, refused, counts nothing). An expired
// outbox row raises OUTBOX_EXPIRED (herald_alerts_total), up to
// Config.ExpireAlerts a round; the rest of the round share one alert with
// their Count. If its delivery
// was waiting in RETRY_WAIT (db transport: the row was PENDING until the
// retry time), the same write ends that delivery SUPPRESSED(EXPIRED), and
// the sweep counts that entry once; otherwise the expiry writes no delivery
// state and counts none.
package sweep

import (
	"context"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// Config configures the sweeper.
type Config struct {
	Store store.Store
	// StaleClaimAfter is the age at which a SENDING claim becomes UNKNOWN.
	StaleClaimAfter time.Duration
	// Interval is how often the stale-claim and idempotency sweeps run.
	Interval time.Duration
	// LeaseInterval is how often expired leases and expired rows are swept.
	// Defaults to Interval, at most 5 seconds.
	LeaseInterval time.Duration
	// ExpireBatch and ExpireBatches bound one round of the expiry sweep:
	// at most ExpireBatches transactions of ExpireBatch rows each; the next
	// round goes on. Default to 500 and 20.
	ExpireBatch, ExpireBatches int
	// ExpireAlerts is how many expired rows a round alerts one by one; the
	// rest of the round share one OUTBOX_EXPIRED alert with their count,
	// so a flood of expiries is a handful of alerts. Defaults to 10.
	ExpireAlerts int
	// IsLeader, when set, gates every sweep (PostgreSQL's advisory lock).
	IsLeader func() bool
	Logger   *slog.Logger
	Alerts   alert.Sink
	Metrics  *metrics.Metrics
}

// Sweeper runs the sweeps.
type Sweeper struct{ Config }

// New returns a sweeper.
func New(cfg Config) *Sweeper {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Alerts == nil {
		cfg.Alerts = alert.Log{Logger: cfg.Logger}
	}
	if cfg.ExpireBatch <= 0 {
		cfg.ExpireBatch = 500
	}
	if cfg.ExpireBatches <= 0 {
		cfg.ExpireBatches = 20
	}
	if cfg.ExpireAlerts <= 0 {
		cfg.ExpireAlerts = 10
	}
	if cfg.LeaseInterval <= 0 {
		cfg.LeaseInterval = min(cfg.Interval, 5*time.Second)
	}
	return &Sweeper{Config: cfg}
}

// Run sweeps until ctx is cancelled.
func (s *Sweeper) Run(ctx context.Context) {
	slow := time.NewTicker(s.Interval)
	defer slow.Stop()
	fast := time.NewTicker(s.LeaseInterval)
	defer fast.Stop()
	s.Leases(ctx)
	s.Claims(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-fast.C:
			s.Leases(ctx)
		case <-slow.C:
			s.Claims(ctx)
		}
	}
}

func (s *Sweeper) leader() bool { return s.IsLeader == nil || s.IsLeader() }

// Leases returns expired leases to PENDING and expires overdue rows.
func (s *Sweeper) Leases(ctx context.Context) {
	if !s.leader() {
		return
	}
	if n, err := s.Store.OutboxReclaimExpired(ctx); err != nil {
		s.warn(ctx, "reclaim expired leases", err)
	} else if n > 0 {
		s.Logger.LogAttrs(ctx, slog.LevelInfo, "sweep: returned expired leases", slog.Int("rows", n))
	}
	s.expire(ctx)
}

// expire runs one round of the expiry sweep.
func (s *Sweeper) expire(ctx context.Context) {
	alerted, rest, restTenant := 0, 0, ""
	for range s.ExpireBatches {
		expired, err := s.Store.OutboxExpire(ctx, s.ExpireBatch)
		if err != nil {
			s.warn(ctx, "expire outbox rows", err)
			break
		}
		for _, e := range expired {
			if e.DeliveryEnded {
				s.Metrics.Delivery(e.Lane, e.Channel, heraldtype.DeliverySuppressed)
			}
			if alerted < s.ExpireAlerts {
				alerted++
				s.raise(ctx, alert.Alert{Kind: alert.OutboxExpired, MessageID: e.MessageID, Tenant: e.Tenant, Reason: "EXPIRED"})
				continue
			}
			if rest == 0 {
				restTenant = e.Tenant
			} else if restTenant != e.Tenant {
				restTenant = "" // several tenants
			}
			rest++
		}
		if len(expired) < s.ExpireBatch {
			break
		}
	}
	if rest > 0 {
		s.raise(ctx, alert.Alert{Kind: alert.OutboxExpired, Tenant: restTenant, Reason: "EXPIRED", Count: rest})
	}
}

// Claims turns stale SENDING claims into UNKNOWN and deletes expired keys.
func (s *Sweeper) Claims(ctx context.Context) {
	if !s.leader() {
		return
	}
	stale, err := s.Store.DeliverySweepStale(ctx, s.StaleClaimAfter)
	if err != nil {
		s.warn(ctx, "sweep stale claims", err)
	}
	for _, c := range stale {
		s.Metrics.Delivery(c.Lane, c.Channel, heraldtype.DeliveryUnknown)
		s.raise(ctx, alert.Alert{Kind: alert.StaleClaim, MessageID: c.MessageID, Tenant: c.Tenant, Reason: "STALE_CLAIM"})
	}
	if n, err := s.Store.IdempotencyKeysSweep(ctx); err != nil {
		s.warn(ctx, "sweep idempotency keys", err)
	} else if n > 0 {
		s.Logger.LogAttrs(ctx, slog.LevelInfo, "sweep: deleted expired idempotency keys", slog.Int("keys", n))
	}
}

func (s *Sweeper) raise(ctx context.Context, a alert.Alert) {
	s.Metrics.Alert(a.Kind)
	s.Alerts.Alert(ctx, a)
}

func (s *Sweeper) warn(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	s.Logger.LogAttrs(ctx, slog.LevelWarn, "sweep: "+what+" failed", slog.Any("error", err))
}
