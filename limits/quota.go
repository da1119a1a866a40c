package limits

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Quota is a tenant's send quota in one lane: the notifications a second
// the tenant may put into the lane, and how many at once. A Quota without
// a Tenant is every tenant's, each with a bucket of its own; one with a
// Tenant is that tenant's instead (Rate 0 there: no quota for it).
//
// Quotas bound what one tenant may ask of a lane, where fairness (the
// claim's turns between tenants) only shares what they ask. They are
// taken at two places, from one bucket per tenant and lane in the
// process:
//
//   - POST /v1/notifications (package intake) takes one token after the
//     request has named its kind, and so its lane; past the quota it is
//     answered 429 with Retry-After and nothing is written. A request
//     that turns out a replay, a conflict or a store failure gives its
//     token back (LaneSend's undo).
//   - A campaign's fan-out (package campaign, on the leader) takes as
//     many tokens as the bucket holds, up to its round of batches, fans
//     out at most that many recipients, and gives back the tokens of those
//     it did not fan out (a last batch shorter than its grant, a batch
//     that failed and wrote nothing: LaneTake's settle); it fans out the
//     rest in later rounds as the bucket refills. A campaign is paced to
//     the quota, never refused by it: its recipients were accepted when
//     their page was.
//
// The buckets are laneBuckets rather than rate.Limiters because both
// takers give tokens back after time has passed (intake after its store
// call, the fan-out after its batches' transactions), and a
// rate.Reservation's CancelAt restores nothing once its time is past.
type Quota struct {
	Tenant string
	Lane   heraldtype.Lane
	Rate   float64
	// Burst defaults to twice Rate, at least 1.
	Burst int
}

type laneKey struct {
	tenant string
	lane   heraldtype.Lane
}

// quotas resolves a (tenant, lane) to its quota: the tenant's own entry,
// else the lane's.
type quotas struct {
	own   map[laneKey]Quota
	lanes map[heraldtype.Lane]Quota
}

func newQuotas(qs []Quota) quotas {
	q := quotas{own: map[laneKey]Quota{}, lanes: map[heraldtype.Lane]Quota{}}
	for _, e := range qs {
		e.Burst = burst(e.Rate, e.Burst)
		if e.Tenant == "" {
			q.lanes[e.Lane] = e
		} else {
			q.own[laneKey{e.Tenant, e.Lane}] = e
		}
	}
	return q
}

func (q quotas) empty() bool { return len(q.own) == 0 && len(q.lanes) == 0 }

func (q quotas) of(tenant string, lane heraldtype.Lane) (Quota, bool) {
	e, ok := q.own[laneKey{tenant, lane}]
	if !ok {
		e, ok = q.lanes[lane]
	}
	return e, ok && e.Rate > 0
}

// bucket returns the bucket of (tenant, lane), made full at its first
// use; nil when the pair has no quota.
func (l *Limiter) bucket(tenant string, lane heraldtype.Lane) *laneBucket {
	if l == nil {
		return nil
	}
	q, ok := l.quotas.of(tenant, lane)
	if !ok {
		return nil
	}
	return bucketOf(l, l.lanes, laneKey{tenant, lane}, func() *laneBucket { return newBucket(q.Rate, q.Burst) })
}

// LaneSend takes one send of tenant's into lane. It returns undo, which
// gives the token back (call it when the send wrote nothing new), or the
// wait until the bucket holds a token again when it is empty; a refused
// send spends nothing.
func (l *Limiter) LaneSend(tenant string, lane heraldtype.Lane) (undo func(), wait time.Duration) {
	b := l.bucket(tenant, lane)
	if b == nil {
		return func() {}, 0
	}
	return l.takeOne(b)
}

// takeOne takes one token of b now. It returns undo, which gives it back
// (once), or the wait until b holds one again; a refusal spends nothing.
func (l *Limiter) takeOne(b *laneBucket) (undo func(), wait time.Duration) {
	if _, wait := b.take(l.cfg.Clock.Now(), 1); wait > 0 {
		return nil, wait
	}
	return sync.OnceFunc(func() { b.giveBack(l.cfg.Clock.Now(), 1) }), 0
}

// LaneTake takes up to n sends of tenant's into lane without waiting: all
// n when the pair has no quota, else as many whole tokens as the bucket
// holds now (0 when it is empty). The caller then calls settle once with
// how many of the granted sends it used: the tokens of the others go back
// to the bucket, so a tenant is charged for what it sent, not for what
// it was offered.
func (l *Limiter) LaneTake(tenant string, lane heraldtype.Lane, n int) (granted int, settle func(used int)) {
	b := l.bucket(tenant, lane)
	if b == nil || n <= 0 {
		return max(n, 0), func(int) {}
	}
	granted, _ = b.take(l.cfg.Clock.Now(), n)
	var settled atomic.Bool
	return granted, func(used int) {
		if !settled.CompareAndSwap(false, true) {
			return // settled already
		}
		if unused := granted - min(max(used, 0), granted); unused > 0 {
			b.giveBack(l.cfg.Clock.Now(), unused)
		}
	}
}

// laneBucket is a token bucket, as rate.Limiter's (tokens refill at rate
// a second up to burst, the bucket full at first), that can take tokens
// back at any time after they were taken.
type laneBucket struct {
	rate, burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time // when tokens was last brought up to date
}

// newBucket is a full bucket of burst tokens refilled at rate a second.
func newBucket(rate float64, burst int) *laneBucket {
	return &laneBucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// refill brings tokens up to now; b.mu is held.
func (b *laneBucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
}

// maxWait bounds the wait take reports: past it the client asks again.
const maxWait = time.Hour

// take takes up to n whole tokens (n ≥ 1). It returns how many, or, when
// the bucket holds less than one, 0 and the wait until it holds one.
func (b *laneBucket) take(now time.Time, n int) (int, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	k := min(n, int(math.Floor(b.tokens)))
	if k <= 0 {
		// At most maxWait: a tiny rate's wait would overflow a Duration,
		// and a negative wait would read as none.
		return 0, time.Duration(min((1-b.tokens)/b.rate, maxWait.Seconds()) * float64(time.Second))
	}
	b.tokens -= float64(k)
	return k, 0
}

// giveBack returns n tokens taken before, up to a full bucket.
func (b *laneBucket) giveBack(now time.Time, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens = min(b.burst, b.tokens+float64(n))
}

// OverQuota answers 429 with Retry-After for a send past its lane quota.
func OverQuota(w http.ResponseWriter, wait time.Duration, lane heraldtype.Lane) {
	TooMany(w, wait, fmt.Sprintf("this tenant is over its send quota in lane %s: retry after Retry-After seconds", lane))
}
