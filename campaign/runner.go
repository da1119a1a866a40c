package campaign

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/limits"
	"github.com/heraldhq/herald/metrics"
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
	// side use two cores. Up to twice as many are begun: those that have
	// written wait for their turn to commit while the next write. The
	// cursor still moves batch by batch in seq order. Defaults to 1 (one
	// batch after the other, as on SQLite, whose single writer would only
	// take them in turn).
	Parallel int
	// TurnTimeout bounds a side-by-side batch's wait for its turn (the
	// batch before it to end: store.CampaignFanOutParams.Turn). On
	// PostgreSQL the batch waits with its rows written in an open
	// transaction, a wait the database cannot see; past TurnTimeout it
	// gives up with nothing written (store.ErrCampaignBusy) and the next
	// round starts again at the cursor. A batch waits for at most
	// 2×Parallel−1 batches ahead of it, each 0.2 s for 10,000 recipients
	// and seconds at worst under load, so the default is many times that;
	// and the first batch of a round stands at the cursor and waits for
	// no turn, so a timeout can slow a campaign but never stop it.
	// Defaults to 30 seconds.
	TurnTimeout time.Duration
	// Interval is how often the runner looks for RUNNING campaigns.
	// Defaults to 1 second.
	Interval time.Duration
	// Quotas paces each campaign to its tenant's send quota in the
	// campaign's lane (limits.Quota): a batch fans out no more recipients
	// than the quota's bucket holds, the tokens of those it did not fan
	// out go back to the bucket, and a campaign whose bucket is empty
	// waits for a later round. A campaign whose last batch took exactly
	// its tokens becomes DONE at the next batch, which finds no one left,
	// when the bucket holds a token again. Nil: no quotas.
	Quotas *limits.Limiter
	// IsLeader, when set, gates each round: only the leader fans out
	// (PostgreSQL's advisory lock), like the sweeps.
	IsLeader func() bool
	// Page is how many RUNNING campaigns one read lists; a round reads
	// them all, a page at a time. Defaults to 100.
	Page int
	// StallAfter is how long a campaign's fan-out may fail (or give up
	// waiting) at every attempt before the runner raises CAMPAIGN_STALLED
	// for it, once per such stretch; it goes on retrying every round
	// either way. Defaults to 5 minutes.
	StallAfter time.Duration
	// Alerts receives CAMPAIGN_STALLED, Metrics counts it (and the drafts
	// expired). Alerts defaults to logging it.
	Alerts  alert.Sink
	Metrics *metrics.Metrics
	// Now defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Runner fans RUNNING campaigns out into notifications.
type Runner struct {
	cfg RunnerConfig

	mu     sync.Mutex
	stalls map[string]*stall // by campaign id: campaigns whose attempts fail
}

// stall is a campaign whose every attempt since since has failed.
type stall struct {
	since   time.Time
	alerted bool
}

// NewRunner returns a runner.
func NewRunner(cfg RunnerConfig) *Runner {
	if cfg.Batch <= 0 {
		cfg.Batch = 10_000
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = 30 * time.Second
	}
	if cfg.Parallel < 1 {
		cfg.Parallel = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Page <= 0 {
		cfg.Page = 100
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = DefaultStallAfter
	}
	if cfg.Alerts == nil {
		cfg.Alerts = alert.Log{Logger: cfg.Logger}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Runner{cfg: cfg, stalls: map[string]*stall{}}
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
		} else {
			r.forgetStalls(nil) // another process leads: its stalls are its own
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Round ends the drafts past their deadline (ExpireDrafts), then fans out every
// RUNNING campaign to its end, the earliest started first, batch by batch,
// and returns how many recipients it fanned out. A failed batch wrote
// nothing (its transaction rolled back): the next round starts again at
// the campaign's cursor, and this one goes on with the next campaign (the
// errors are returned joined, a failed expiry's among them). It stops
// between batches when ctx ends or this process stops being the leader.
func (r *Runner) Round(ctx context.Context) (int, error) {
	total := 0
	var errs []error
	if _, err := r.ExpireDrafts(ctx); err != nil {
		errs = append(errs, err)
	}
	var after *store.CampaignRef
	running := map[string]bool{}
	for {
		// Every RUNNING campaign, a page at a time: a campaign started
		// after the first page's (say a hundred paced by their quotas)
		// has its turn in the same round.
		refs, err := r.cfg.Store.CampaignsRunning(ctx, after, r.cfg.Page)
		if err != nil {
			return total, errors.Join(append(errs, fmt.Errorf("list running campaigns: %w", err))...)
		}
		for _, c := range refs {
			running[c.ID] = true
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
		if ctx.Err() != nil {
			return total, errors.Join(errs...)
		}
		if r.cfg.IsLeader != nil && !r.cfg.IsLeader() {
			r.forgetStalls(nil) // no longer leading: a later lead starts its stalls afresh
			return total, errors.Join(errs...)
		}
		if len(refs) < r.cfg.Page {
			r.forgetStalls(running)
			return total, errors.Join(errs...)
		}
		after = &refs[len(refs)-1]
	}
}

// FanOut runs one campaign's batches until it is done (or no longer
// RUNNING), its lane quota's bucket is empty, ctx ends or leadership is
// lost. A batch that gave up waiting for a lock or its turn
// (store.ErrCampaignBusy: a cancel, or a second writer of the campaign,
// was in the way) is no failure: it wrote nothing, is logged, and the
// campaign goes on from its cursor at the next round.
func (r *Runner) FanOut(ctx context.Context, c store.CampaignRef) (int, error) {
	tenant, id := c.Tenant, c.ID
	total := 0
	var ahead *batchesAhead // the next window's bounds, read while a window writes
	for ctx.Err() == nil && (r.cfg.IsLeader == nil || r.cfg.IsLeader()) {
		asked := r.roundBatches() * r.cfg.Batch
		limit, settle := r.cfg.Quotas.LaneTake(tenant, c.Lane, asked)
		if limit == 0 {
			break // paced: the rest in a later round
		}
		var res store.CampaignFanOutResult
		var err error
		if count := r.windowBatches(limit); count > 0 {
			res, ahead, err = r.fanOutSideBySide(ctx, c, limit/count, count, ahead)
		} else {
			ahead = nil
			res, err = r.cfg.Store.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: tenant, ID: id, Limit: limit})
		}
		// The tenant is charged for the recipients fanned out, not for the
		// grant: a shorter last batch, the remainder of limit/count side
		// by side, and a failed batch (it wrote nothing) give theirs back.
		settle(res.Recipients)
		total += res.Recipients // side by side, the batches before a failed one count
		if res.Recipients > 0 || res.Done {
			r.progressed(id)
		}
		if errors.Is(err, store.ErrCampaignBusy) && ctx.Err() == nil {
			r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "campaign: fan-out batch gave up waiting, the next round starts at the cursor",
				slog.String("tenant", tenant), slog.String("campaign", id), slog.Int("recipients", total), slog.Any("error", err))
			r.failed(ctx, c, "BUSY")
			break
		}
		if err != nil {
			if ctx.Err() == nil {
				r.failed(ctx, c, "FAILING")
			}
			return total, fmt.Errorf("fan out campaign %s: %w", id, err)
		}
		if res.Done {
			if res.Recipients > 0 || total > 0 {
				// total is this round's: a paced campaign, or one a new
				// leader took over, fanned out the rest in earlier rounds.
				r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "campaign: fan-out finished",
					slog.String("tenant", tenant), slog.String("campaign", id), slog.Int("recipients_this_round", total))
			}
			break
		}
		if limit < asked {
			// Paced: the quota granted less than a round, and what it
			// refilled while these batches ran would be a trickle of tiny
			// batches holding the round, and every other campaign behind
			// it. The rest goes in later rounds.
			break
		}
	}
	return total, nil
}

// draftPage is how many drafts one expiry statement ends.
const draftPage = 100

// ExpireDrafts ends CANCELLED (DRAFT_EXPIRED) every DRAFT campaign whose
// deadline, fixed at its creation by the store's clock, has come (by the
// same clock: store.Campaigns.CampaignsExpireDrafts), a page at a time;
// logs and counts each and returns how many it ended. A draft being
// written meanwhile (a page, a start, a cancel) is left to that write,
// and ended at a later round if it is still DRAFT. It stops between pages
// when ctx ends or this process stops being the leader.
func (r *Runner) ExpireDrafts(ctx context.Context) (int, error) {
	n := 0
	for ctx.Err() == nil && (r.cfg.IsLeader == nil || r.cfg.IsLeader()) {
		refs, err := r.cfg.Store.CampaignsExpireDrafts(ctx, draftPage)
		if err != nil {
			return n, err
		}
		for _, c := range refs {
			r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "campaign: a draft never started reached its deadline: CANCELLED, DRAFT_EXPIRED",
				slog.String("tenant", c.Tenant), slog.String("campaign", c.ID))
		}
		n += len(refs)
		r.cfg.Metrics.DraftsExpired(len(refs))
		if len(refs) < draftPage {
			break
		}
	}
	return n, nil
}

// DefaultStallAfter is RunnerConfig.StallAfter's default.
const DefaultStallAfter = 5 * time.Minute

// progressed ends campaign id's stall, if it had one: a batch committed.
func (r *Runner) progressed(id string) {
	r.mu.Lock()
	delete(r.stalls, id)
	r.mu.Unlock()
}

// forgetStalls drops the stalls of campaigns no longer RUNNING (cancelled
// while their fan-out failed), once a round has read them all; every stall
// when running is nil (this process no longer leads: were it to lead
// again, a stall recorded before would be alerted at its first failure,
// failing "for" the hours another process led).
func (r *Runner) forgetStalls(running map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.stalls {
		if !running[id] {
			delete(r.stalls, id)
		}
	}
}

// failed records an attempt of c's fan-out that wrote nothing (why:
// FAILING, an error; BUSY, it gave up waiting), and raises
// CAMPAIGN_STALLED once its attempts have all failed for StallAfter. The
// stall is this process's own record: a new leader starts its own, so a
// stall that outlives a change of leader is alerted again by the next.
func (r *Runner) failed(ctx context.Context, c store.CampaignRef, why string) {
	now := r.cfg.Now()
	r.mu.Lock()
	st, ok := r.stalls[c.ID]
	if !ok {
		st = &stall{since: now}
		r.stalls[c.ID] = st
	}
	raise := !st.alerted && now.Sub(st.since) >= r.cfg.StallAfter
	st.alerted = st.alerted || raise
	since := st.since
	r.mu.Unlock()
	if !raise {
		return
	}
	r.cfg.Logger.LogAttrs(ctx, slog.LevelError, "campaign: fan-out stalled",
		slog.String("tenant", c.Tenant), slog.String("campaign", c.ID), slog.String("reason", why), slog.Duration("failing_for", now.Sub(since)))
	r.cfg.Metrics.Alert(alert.CampaignStalled)
	r.cfg.Alerts.Alert(ctx, alert.Alert{Kind: alert.CampaignStalled, Tenant: c.Tenant, Reason: c.ID + ":" + why})
}

// alreadyEnded is the turn of a round's first batch: nothing before it
// is in flight.
var alreadyEnded = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// errTurnTimeout ends a batch's wait for its turn after TurnTimeout.
var errTurnTimeout = fmt.Errorf("%w: the batch before it did not end within the turn timeout", store.ErrCampaignBusy)

// windowRounds is how many times Parallel batches one side-by-side call
// of the runner reads and writes: its batches run in a window of Parallel,
// the next beginning as soon as one ends, so a backend is idle only
// between these calls (see fanOutSideBySide).
const windowRounds = 4

// roundBatches is how many batches of Batch recipients one call of
// FanOut's loop asks the quota for.
func (r *Runner) roundBatches() int {
	if r.cfg.Parallel > 1 {
		return r.cfg.Parallel * windowRounds
	}
	return 1
}

// windowBatches is how many batches the limit the quota granted is written
// in side by side: as many whole Batches as it holds, at least Parallel
// (smaller ones then, under a quota), at most roundBatches. 0: one batch
// of limit after the cursor (Parallel 1, or fewer recipients granted than
// Parallel).
func (r *Runner) windowBatches(limit int) int {
	if r.cfg.Parallel < 2 || limit < r.cfg.Parallel {
		return 0
	}
	return min(r.roundBatches(), max(r.cfg.Parallel, limit/r.cfg.Batch))
}

// batchesAhead is a read of the bounds of a campaign's next window of
// batches (count of size), after the last batch of the window being
// written; done is closed when ranges and err are set.
type batchesAhead struct {
	size, count int
	done        chan struct{}
	ranges      []store.CampaignRange
	err         error
}

// readAhead begins reading the bounds of the window after ranges (count
// batches of size) while ranges are written: on PostgreSQL the read takes
// tens of milliseconds for a window of 80,000 recipients, during which no
// batch would be writing.
func (r *Runner) readAhead(ctx context.Context, c store.CampaignRef, ranges []store.CampaignRange, size, count int) *batchesAhead {
	a := &batchesAhead{size: size, count: count, done: make(chan struct{})}
	after := ranges[len(ranges)-1].Upto
	go func() {
		defer close(a.done)
		a.ranges, a.err = r.cfg.Store.CampaignBatches(ctx, c.Tenant, c.ID, &after, size, count)
	}()
	return a
}

// fanOutSideBySide writes the campaign's next count batches of size
// recipients, Parallel at once, each in its own transaction (Range), and
// returns what they wrote together. Their bounds are ahead's when it read
// a window of the same shape (the window before this one ended where
// ahead's begins: it wrote every batch), else read at the cursor; and it
// returns the read of the next window's, begun as its batches begin, when
// it wrote every batch and the campaign goes on (nil otherwise: the next
// call reads at the cursor). The batches start in seq order, the
// next as soon as one ends, so Parallel backends stay busy through the
// call rather than waiting for the slowest of each pair. A batch writes
// its rows, then waits for its turn (the batch before it has ended:
// store.CampaignFanOutParams.Turn) to take the campaign's lock and move
// the cursor, so each commits after the one before it. When one fails,
// those after it begun already are refused (store.ErrCampaignBehind) unless
// another writer moved the cursor to their start (it took exactly the
// failed batch's range: they commit, and count), none after it starts, and
// the first failure is returned: the next round starts again at the
// cursor; but a batch refused because the cursor had moved past its
// start once the batch before it (or, for the first, the window before) had
// ended, another writer's doing, ends the call with no error, and the
// next call reads the bounds at the cursor. A batch waits at most
// TurnTimeout for its turn, then gives up (store.ErrCampaignBusy), and
// those after it are refused. When
// no recipient is left, one batch after the cursor ends the campaign DONE,
// as the one-by-one loop does.
func (r *Runner) fanOutSideBySide(ctx context.Context, c store.CampaignRef, size, count int, ahead *batchesAhead) (store.CampaignFanOutResult, *batchesAhead, error) {
	var ranges []store.CampaignRange
	read := false
	if ahead != nil && ahead.size == size && ahead.count == count {
		<-ahead.done
		ranges, read = ahead.ranges, ahead.err == nil
	}
	if !read {
		var err error
		if ranges, err = r.cfg.Store.CampaignBatches(ctx, c.Tenant, c.ID, nil, size, count); err != nil {
			return store.CampaignFanOutResult{}, nil, fmt.Errorf("read batches: %w", err)
		}
	}
	if len(ranges) == 0 {
		res, err := r.cfg.Store.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: c.Tenant, ID: c.ID, Limit: size})
		return res, nil, err
	}
	next := r.readAhead(ctx, c, ranges, size, count)
	results := make([]store.CampaignFanOutResult, len(ranges))
	errs := make([]error, len(ranges))
	ended := make([]chan struct{}, len(ranges))
	for i := range ended {
		ended[i] = make(chan struct{})
	}
	begun := make(chan struct{}, 2*r.cfg.Parallel) // batches begun and not ended
	writing := make(chan struct{}, r.cfg.Parallel) // of them, those not yet waiting for their turn
	var stop atomic.Bool                           // a batch failed or ended the campaign: begin no more
	var wg sync.WaitGroup
	for i := range ranges {
		begun <- struct{}{}
		writing <- struct{}{}
		if stop.Load() || ctx.Err() != nil {
			break
		}
		wrote := sync.OnceFunc(func() { <-writing })
		before := alreadyEnded
		if i > 0 {
			before = ended[i-1]
		}
		p := store.CampaignFanOutParams{Tenant: c.Tenant, ID: c.ID, Limit: size, Range: &ranges[i],
			Turn: func(ctx context.Context) error {
				wrote() // idle in its transaction from here: the next batch may begin writing
				ctx, cancel := context.WithTimeoutCause(ctx, r.cfg.TurnTimeout, errTurnTimeout)
				defer cancel()
				select {
				case <-before:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}}
		wg.Go(func() {
			defer func() { wrote(); close(ended[i]); <-begun }()
			results[i], errs[i] = r.cfg.Store.CampaignFanOut(ctx, p)
			if errs[i] != nil || results[i].Done {
				stop.Store(true)
			}
		})
	}
	wg.Wait()
	// Every batch that returned no error committed, a batch after a failed
	// one too: another writer may have taken exactly the failed one's
	// range, leaving the cursor at the next one's start. All of them
	// count (the quota is charged for them).
	var sum store.CampaignFanOutResult
	failed := -1 // the first batch that failed
	for i, res := range results {
		if errs[i] != nil {
			if failed < 0 {
				failed = i
			}
			continue
		}
		sum.Recipients += res.Recipients
		sum.Notifications += res.Notifications
		sum.Outbox += res.Outbox
		sum.Done = sum.Done || res.Done
		if res.Lane != "" {
			sum.Lane = res.Lane
		}
	}
	switch {
	case failed >= 0 && (failed == 0 || errs[failed-1] == nil) && errors.Is(errs[failed], store.ErrCampaignBehind):
		// The cursor had moved past it although the batch before it was
		// written, or before the window's first (another writer's, an
		// overlapping old leader: the bounds read ahead began where this
		// runner's last window ended); it wrote nothing, and the next call
		// reads where the cursor stands.
		if failed == 0 {
			r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "campaign: another writer moved the cursor past the bounds read ahead; reading them again",
				slog.String("tenant", c.Tenant), slog.String("campaign", c.ID))
		}
		return sum, nil, nil
	case failed >= 0:
		return sum, nil, errs[failed]
	case sum.Done || ctx.Err() != nil:
		// Every batch was begun and written unless the campaign ended or
		// ctx did.
		return sum, nil, nil
	}
	return sum, next, nil
}
