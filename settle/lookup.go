package settle

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"time"

	"golang.org/x/time/rate"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/store"
)

// Defaults of the look-up rounds.
const (
	DefaultLookupInterval  = time.Minute
	DefaultLookupsPerRound = 100
	DefaultLookupRate      = 5 // per second, per provider
)

// LookupConfig configures the look-up rounds.
type LookupConfig struct {
	Store Store
	// Checkers are the providers with a status look-up, by name.
	Checkers map[string]provider.StatusChecker
	// Interval is the time between two rounds. Defaults to a minute.
	Interval time.Duration
	// PerRound bounds the look-ups of one provider in one round.
	// Defaults to 100.
	PerRound int
	// Rate bounds the look-ups per second of one provider (a look-up
	// spends the same call budget as a send). Defaults to 5.
	Rate float64
	// Limiter, when set, is the providers' shared rate limit: a look-up
	// spends from the provider's call budget like a send, on the
	// marketing lane's terms (after every send waiting for a token).
	Limiter Limiter
	// IsLeader, when set, gates every round and every look-up.
	IsLeader func() bool
	Clock    clock.Clock
	Logger   *slog.Logger
	Metrics  *metrics.Metrics
	Alerts   alert.Sink
}

// Limiter is the shared rate limit (package ratelimit, sender.Limiter).
type Limiter interface {
	Wait(ctx context.Context, provider string, lane heraldtype.Lane) (later time.Duration, err error)
}

// Looker runs the leader's look-up rounds: each provider's UNKNOWN
// deliveries, a bounded page per round, asked about one by one at a
// bounded rate. A round goes on from where the one before stopped and
// starts over when it reaches the end, so every UNKNOWN is asked in turn
// however many there are.
type Looker struct {
	cfg     LookupConfig
	names   []string
	limits  map[string]*rate.Limiter
	cursors map[string]string
}

// NewLooker returns a Looker.
func NewLooker(cfg LookupConfig) *Looker {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultLookupInterval
	}
	if cfg.PerRound <= 0 {
		cfg.PerRound = DefaultLookupsPerRound
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultLookupRate
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Looker{cfg: cfg, limits: map[string]*rate.Limiter{}, cursors: map[string]string{}}
	for name := range cfg.Checkers {
		l.names = append(l.names, name)
		l.limits[name] = rate.NewLimiter(rate.Limit(cfg.Rate), 1)
	}
	sort.Strings(l.names)
	return l
}

// RoundReport is what one round did, per provider.
type RoundReport struct {
	// Asked counts the look-ups made, Settled those that moved a delivery
	// out of UNKNOWN, NotFound those left for a person, Failed those that
	// got no answer.
	Asked, Settled, NotFound, Failed map[string]int
}

// Run runs rounds every interval until ctx ends; only while leading.
func (l *Looker) Run(ctx context.Context) {
	if len(l.names) == 0 {
		return
	}
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		if l.leader() {
			l.Round(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *Looker) leader() bool { return l.cfg.IsLeader == nil || l.cfg.IsLeader() }

// Round asks each provider about up to PerRound of its UNKNOWN deliveries.
func (l *Looker) Round(ctx context.Context) RoundReport {
	rep := RoundReport{Asked: map[string]int{}, Settled: map[string]int{}, NotFound: map[string]int{}, Failed: map[string]int{}}
	for _, name := range l.names {
		if ctx.Err() != nil || !l.leader() {
			break
		}
		l.roundOf(ctx, name, &rep)
	}
	return rep
}

func (l *Looker) roundOf(ctx context.Context, name string, rep *RoundReport) {
	page, err := l.cfg.Store.DeliveryUnknownPage(ctx, store.UnknownPageParams{Provider: name, After: l.cursors[name], Limit: l.cfg.PerRound})
	if err != nil {
		l.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "settle: cannot list unknown deliveries",
			slog.String("provider", name), slog.Any("error", err))
		return
	}
	checker := l.cfg.Checkers[name]
	for _, u := range page {
		if err := l.limits[name].Wait(ctx); err != nil || !l.leader() {
			return
		}
		if l.cfg.Limiter != nil {
			// The provider's budget is short: sends first, the rest of the
			// page next round.
			if later, err := l.cfg.Limiter.Wait(ctx, name, heraldtype.LaneMarketing); err != nil || later > 0 {
				return
			}
		}
		// The cursor moves per look-up asked, so a round that stops early
		// (the budget, leadership) is taken up there by the next.
		l.cursors[name] = u.MessageID
		rep.Asked[name]++
		r, err := checker.Status(ctx, provider.StatusQuery{MessageID: u.MessageID, ProviderRef: u.ProviderRef, SentAt: u.ClaimedAt})
		if errors.Is(err, provider.ErrNoReference) {
			l.leaveForAPerson(ctx, name, u.MessageID, rep)
			continue
		}
		if err != nil {
			rep.Failed[name]++
			l.cfg.Metrics.ProviderLookupFailed(name)
			l.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "settle: status look-up failed; the delivery stays UNKNOWN for a later round",
				slog.String("provider", name), slog.String("message_id", u.MessageID), slog.Any("error", err))
			continue
		}
		r.MessageID = u.MessageID // the look-up was about this message, whatever the answer echoes
		out, err := Apply(ctx, l.cfg.Store, l.cfg.Metrics, l.cfg.Alerts, name, metrics.ReportLookup, r)
		switch {
		case err != nil && !errors.Is(err, ErrNotYet):
			rep.Failed[name]++
			l.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "settle: cannot apply a status look-up",
				slog.String("provider", name), slog.String("message_id", u.MessageID), slog.Any("error", err))
		case out.Moved && r.Result == provider.ReportNotFound:
			l.left(ctx, name, u.MessageID, out.Tenant, ReasonLookupNotFound, rep)
		case out.Moved:
			rep.Settled[name]++
			l.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "settle: status look-up settled an UNKNOWN delivery",
				slog.String("provider", name), slog.String("message_id", u.MessageID),
				slog.String("result", r.Result.String()), slog.String("reason", r.Reason))
		}
	}
	if len(page) < l.cfg.PerRound {
		l.cursors[name] = "" // the end: the next round starts over
	}
}

// leaveForAPerson marks an UNKNOWN delivery its provider cannot be asked
// about (LOOKUP_NO_REFERENCE), so later rounds skip it.
func (l *Looker) leaveForAPerson(ctx context.Context, name, messageID string, rep *RoundReport) {
	out, err := l.cfg.Store.DeliveryReport(ctx, store.ReportParams{Provider: name, MessageID: messageID,
		From: onlyUnknown, To: heraldtype.DeliveryUnknown, Reason: ReasonLookupNoReference})
	switch {
	case err != nil:
		rep.Failed[name]++
		l.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "settle: cannot mark a delivery the provider cannot be asked about",
			slog.String("provider", name), slog.String("message_id", messageID), slog.Any("error", err))
	case out.Moved:
		l.left(ctx, name, messageID, out.Tenant, ReasonLookupNoReference, rep)
	}
}

// left counts and alerts a delivery just left UNKNOWN for a person, with
// its message id and the reason it was left (later rounds skip it; the
// reconciliation runs keep alerting while any UNKNOWN remains).
func (l *Looker) left(ctx context.Context, name, messageID, tenant, reason string, rep *RoundReport) {
	rep.NotFound[name]++
	l.cfg.Metrics.Alert(alert.UnknownUnsettled)
	if l.cfg.Alerts != nil {
		l.cfg.Alerts.Alert(ctx, alert.Alert{Kind: alert.UnknownUnsettled, MessageID: messageID, Tenant: tenant, Reason: reason})
	}
}
