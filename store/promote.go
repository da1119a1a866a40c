package store

import (
	"sync"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Deferred outbox rows.
//
// The claim shares a lane between its (tenant, scope) pairs by walking
// every pair that has PENDING rows, one probe of the claim's index each
// (the loose scan of qOutboxClaim in both stores). Rows due far ahead (a
// send_at tomorrow, a quiet-hours deferral to 08:00) used to sit in that
// index beside the due ones, so a lane whose 5,000 clinics had each
// scheduled tomorrow's reminders paid 5,000 probes on every claim: 30 ms a
// claim of 32 against 2.3 ms with none (PostgreSQL, measured), every claim
// all day, busy or idle.
//
// A row written PENDING and due more than DeferHorizon ahead is written
// deferred instead: still PENDING (GET, reconciliation, expiry, cancel
// and the counts see no difference), but in a small index of its own
// (lane, available_at) and out of the claim's, so the claim never probes
// its pair. Its owner is the lane's claim: OutboxClaim promotes the lane's
// deferred rows that fall due within DeferHorizon (a write of the flag, at
// most PromoteBatch rows a statement) before it claims, at most once every
// PromoteEvery per lane and process, and again at the next claim while a
// promotion fills its batch. So a deferred row is back in the claim's
// index at least DeferHorizon - PromoteEvery before it is due, as long as
// anything claims the lane, which is what a PENDING row needs anyway;
// a row whose promotion came late (no process ran) is promoted by the
// first claim and claimed by the one after it, or the same one.
//
// The cost is one more write of each deferred row, made before it is due,
// and nothing for the rows due within the horizon (retries, short
// deferrals, sends due now), which are written as before.
const (
	DeferHorizon = 5 * time.Minute
	PromoteEvery = 5 * time.Second
	PromoteBatch = 10_000
)

// Promotions keeps, per lane, when a store's claims last promoted the
// lane's deferred rows and whether that promotion filled its batch.
type Promotions struct {
	mu   sync.Mutex
	last map[heraldtype.Lane]promotion
}

type promotion struct {
	at   time.Time
	full bool
}

// Due says whether a claim of lane at now should promote first: never
// promoted by this store, PromoteEvery since the last promotion, the last
// one filled its batch, or the clock went back.
func (p *Promotions) Due(lane heraldtype.Lane, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.last[lane]
	return !ok || l.full || now.Sub(l.at) >= PromoteEvery || now.Before(l.at)
}

// Done records a promotion of lane at now that moved n rows.
func (p *Promotions) Done(lane heraldtype.Lane, now time.Time, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = make(map[heraldtype.Lane]promotion)
	}
	p.last[lane] = promotion{at: now, full: n >= PromoteBatch}
}
