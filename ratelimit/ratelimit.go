// Package ratelimit paces the calls to each provider that has a rate limit,
// across every herald process on one database (seed 000: the vendor's call
// limit is shared between order and marketing notifications; DESIGN §5).
//
// # The bucket
//
// Each limited provider has one token bucket, a row in the store
// (store.RateBuckets): it holds at most burst tokens and refills at
// per_second, lazily, by the time elapsed since its last take, read from
// the store's clock (the database server's on PostgreSQL, so the
// processes' clocks do not matter) in the same statement as the take. A
// call spends one token. A process does not ask the database for each
// call: it takes a grant of up to per_second × 50 ms (GrantWindow) tokens
// at once, sized to the calls it served from its previous grant and the
// callers waiting, and spends it locally. Tokens it has not spent 50 ms
// after the grant arrived are dropped, never returned: an idle process
// hoards nothing, and tokens taken before a span cannot be spent long
// into it. So in any span of T seconds all processes together make at
// most
//
//	burst + per_second × (T + 0.05 s + one round trip to the store)
//
// calls, however many processes there are; in a sustained shortage the
// bucket stays empty and the calls follow per_second. A grant is one
// round trip to the store, twenty to thirty a second per busy provider
// and process. When the bucket is short a process asks again when it
// expects a whole grant to be there (BucketGrant.Wait), not at once.
//
// # Priority when the bucket is short
//
// alert, transactional and internal sends are served before marketing:
//
//   - In one process, callers wait in one queue ordered by lane (alert,
//     transactional, internal, marketing), first come first served within
//     a lane; tokens go to the head of the queue.
//   - Across processes, a take for marketing gets only the tokens above a
//     reserve of a quarter of the burst (at least one grant, less than the
//     burst): marketing stops while the bucket holds less, and the other
//     lanes may empty it. While they keep it low, marketing gets nothing;
//     when they leave it to refill, marketing gets what lies above the
//     reserve. A process whose queue holds a non-marketing caller takes
//     with priority, and the tokens of that grant that lay below the
//     reserve (BucketGrant.Free tells them apart) go to non-marketing
//     callers only.
//
// With the default burst (a second's calls) the reserve is 250 ms of the
// rate, ready for an alert at any moment.
//
// # A 429 slows everyone
//
// When a provider refuses a call for its rate (NotSent with HTTP_429, or
// any NotSent that carries a Retry-After), the sender calls Slow: the
// bucket row is emptied and paused until now + Retry-After (1 s without
// one, at most an hour) for every process, which learns of it at its next
// take, within 50 ms; this process drops its own tokens at once. After the
// pause the refill restarts at half the rate the bucket had, never below
// a sixteenth, and climbs linearly back to the full rate over Recover (10
// s). More 429s during the pause (calls of the same episode) only extend
// it; a 429 during the climb halves the rate the climb had reached.
//
// # Waiting, and when it ends
//
// Wait returns when the caller may call the provider. It never holds a
// delivery claim: the sender waits before it claims, so a process that
// dies while waiting leaves nothing SENDING. A caller who would wait past
// MaxWait (30 s) (a long pause, or marketing starved by the other lanes)
// gets a delay instead, to offer its job again after (the sender answers
// Retry with RATE_LIMITED: not a failed attempt). A provider without a
// rate limit is free: no store call, no lock.
//
// When the store fails, the limiter keeps trying (20 ms, doubling to 1 s)
// and a caller that has waited StoreWait (5 s) gets the error; the sender
// then gives the job back as it does for any store failure before its
// claim (Backoff, STORE_UNAVAILABLE). It never calls without a token: the
// claim that follows needs the same store, and the limit is the
// provider's, which a failing database does not raise.
//
// Several processes on different rate_limit settings for one provider
// each take by their own: the row keeps the bucket's state, not its size.
package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Limit is one provider's budget (config.RateLimit).
type Limit struct {
	PerSecond float64
	Burst     int
}

// Config wires a Limiter.
type Config struct {
	// Store holds the buckets every process shares.
	Store store.RateBuckets
	// Limits are the limited providers by name; any other provider is
	// free.
	Limits map[string]Limit
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock dates grants and waits. Defaults to the system clock.
	Clock clock.Clock
	// GrantWindow sizes a grant (at most per_second × GrantWindow tokens)
	// and is how long a process keeps tokens it has not spent. Defaults to
	// 50 milliseconds.
	GrantWindow time.Duration
	// MaxWait is the longest a caller waits before it is told to come back
	// later. Defaults to 30 seconds.
	MaxWait time.Duration
	// StoreWait is how long a caller waits through store failures before
	// it gets the error. Defaults to 5 seconds.
	StoreWait time.Duration
	// DefaultPause is Slow's pause when the provider gave no Retry-After.
	// Defaults to 1 second.
	DefaultPause time.Duration
	// Recover is how long the rate takes to climb back to the full rate
	// after a pause. Defaults to 10 seconds.
	Recover time.Duration
}

// MaxPause caps a provider's Retry-After.
const MaxPause = time.Hour

// Limiter paces calls to the limited providers. Safe for concurrent use.
type Limiter struct {
	cfg     Config
	buckets map[string]*bucket // fixed at New
}

// New returns a limiter for cfg.Limits.
func New(cfg Config) *Limiter {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.GrantWindow, 50*time.Millisecond)
	def(&cfg.MaxWait, 30*time.Second)
	def(&cfg.StoreWait, 5*time.Second)
	def(&cfg.DefaultPause, time.Second)
	def(&cfg.Recover, 10*time.Second)
	l := &Limiter{cfg: cfg, buckets: map[string]*bucket{}}
	for name, lim := range cfg.Limits {
		l.buckets[name] = newBucket(l, name, lim)
	}
	return l
}

// Wait returns (0, nil) once a call to provider may be made for a send on
// lane. It returns a delay instead when the call could not be made within
// MaxWait: offer the send again after it. It returns an error when ctx
// ended (wrapping ctx.Err()) or the store kept failing for StoreWait.
func (l *Limiter) Wait(ctx context.Context, provider string, lane heraldtype.Lane) (time.Duration, error) {
	b := l.buckets[provider]
	if b == nil {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return b.wait(ctx, rank(lane))
}

// Slow tells every process that provider refused a call for its rate,
// asking for retryAfter (0: it did not say): see "A 429 slows everyone".
// A failure to reach the store is logged; this process pauses regardless.
func (l *Limiter) Slow(ctx context.Context, provider string, retryAfter time.Duration) {
	b := l.buckets[provider]
	if b == nil {
		return
	}
	pause := retryAfter
	if pause <= 0 {
		pause = l.cfg.DefaultPause
	}
	pause = min(pause, MaxPause)
	b.pauseHere(l.cfg.Clock.Now().Add(pause))
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StoreWait)
	defer cancel()
	err := l.cfg.Store.BucketSlow(ctx, store.BucketSlowParams{Provider: provider, For: pause, Recover: l.cfg.Recover})
	if err != nil {
		l.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "ratelimit: could not pause the provider for the other processes; this one pauses alone",
			slog.String("provider", provider), slog.Duration("pause", pause), slog.Any("error", err))
		return
	}
	l.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "ratelimit: the provider asked to slow down; every process pauses",
		slog.String("provider", provider), slog.Duration("pause", pause), slog.Duration("recover", l.cfg.Recover))
}

// bulkRank is marketing's rank: the only lane held back by the reserve.
const bulkRank = 3

// rank orders the lanes in a queue: alert first, marketing last.
func rank(l heraldtype.Lane) int {
	switch l {
	case heraldtype.LaneAlert:
		return 0
	case heraldtype.LaneTransactional:
		return 1
	case heraldtype.LaneMarketing:
		return bulkRank
	}
	return 2
}

// Sizes derived from a limit: see the package doc.
func sizes(lim Limit, window time.Duration) (grant int, reserve float64) {
	burst := max(1, lim.Burst)
	grant = min(burst, max(1, int(math.Floor(lim.PerSecond*window.Seconds()))))
	reserve = float64(min(burst-1, max(grant, burst/4)))
	return grant, reserve
}

// bucket is this process's side of one provider's bucket.
type bucket struct {
	l     *Limiter
	name  string
	take  store.BucketTakeParams // Provider, Rate, Burst, Reserve
	grant int

	mu sync.Mutex
	// tokens were granted and not spent yet, free of them above the
	// reserve (marketing may spend those); both drop to 0 at expires.
	tokens, free int
	expires      time.Time
	// served counts the calls served since the last take: the next take
	// asks for twice as many (or one per caller waiting), at most a grant,
	// so a steady caller's takes grow to whole grants and an idle
	// process's shrink.
	served int
	queue  []*waiter // by rank, then seq
	seq    uint64
	// fetching: a fetch loop runs; it exits when the queue is empty.
	fetching bool
	// bulkTake: the loop's last take was for marketing only, so a
	// non-marketing caller that arrives kicks it to take again at once.
	bulkTake bool
	kick     chan struct{}
	// pausedUntil is this process's own Slow.
	pausedUntil time.Time
	// failing: the last take failed (logged once per streak).
	failing bool
}

type waiter struct {
	rank  int
	seq   uint64
	since time.Time
	done  chan answer // buffered; one answer
}

type answer struct {
	later time.Duration
	err   error
}

func newBucket(l *Limiter, name string, lim Limit) *bucket {
	grant, reserve := sizes(lim, l.cfg.GrantWindow)
	return &bucket{
		l: l, name: name, grant: grant, kick: make(chan struct{}, 1),
		take: store.BucketTakeParams{Provider: name, Rate: lim.PerSecond, Burst: float64(max(1, lim.Burst)), Reserve: reserve},
	}
}

func (b *bucket) wait(ctx context.Context, rank int) (time.Duration, error) {
	now := b.l.cfg.Clock.Now()
	b.mu.Lock()
	if b.spend(rank, now) {
		b.mu.Unlock()
		return 0, nil
	}
	b.seq++
	w := &waiter{rank: rank, seq: b.seq, since: now, done: make(chan answer, 1)}
	i, _ := slices.BinarySearchFunc(b.queue, w, func(a, w *waiter) int {
		if a.rank != w.rank {
			return a.rank - w.rank
		}
		return int(a.seq - w.seq)
	})
	b.queue = slices.Insert(b.queue, i, w)
	switch {
	case !b.fetching:
		b.fetching = true
		go b.fetch()
	case rank < bulkRank && b.bulkTake:
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	select {
	case a := <-w.done:
		return a.later, a.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.queue, w); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		return 0, ctx.Err()
	}
	// Answered meanwhile: a token this caller will not spend goes back.
	if a := <-w.done; a.err == nil && a.later == 0 {
		b.tokens++
		if rank == bulkRank {
			b.free++
		}
		b.serve()
	}
	return 0, ctx.Err()
}

// spend takes a local token for a caller of rank, unless one of the same
// or a higher rank waits (tokens go to the queue's head first) or this
// process paused itself. Marketing spends only free tokens; the others
// spend the reserved ones first. b.mu is held.
func (b *bucket) spend(rank int, now time.Time) bool {
	if now.After(b.expires) {
		b.tokens, b.free = 0, 0
	}
	switch {
	case b.tokens == 0, len(b.queue) > 0 && b.queue[0].rank <= rank, now.Before(b.pausedUntil):
		return false
	case rank == bulkRank:
		if b.free == 0 {
			return false
		}
		b.free--
	case b.free == b.tokens:
		b.free--
	}
	b.tokens--
	b.served++
	return true
}

// serve hands the local tokens to the queue's head while it can spend
// them. b.mu is held.
func (b *bucket) serve() {
	for len(b.queue) > 0 && b.tokens > 0 {
		w := b.queue[0]
		switch {
		case w.rank == bulkRank && b.free == 0:
			return
		case w.rank == bulkRank, b.free == b.tokens:
			b.free--
		}
		b.tokens--
		b.served++
		b.queue[0] = nil
		b.queue = b.queue[1:]
		w.done <- answer{}
	}
}

// reply answers a to every waiter, or to those that have waited since
// cutoff or before (when not zero). b.mu is held.
func (b *bucket) reply(a answer, cutoff time.Time) {
	keep := b.queue[:0]
	for _, w := range b.queue {
		if cutoff.IsZero() || !w.since.After(cutoff) {
			w.done <- a
			continue
		}
		keep = append(keep, w)
	}
	clear(b.queue[len(keep):])
	b.queue = keep
}

func (b *bucket) pauseHere(until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens, b.free = 0, 0
	if until.After(b.pausedUntil) {
		b.pausedUntil = until
	}
}

// minRetry is the first pause after a failed take; it doubles to a second.
const minRetry = 20 * time.Millisecond

// fetch takes grants from the store for the queue until it is empty.
func (b *bucket) fetch() {
	retry := minRetry
	for {
		delay, p, ok := b.next()
		if !ok {
			return
		}
		if p.Want > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), b.l.cfg.StoreWait)
			g, err := b.l.cfg.Store.BucketTake(ctx, p)
			cancel()
			if err != nil {
				delay, retry = retry, min(2*retry, time.Second)
			} else {
				retry = minRetry
			}
			delay = b.granted(g, err, delay)
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-b.kick:
			}
			t.Stop()
		}
	}
}

// next serves what it can locally and answers the callers who waited too
// long; then it says what to take from the store (p.Want 0: nothing, wait
// delay, this process is paused), or ok false when no one waits any more.
func (b *bucket) next() (delay time.Duration, p store.BucketTakeParams, ok bool) {
	now := b.l.cfg.Clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.expires) {
		b.tokens, b.free = 0, 0
	}
	if !now.Before(b.pausedUntil) {
		b.serve()
	}
	b.reply(answer{later: b.l.cfg.MaxWait}, now.Add(-b.l.cfg.MaxWait))
	if len(b.queue) == 0 {
		b.fetching = false
		return 0, p, false
	}
	select {
	case <-b.kick: // a stale kick must not cut the next sleep short
	default:
	}
	if left := b.pausedUntil.Sub(now); left > 0 {
		b.tooLong(left)
		if len(b.queue) == 0 {
			b.fetching = false
			return 0, p, false
		}
		return min(left, b.untilOverdue(now)), p, true
	}
	p = b.take
	p.Priority = b.queue[0].rank < bulkRank
	p.Want = min(b.grant, max(len(b.queue), 2*b.served))
	b.served = 0
	b.bulkTake = !p.Priority
	return 0, p, true
}

// granted hands a take's grant to the queue, or its error to those who
// waited StoreWait through failures, and returns how long to sleep before
// the next take (after an error: retry).
func (b *bucket) granted(g store.BucketGrant, err error, retry time.Duration) time.Duration {
	now := b.l.cfg.Clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if !b.failing {
			b.l.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "ratelimit: cannot take from the provider's bucket; callers wait, then give up",
				slog.String("provider", b.name), slog.Duration("store_wait", b.l.cfg.StoreWait), slog.Any("error", err))
		}
		b.failing = true
		b.reply(answer{err: fmt.Errorf("rate limit of %s: %w", b.name, err)}, now.Add(-b.l.cfg.StoreWait))
		return retry
	}
	if b.failing {
		b.failing = false
		b.l.cfg.Logger.LogAttrs(context.Background(), slog.LevelInfo, "ratelimit: the provider's bucket answers again", slog.String("provider", b.name))
	}
	if g.Granted > 0 {
		// Tokens of an earlier grant still here (reserved ones, which the
		// marketing callers waiting could not spend) go: each token lives
		// at most one window, which the bound in the package doc needs.
		b.tokens, b.free = g.Granted, g.Free
		b.expires = now.Add(b.l.cfg.GrantWindow)
		b.serve()
	}
	// Callers still waiting: the next take when the bucket should hold a
	// whole grant again, not at once (which would cost a round trip that
	// finds it empty).
	if b.tooLong(g.Wait); len(b.queue) == 0 {
		return 0
	}
	wait := g.Wait
	if g.Granted == 0 {
		wait = max(wait, time.Millisecond)
	}
	return min(wait, b.untilOverdue(now))
}

// tooLong tells every waiter to come back later when the next grant is
// more than MaxWait away. b.mu is held.
func (b *bucket) tooLong(wait time.Duration) {
	if wait > b.l.cfg.MaxWait {
		b.reply(answer{later: wait}, time.Time{})
	}
}

// untilOverdue is the time until the longest waiter reaches MaxWait.
// b.mu is held.
func (b *bucket) untilOverdue(now time.Time) time.Duration {
	d := b.l.cfg.MaxWait
	for _, w := range b.queue {
		d = min(d, w.since.Add(b.l.cfg.MaxWait).Sub(now))
	}
	return max(d, time.Millisecond)
}
