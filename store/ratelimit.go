package store

import (
	"context"
	"math"
	"time"
)

// RateBuckets keeps the providers' call budgets that every herald process
// on the database shares (package ratelimit): one token bucket row per
// provider, refilled lazily by the time elapsed since its last take, by the
// store's clock (the database server's for PostgreSQL), in the same
// statement or transaction as the take, so two processes never spend one
// token. The arithmetic is Bucket's, which both drivers follow: SQLite
// through these very methods, PostgreSQL in its SQL.
type RateBuckets interface {
	// BucketTake refills p.Provider's bucket to now and takes up to p.Want
	// whole tokens from it: all of them a priority take may have, those
	// above p.Reserve otherwise. A provider with no row yet starts with a
	// full bucket (p.Burst).
	BucketTake(ctx context.Context, p BucketTakeParams) (BucketGrant, error)
	// BucketSlow pauses p.Provider's bucket for every process: it empties
	// it and refills nothing until the store's now + p.For, after which the
	// refill rate climbs back to the full rate over p.Recover (Bucket.Slowed
	// has the rule).
	BucketSlow(ctx context.Context, p BucketSlowParams) error
}

// BucketTakeParams is one take. Rate and Burst are the caller's limit for
// the provider: the row keeps only the bucket's state, so every take says
// what the bucket is.
type BucketTakeParams struct {
	Provider string
	// Rate is the refill in tokens per second at the full rate; Burst the
	// most the bucket holds. Both positive.
	Rate  float64
	Burst float64
	// Want is the most tokens to take, at least 1.
	Want int
	// Reserve is what a take without Priority leaves in the bucket: it
	// gets only the whole tokens above it.
	Reserve float64
	// Priority may take the reserve too.
	Priority bool
}

// BucketGrant is what a take got.
type BucketGrant struct {
	// Granted is the tokens taken, 0..Want.
	Granted int
	// Free is how many of Granted lay above the reserve: what a take
	// without Priority could have had as well. Free <= Granted.
	Free int
	// Wait is how long from the take until the bucket holds a whole Want
	// again (above the reserve, without Priority) at the rate it refills
	// now, any pause included: when to ask again. 0 when it already does.
	Wait time.Duration
}

// BucketSlowParams is a provider's refusal for its rate (a 429).
type BucketSlowParams struct {
	Provider string
	// For is the pause, from the store's now: the provider's Retry-After.
	For time.Duration
	// Recover is how long the rate then takes to climb back to the full
	// rate.
	Recover time.Duration
}

// BucketFactorFloor is the least fraction of its rate a slowed bucket
// restarts at: halving on each 429 stops there.
const BucketFactorFloor = 1.0 / 16

// Bucket is a provider's row. Times are the store's.
type Bucket struct {
	// Tokens is the content at UpdatedAt, 0..Burst, fractions included.
	Tokens    float64
	UpdatedAt time.Time
	// PausedUntil is the end of the last pause; zero when the bucket was
	// never slowed. Nothing refills before it.
	PausedUntil time.Time
	// SlowFactor is the fraction of the rate the refill restarts at after
	// the pause; it climbs linearly to 1 at RecoverUntil.
	SlowFactor   float64
	RecoverUntil time.Time
}

// NewBucket is a provider's bucket on its first use at now: full if it is
// for a take (tokens = burst), empty for a slow.
func NewBucket(now time.Time, tokens float64) Bucket {
	return Bucket{Tokens: tokens, UpdatedAt: now, SlowFactor: 1}
}

// Factor is the fraction of the rate the bucket refills at, at t: 0 while
// paused, SlowFactor at the pause's end, climbing linearly to 1 at
// RecoverUntil, and 1 after it or when the bucket was never slowed.
func (b Bucket) Factor(t time.Time) float64 {
	switch {
	case b.PausedUntil.IsZero() || !t.Before(b.RecoverUntil):
		return 1
	case t.Before(b.PausedUntil):
		return 0
	case !t.After(b.PausedUntil):
		return b.SlowFactor
	}
	climbed := t.Sub(b.PausedUntil).Seconds() / b.RecoverUntil.Sub(b.PausedUntil).Seconds()
	return b.SlowFactor + (1-b.SlowFactor)*climbed
}

// Refilled is b at now: Tokens plus rate × the time since UpdatedAt (not
// counting a pause) × the factor, averaged over that time as the mean of
// its two ends (exact within the climb, and never more than the factor's
// true average across the climb's end, which it bends below), capped at
// burst. A now before UpdatedAt (two processes' clocks, a statement that
// read its time before another's commit) refills nothing and moves
// nothing back.
func (b Bucket) Refilled(now time.Time, rate, burst float64) Bucket {
	since := b.UpdatedAt
	if b.PausedUntil.After(since) {
		since = b.PausedUntil
	}
	if now.After(since) {
		f := (b.Factor(since) + b.Factor(now)) / 2
		b.Tokens = min(burst, b.Tokens+rate*now.Sub(since).Seconds()*f)
	}
	if now.After(b.UpdatedAt) {
		b.UpdatedAt = now
	}
	return b
}

// Take is p's take from b at now: the bucket after it, and the grant.
func (b Bucket) Take(now time.Time, p BucketTakeParams) (Bucket, BucketGrant) {
	b = b.Refilled(now, p.Rate, p.Burst)
	above := max(0, int(math.Floor(b.Tokens-p.Reserve)))
	g := BucketGrant{Granted: above}
	if p.Priority {
		g.Granted = max(0, int(math.Floor(b.Tokens)))
	}
	g.Granted = min(g.Granted, p.Want)
	g.Free = min(g.Granted, above)
	b.Tokens -= float64(g.Granted)
	g.Wait = b.Wait(now, p)
	return b, g
}

// Wait is how long from now until b (as a take left it) holds p.Want
// whole tokens for p again, at the rate it refills now: a paused bucket
// counts the pause and then its restart factor.
func (b Bucket) Wait(now time.Time, p BucketTakeParams) time.Duration {
	target := float64(p.Want)
	if !p.Priority {
		target += p.Reserve
	}
	missing := min(target, p.Burst) - b.Tokens
	if missing <= 0 {
		return 0
	}
	if now.Before(b.PausedUntil) {
		return b.PausedUntil.Sub(now) + seconds(missing/(p.Rate*b.SlowFactor))
	}
	return seconds(missing / (p.Rate * b.Factor(now)))
}

// Slowed is b after a 429 at now: empty, paused until now + p.For, then
// refilling at a factor that climbs back to 1 over p.Recover. The factor
// restarts at half the one the bucket refilled at (never below
// BucketFactorFloor): a 429 during a climb halves what the climb had
// reached. A 429 while the bucket is still paused (other calls of the same
// episode) only makes the pause end at the later of the two times.
func (b Bucket) Slowed(now time.Time, p BucketSlowParams) Bucket {
	until := now.Add(p.For)
	if now.Before(b.PausedUntil) {
		if until.Before(b.PausedUntil) {
			until = b.PausedUntil
		}
	} else {
		b.SlowFactor = max(BucketFactorFloor, b.Factor(now)/2)
	}
	b.PausedUntil, b.RecoverUntil = until, until.Add(p.Recover)
	b.Tokens = 0
	if now.After(b.UpdatedAt) {
		b.UpdatedAt = now
	}
	return b
}

// seconds is s seconds rounded up, at most a day (a tiny rate's wait would
// overflow a Duration).
func seconds(s float64) time.Duration {
	return time.Duration(math.Ceil(min(s, 86400) * float64(time.Second)))
}
