// Package watchdog keeps the rule of DESIGN §3, "Nothing waits without an
// owner and a deadline", when the path that normally moves a row has
// failed. Every non-terminal row has one owner that will move it on by a
// time (see the sender's and the store's package docs for the rule):
//
//	PENDING, SCHEDULED   the claimers or the relay, at available_at
//	CLAIMED, PUBLISHING  the lease holder until claimed_until; then the reclaim sweep
//	PUBLISHED            the copy in the broker, until the sender writes its delivery
//	SENDING              the claimer, until claimed_at + stale_claim_after; then the stale sweep
//	RETRY_WAIT           the outbox row that offers it again at next_attempt_at (db
//	                     transport: PENDING with available_at at the retry time), or
//	                     the copy in a retry queue (rabbitmq)
//	PARKED               a person (alerted)
//	WAITING              a fallback step: the end of the step before it (package fallback)
//
// The watchdog, leader-only, looks every interval for rows whose deadline
// passed more than a grace ago and whose owner is gone (store.UnownedKind):
//
//	retry_wait  a delivery RETRY_WAIT whose next attempt is RetryGrace past
//	            while its outbox row will not offer it again: DONE, FAILED or
//	            EXPIRED (a copy closed the path back, issue 8 path 1), or
//	            PUBLISHED with the broker's copy evidently lost (paths 2, 3)
//	published   an outbox row PUBLISHED PublishedGrace ago with no delivery
//	            row: no copy reached a sender
//	sending     a claim SENDING for stale_claim_after + SweepGrace: the stale
//	            sweep did not run
//	lease       a lease ended SweepGrace ago that the reclaim sweep did not
//	            return
//	waiting     a fallback step still WAITING though every earlier step
//	            ended SweepGrace ago: its end did not move the chain on
//	            (released or skipped)
//
// and moves each one on through the normal path, never around it: the
// outbox row goes back to PENDING, due now, with reason REDRIVEN and a fresh
// fencing token (not counted as a failed dispatch attempt), so a claimer or
// the relay offers it again and the sender decides as it always does (an
// outbox row that EXPIRED is taken by no claim: the expiry sweep ends it
// again, and its waiting delivery with it, SUPPRESSED(EXPIRED)). A stale
// claim is turned UNKNOWN, exactly the stale sweep's write (the call may
// have gone out: never resent). A waiting fallback step is moved on by the
// chain's own rule on its rows as they are (fallback.Decide): released
// (PENDING, due now, reason REDRIVEN) when the step before failed
// definitely, else SKIPPED(FALLBACK_NOT_NEEDED). Each row moved is counted in
// herald_watchdog_redriven_total{lane,kind} and raises a REDRIVEN alert
// (message id, tenant, reason) — the row is fine now, but the normal path
// failed somewhere and the goal is zero.
//
// # Why a re-drive is always safe
//
// Nothing calls a provider but a sender that won the delivery claim: an
// insert unique on message_id, or a RETRY_WAIT row turned SENDING by a
// write conditional on it being due. A re-driven row only gives a copy
// another chance at that claim. If the delivery waits in a due RETRY_WAIT,
// the copy claims it and makes the one call the retry was owed; if the
// delivery has no row, the copy claims it as the first copy would have; if
// the row turns out to have had an owner after all (a slow copy arrives
// later), one of the two copies wins the claim and the other finds the
// delivery SENDING or ended and finishes without a call. A re-drive can
// cost a broker message, never a second provider call. The write itself is
// conditional on the row being as the watchdog found it, so a row that
// found its owner between the find and the write is left alone and not
// reported.
//
// # Graces
//
// The grace is how long past its deadline a row may still have an owner
// the watchdog cannot see. With the db transport nothing owns a RETRY_WAIT
// whose outbox row ended, at any time, so RetryGrace is short (5 minutes).
// With rabbitmq a retry copy comes back to its lane queue by its next
// attempt time (the retry tier is the longest not longer than the delay),
// but a copy that met a store failure before its claim waits up to the
// longest retry tier, 30 minutes, and then waits its turn in its lane's
// queue: RetryGrace and PublishedGrace default to an hour, twice the
// longest tier, so a slow lane is not taken for a lost copy (and if one
// is, the cost is a second copy, above). A row re-driven gets its grace
// again from its new write, so a copy stuck in a slow lane is re-driven
// once per grace, not once per round. SweepGrace (5 minutes) gives the
// sweeps, which run every sweep_interval (leases every 5 s), several turns
// first.
//
// # Cost
//
// A round does not grow with the size of the tables. Each find walks a
// partial index that holds only what its kind looks for (migration 8:
// deliveries_retry_wait, outbox_published; deliveries_sending and
// outbox_leased exist) from the deadline on, and examines at most Batch rows
// per page and MaxPages pages per kind and round. Waiting rows are few;
// published rows are many (every rabbitmq row ends PUBLISHED), so the
// watchdog keeps a checkpoint of how far it examined them in the store and
// examines each once (again after a re-drive). The first round after this
// process becomes leader comes one interval later, so the sweeps, which run
// at once, settle what a restart left before the watchdog counts it as
// theirs having failed.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// Default graces (see the package doc).
const (
	DefaultInterval         = time.Minute
	DefaultRetryGrace       = 5 * time.Minute
	DefaultBrokerRetryGrace = time.Hour
	DefaultPublishedGrace   = time.Hour
	DefaultSweepGrace       = 5 * time.Minute
	DefaultBatch            = 1000
	DefaultMaxPages         = 100
)

// The reasons of REDRIVEN alerts: what the watchdog found.
const (
	ReasonRetryWaitUnowned    = "RETRY_WAIT_UNOWNED"    // retry_wait
	ReasonPublishedNoDelivery = "PUBLISHED_NO_DELIVERY" // published
	ReasonStaleClaimUnswept   = "STALE_CLAIM_UNSWEPT"   // sending
	ReasonLeaseUnreclaimed    = "LEASE_UNRECLAIMED"     // lease
	ReasonFallbackUnmoved     = "FALLBACK_UNMOVED"      // waiting
)

var reasons = map[store.UnownedKind]string{
	store.UnownedRetryWait: ReasonRetryWaitUnowned,
	store.UnownedPublished: ReasonPublishedNoDelivery,
	store.UnownedSending:   ReasonStaleClaimUnswept,
	store.UnownedLease:     ReasonLeaseUnreclaimed,
	store.UnownedWaiting:   ReasonFallbackUnmoved,
}

// Config configures the watchdog.
type Config struct {
	Store store.Watchdog
	// Interval is how often a round runs. Defaults to 1 minute.
	Interval time.Duration
	// Broker says the transport is rabbitmq: copies in the broker own
	// waiting rows, and RetryGrace defaults longer.
	Broker bool
	// RetryGrace is how long past its next attempt time (and past its
	// outbox row's last write) a RETRY_WAIT delivery must be before it
	// counts as having no owner. Defaults to 5 minutes, or 1 hour with
	// Broker.
	RetryGrace time.Duration
	// PublishedGrace is how long after its publication a PUBLISHED row
	// without a delivery row counts as having no copy left. Defaults to 1
	// hour.
	PublishedGrace time.Duration
	// StaleClaimAfter is the stale sweep's threshold (stale_claim_after).
	// Defaults to 10 minutes.
	StaleClaimAfter time.Duration
	// SweepGrace is how long past the sweeps' thresholds (stale_claim_after
	// for a SENDING claim, the end of a lease) the watchdog leaves a row to
	// them. Defaults to 5 minutes.
	SweepGrace time.Duration
	// Batch is the rows one find examines. Defaults to 1000.
	Batch int
	// MaxPages caps the pages of each kind in one round; the next round
	// goes on from there. Defaults to 100.
	MaxPages int
	// IsLeader, when set, gates every round (PostgreSQL's advisory lock).
	IsLeader func() bool
	Logger   *slog.Logger
	Alerts   alert.Sink
	Metrics  *metrics.Metrics
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Interval, DefaultInterval)
	if c.Broker {
		def(&c.RetryGrace, DefaultBrokerRetryGrace)
	}
	def(&c.RetryGrace, DefaultRetryGrace)
	def(&c.PublishedGrace, DefaultPublishedGrace)
	def(&c.StaleClaimAfter, 10*time.Minute)
	def(&c.SweepGrace, DefaultSweepGrace)
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.MaxPages <= 0 {
		c.MaxPages = DefaultMaxPages
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Alerts == nil {
		c.Alerts = alert.Log{Logger: c.Logger}
	}
	return c
}

// Grace is how long past its deadline a row of kind must be before it
// counts as having no owner: the store's find takes it as is.
// Reconciliation counts with the same graces.
func (c Config) Grace(kind store.UnownedKind) time.Duration {
	switch kind {
	case store.UnownedRetryWait:
		return c.RetryGrace
	case store.UnownedPublished:
		return c.PublishedGrace
	case store.UnownedSending:
		return c.StaleClaimAfter + c.SweepGrace
	}
	return c.SweepGrace
}

// Watchdog runs the rounds.
type Watchdog struct {
	cfg Config
	// cursor is where each kind goes on from in the next round when the
	// last one stopped at MaxPages; zero when it was done. Published rows
	// go on from the store's checkpoint instead. Only Run's goroutine (or
	// a test calling Round) touches it.
	cursor map[store.UnownedKind]store.UnownedPosition
}

// New returns a watchdog.
func New(cfg Config) *Watchdog {
	return &Watchdog{cfg: cfg.WithDefaults(), cursor: map[store.UnownedKind]store.UnownedPosition{}}
}

// Config returns the watchdog's configuration with its defaults.
func (w *Watchdog) Config() Config { return w.cfg }

// Run runs a round every interval until ctx is cancelled. The first round
// comes one interval after this process is leader at a tick.
func (w *Watchdog) Run(ctx context.Context) {
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	wasLeader := w.leader()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		leader := w.leader()
		if leader && wasLeader {
			if _, err := w.Round(ctx); err != nil && ctx.Err() == nil {
				w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "watchdog: round failed", slog.Any("error", err))
			}
		}
		wasLeader = leader
	}
}

func (w *Watchdog) leader() bool { return w.cfg.IsLeader == nil || w.cfg.IsLeader() }

// Report is what one round did, per kind.
type Report struct {
	// Found counts the rows found without an owner; Redriven those moved
	// on (a row that found its owner between the find and the write is
	// found but not moved).
	Found    map[store.UnownedKind]int
	Redriven map[store.UnownedKind]int
}

// Round looks once for every kind of row without an owner and moves on
// what it finds. A process that is not the leader does nothing. An error
// in one kind does not stop the others; Round returns them joined.
func (w *Watchdog) Round(ctx context.Context) (Report, error) {
	r := Report{Found: map[store.UnownedKind]int{}, Redriven: map[store.UnownedKind]int{}}
	if !w.leader() {
		return r, nil
	}
	var errs []error
	for _, kind := range store.UnownedKinds {
		if err := w.kind(ctx, kind, &r); err != nil {
			errs = append(errs, fmt.Errorf("watchdog %s: %w", kind, err))
		}
	}
	if n := total(r.Redriven); n > 0 {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "watchdog: moved on rows that had no owner",
			slog.Int("retry_wait", r.Redriven[store.UnownedRetryWait]), slog.Int("published", r.Redriven[store.UnownedPublished]),
			slog.Int("sending", r.Redriven[store.UnownedSending]), slog.Int("lease", r.Redriven[store.UnownedLease]),
			slog.Int("waiting", r.Redriven[store.UnownedWaiting]))
	}
	return r, errors.Join(errs...)
}

// kind runs up to MaxPages pages of one kind.
func (w *Watchdog) kind(ctx context.Context, kind store.UnownedKind, r *Report) error {
	pos := w.cursor[kind]
	if kind == store.UnownedPublished {
		var err error
		if pos, err = w.cfg.Store.UnownedCheckpoint(ctx, kind); err != nil {
			return err
		}
	}
	start := pos
	done := false
	var err error
	for range w.cfg.MaxPages {
		var page store.UnownedPage
		page, err = w.cfg.Store.UnownedFind(ctx, store.UnownedFindParams{Kind: kind, Grace: w.cfg.Grace(kind), After: pos, Limit: w.cfg.Batch})
		if err != nil {
			break
		}
		if len(page.Rows) > 0 {
			var moved []store.Unowned
			if moved, err = w.Redrive(ctx, page.Rows); err != nil {
				break
			}
			r.Found[kind] += len(page.Rows)
			r.Redriven[kind] += len(moved)
		}
		pos = page.Next
		if page.Done {
			done = true
			break
		}
	}
	if kind == store.UnownedPublished {
		if !pos.At.Equal(start.At) || pos.MessageID != start.MessageID {
			// Saved even after an error: every row up to pos was handled.
			err = errors.Join(err, w.cfg.Store.UnownedCheckpointSave(ctx, kind, pos))
		}
		return err
	}
	if done || err != nil {
		pos = store.UnownedPosition{} // the next round looks from the start again
	}
	w.cursor[kind] = pos
	return err
}

// Redrive moves rows UnownedFind returned on, each only if still as found,
// and counts and alerts each one it moved, as a round does; it returns
// those. Reconciliation re-drives what it finds through it.
func (w *Watchdog) Redrive(ctx context.Context, rows []store.Unowned) ([]store.Unowned, error) {
	moved, err := w.cfg.Store.UnownedRedrive(ctx, rows)
	if err != nil {
		return nil, err
	}
	for _, u := range moved {
		w.report(ctx, u)
	}
	return moved, nil
}

// report counts and alerts one row moved on. A stale claim turned UNKNOWN
// is also counted and alerted exactly as the stale sweep does.
func (w *Watchdog) report(ctx context.Context, u store.Unowned) {
	w.cfg.Metrics.Redriven(u.Lane, u.Kind)
	if u.Kind == store.UnownedSending {
		w.cfg.Metrics.Delivery(u.Lane, u.Channel, heraldtype.DeliveryUnknown)
		w.raise(ctx, alert.Alert{Kind: alert.StaleClaim, MessageID: u.MessageID, Tenant: u.Tenant, Reason: heraldtype.ReasonStaleClaim})
	}
	// Debug: the round's one warning counts the rows, and each row's alert
	// names it (held to the alert sink's flood limit: a lost queue's
	// thousands of copies are not thousands of lines).
	w.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "watchdog: moved on a row that had no owner",
		slog.String("message_id", u.MessageID), slog.String("kind", string(u.Kind)), slog.String("lane", string(u.Lane)),
		slog.String("outbox_state", string(u.OutboxState)), slog.Time("deadline", u.At))
	w.raise(ctx, alert.Alert{Kind: alert.Redriven, MessageID: u.MessageID, Tenant: u.Tenant, Reason: reasons[u.Kind]})
}

func (w *Watchdog) raise(ctx context.Context, a alert.Alert) {
	w.cfg.Metrics.Alert(a.Kind)
	w.cfg.Alerts.Alert(ctx, a)
}

func total(m map[store.UnownedKind]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
