package limits

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"golang.org/x/time/rate"

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
//     many tokens as the bucket holds, up to its batch, and fans out that
//     many recipients; it fans out the rest in later rounds as the bucket
//     refills. A campaign is paced to the quota, never refused by it:
//     its recipients were accepted when their page was.
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

// bucket returns the bucket of (tenant, lane); nil when the pair has no
// quota.
func (l *Limiter) bucket(tenant string, lane heraldtype.Lane) *rate.Limiter {
	if l == nil {
		return nil
	}
	q, ok := l.quotas.of(tenant, lane)
	if !ok {
		return nil
	}
	return bucketOf(l, l.lanes, laneKey{tenant, lane}, q.Rate, q.Burst)
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
	return l.reserve(b)
}

// LaneTake takes up to n sends of tenant's into lane without waiting: all
// n when the pair has no quota, else as many whole tokens as the bucket
// holds now (0 when it is empty).
func (l *Limiter) LaneTake(tenant string, lane heraldtype.Lane, n int) int {
	b := l.bucket(tenant, lane)
	if b == nil || n <= 0 {
		return max(n, 0)
	}
	now := l.cfg.Clock.Now()
	k := min(n, int(math.Floor(b.TokensAt(now))))
	if k <= 0 {
		return 0
	}
	res := b.ReserveN(now, k)
	if res.DelayFrom(now) > 0 {
		// Another taker came between (intake on the same bucket): take
		// nothing this time.
		res.CancelAt(now)
		return 0
	}
	return k
}

// OverQuota answers 429 with Retry-After for a send past its lane quota.
func OverQuota(w http.ResponseWriter, wait time.Duration, lane heraldtype.Lane) {
	TooMany(w, wait, fmt.Sprintf("this tenant is over its send quota in lane %s: retry after Retry-After seconds", lane))
}
