// Package limits answers 429 to a caller that goes faster than its share:
// each API key has a request rate over every route it calls, each
// tenant a send rate over POST /v1/notifications, and a tenant may have a
// send quota per lane (quota.go). All are token buckets
// (golang.org/x/time/rate) held in the process's memory: with N herald
// processes behind a load balancer a caller gets up to N times the rate,
// which the deployment divides (or sets per process). They guard the
// service, not a provider's budget: provider limits are package
// ratelimit's, shared through the database.
//
// A refused request is answered 429 application/problem+json with
// Retry-After: the whole seconds until its bucket holds a token again
// (at least 1). A refused request spends nothing, so a client that waits
// Retry-After is served.
//
// Caps on what one request may ask for (params count and depth, rendered
// text size) are package catalog's (catalog/limits.go): they are checks
// of the request, the same for every process.
package limits

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/problem"
)

// Config sets the rates; a zero rate is no limit.
type Config struct {
	// KeyRate is the requests a second one API key may make, over every
	// route; KeyBurst the most at once (defaults to twice KeyRate, at
	// least 1).
	KeyRate  float64
	KeyBurst int
	// SendRate is the notifications a second one tenant may send (POST
	// /v1/notifications, every key of the tenant together); SendBurst the
	// most at once (defaults to twice SendRate, at least 1).
	SendRate  float64
	SendBurst int
	// Quotas are the tenants' send quotas per lane (quota.go).
	Quotas []Quota
	Clock  clock.Clock
}

// Limiter holds the buckets of one process.
type Limiter struct {
	cfg Config

	mu    sync.Mutex
	keys  map[string]*rate.Limiter
	sends map[string]*laneBucket // laneBuckets: a send refused by its lane quota gives its token back

	quotas quotas
	lanes  map[laneKey]*laneBucket
}

// New returns a limiter; nil when cfg limits nothing (every method of a
// nil Limiter allows).
func New(cfg Config) *Limiter {
	q := newQuotas(cfg.Quotas)
	if cfg.KeyRate <= 0 && cfg.SendRate <= 0 && q.empty() {
		return nil
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	cfg.KeyBurst = burst(cfg.KeyRate, cfg.KeyBurst)
	cfg.SendBurst = burst(cfg.SendRate, cfg.SendBurst)
	return &Limiter{cfg: cfg, keys: map[string]*rate.Limiter{}, sends: map[string]*laneBucket{},
		quotas: q, lanes: map[laneKey]*laneBucket{}}
}

func burst(r float64, b int) int {
	if b > 0 {
		return b
	}
	return max(1, int(math.Ceil(2*r)))
}

// Key takes one request of keyID's; it returns 0, or how long to wait.
func (l *Limiter) Key(keyID string) time.Duration {
	if l == nil || l.cfg.KeyRate <= 0 {
		return 0
	}
	return l.take(l.keys, keyID, l.cfg.KeyRate, l.cfg.KeyBurst)
}

// Send takes one send of tenant's; it returns 0, or how long to wait.
func (l *Limiter) Send(tenant string) time.Duration {
	_, wait := l.sendTake(tenant)
	return wait
}

// sendTake takes one send of tenant's. It returns undo, which gives the
// token back, or the wait until the bucket holds one again; a refused
// send spends nothing.
func (l *Limiter) sendTake(tenant string) (undo func(), wait time.Duration) {
	if l == nil || l.cfg.SendRate <= 0 {
		return func() {}, 0
	}
	return l.takeOne(bucketOf(l, l.sends, tenant, func() *laneBucket { return newBucket(l.cfg.SendRate, l.cfg.SendBurst) }))
}

// sendTaken is the context key of the undo of a request's send (Sends).
type sendTaken struct{}

// GiveSendBack gives back the send rate's token of the request whose
// context ctx is (Sends took it), if any: for a send refused by its lane's
// quota, which must not spend the rate the tenant's other lanes share.
func GiveSendBack(ctx context.Context) {
	if undo, ok := ctx.Value(sendTaken{}).(func()); ok {
		undo()
	}
}

// take takes one token of name's bucket in m now. It returns 0, or the
// wait until the bucket holds one again; a refusal spends nothing.
func (l *Limiter) take(m map[string]*rate.Limiter, name string, r float64, b int) time.Duration {
	lim := bucketOf(l, m, name, func() *rate.Limiter { return rate.NewLimiter(rate.Limit(r), b) })
	now := l.cfg.Clock.Now()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return min(d, maxWait) // as the buckets' (quota.go)
	}
	return 0
}

// bucketOf returns m's bucket for k, made by fresh at its first use.
func bucketOf[K comparable, B any](l *Limiter, m map[K]B, k K, fresh func() B) B {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := m[k]
	if !ok {
		b = fresh()
		m[k] = b
	}
	return b
}

// TooMany answers 429 with Retry-After: wait rounded up to whole seconds.
func TooMany(w http.ResponseWriter, wait time.Duration, detail string) {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	problem.New(w, http.StatusTooManyRequests, detail)
}

// Keys is middleware that takes one request of the key keyID names (""
// passes) and answers 429 past its rate.
func (l *Limiter) Keys(keyID func(*http.Request) string, next http.Handler) http.Handler {
	if l == nil || l.cfg.KeyRate <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := keyID(r); id != "" {
			if wait := l.Key(id); wait > 0 {
				TooMany(w, wait, "this API key is over its request rate: retry after Retry-After seconds")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Sends is middleware that takes one send of the tenant tenant names and
// answers 429 past its rate. The handler may give the send back
// (GiveSendBack).
func (l *Limiter) Sends(tenant func(*http.Request) string, next http.Handler) http.Handler {
	if l == nil || l.cfg.SendRate <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		undo, wait := l.sendTake(tenant(r))
		if wait > 0 {
			TooMany(w, wait, "this tenant is over its send rate: retry after Retry-After seconds")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sendTaken{}, undo)))
	})
}
