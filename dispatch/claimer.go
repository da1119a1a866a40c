// Package dispatch moves outbox rows to the sender. With the db transport a
// Claimer per lane leases due rows straight from the outbox and hands each to
// the sender; with the rabbitmq transport the relay publishes them instead.
//
// Each lane has its own Claimer and its own slots (sender concurrency), so a
// marketing backlog never occupies a slot a payment notification needs.
//
// A Claimer writes only the outbox, and every write after the claim is fenced
// by the row's token and live lease: if this process stalled past its lease
// and another took the row, its late write changes nothing. In the common
// case it writes nothing after the claim at all: it hands the sender the
// row's fence with the job, and the sender's result write settles the row
// in the same statement; the Claimer settles only what that did not.
//
// A Claimer claims as soon as a slot is free, with two exceptions. While
// its lane has a backlog (the claim before came back full) it waits for
// Gather slots, at most GatherWait, or for a wake-up: a claim's cost is
// mostly per statement, and sends that end one by one otherwise make
// claims of a few rows each. The wake-up ends the wait because a row just
// committed may be a small tenant's behind a big one's backlog, and the
// reserve (ClaimerConfig.Reserve) keeps a slot free for it. And once the
// lane has caught up with a stream of rows it cools down between claims
// (below).
//
// # Tenants take turns
//
// The claim shares a lane between its tenants (store.OutboxClaim): a due
// row's turn is its tenant's rows in flight plus its place in that
// tenant's queue, and the lowest turns win. Where each claim takes one
// row and nothing stays in flight between claims (a Claimer of one slot,
// whose send is settled before its next claim, always so on SQLite; a
// relay topping its window up one row at a time behind a slow consumer,
// whose published rows are no longer in flight), every tenant waits at
// the same turn. Those ties went to the oldest row, so a small tenant's
// row waited behind all of a big tenant's backlog. So each claim loop
// remembers the tenant it served last and passes it to its next claim
// (OutboxClaimParams.After), whose ties go round the tenants in byte
// order from the one after it: with two tenants waiting, one-row claims
// alternate between them.
//
// Inside a tenant its scopes (a clinic, a brand: store.NotificationCreateParams.Scope)
// take turns the same way: a row's place in its tenant comes from its
// scope's rows in flight and its place in that scope's queue, so a
// tenant's share of the lane goes round its scopes and spreading sends
// over many scopes wins a tenant no more of the lane. The loop remembers,
// per tenant, the scope it served last (round, OutboxClaimParams.Scopes).
//
// The memory is the loop's own: loops and processes side by side each
// keep their own round, so together they go round only roughly, but none
// gives every tie to one tenant. A round shared through the database
// (each tenant's last claim time, ties to the least recently served)
// would go round exactly, at the price of a write per tenant per claim
// on the hottest statement, for an order that SKIP LOCKED bends anyway.
// A claim of several rows returns them oldest first, without their turns,
// so the loop works out the tenant served last (lastServed): exactly for
// a claim of one row and whenever the tenants had as many rows in flight
// as each other, roughly otherwise.
//
// # Claims cool down
//
// A loop whose claim took several rows (CoolAfter) but came back short of
// its limit has caught up with a stream of them, and begins its next
// claim no sooner than Cooldown after that one began
// (ClaimerConfig.Cooldown, RelayConfig.Cooldown; claim_cooldown, 10 ms by
// default). The wake-ups, freed slots and second looks that come
// meanwhile make one claim when it ends, which takes what they were sent
// for. Without it a steady stream was claimed as it committed: intake's
// group commits and the sends ending one by one made claims of about five
// rows on PostgreSQL (8,180 claims for 40,000 notifications), each with
// the claim's mostly fixed cost, and the relay published batches of about
// a dozen, which RabbitMQ writes to a quorum queue's log and confirms at a
// cost mostly per batch (a bare client: 161 µs of the broker's CPU a
// message in bursts of 12, 88 µs in bursts of 200). With it the HTTP
// end-to-end run on PostgreSQL ran 13% more notifications a second
// (alternated pairs, docs/benchmarks.md).
//
// A row waits at most Cooldown for it, and only while rows come faster
// than claims take them: a claim that found one row or none starts no
// cooldown (rows arrive more slowly than claims end, and waiting would
// gather nothing), a loop idle for longer claims at once, and a backlog (a
// claim that came back full) is claimed without it. With a cooldown after
// every claim that took a row, transactional notifications at 100 a
// second beside a draining campaign waited 12 ms at the median against
// 6 ms without one (BenchmarkIsolation), each claim taking one row either
// way; with the CoolAfter rule the median is 5 ms again. Where a stream
// is dense enough the price stays: the Go API's median from commit to
// provider call went from 12–13 ms to 15–16 ms (p99 unchanged at about
// 40 ms) while it ran 8–18% more notifications a second. River's
// FetchCooldown is the same idea (100 ms by default; its runs beside
// herald use 10 ms).
//
// A slot stands for a provider call, not for the row's whole way: a send
// gives it back once its call has returned (sender.WithCallEnded), while
// its result is still being written, and the row keeps a place of its own
// until it is settled (at most Concurrency such rows besides the sends). With
// a fast provider a send's result write took as long as its claim and call
// together, and held the slot all that while: a 0 ms provider's drain ran
// about 25% more sends a second once the slot was freed at the call's end
// (BenchmarkDrainHerald, 64 slots). What a crash leaves is unchanged: a
// send whose result was not written is SENDING, and the stale sweep ends it
// UNKNOWN, never a second call.
//
// # Rows handed over at intake
//
// With the db transport, a row due now whose lane has a free slot in this
// process need not wait in the outbox for a claim (the rabbitmq
// transport's Relay takes such rows too, written PUBLISHING: its "Rows
// handed over at intake"): intake asks the lane's
// Claimer for a slot (Offer) before its create, the create writes the row
// already claimed by this process (store.NotificationCreateParams.Claim:
// CLAIMED, a fresh token, a lease) and returns it, and intake hands it to
// the slot it holds (Hand.Take). The row skips the claim's statement, its
// new row version and index entries, and the wake-up: about a sixth of
// PostgreSQL's statement time a notification in the HTTP end-to-end run
// went to the claim (docs/benchmarks.md).
//
// Nothing else changes for the row. It is CLAIMED under a lease like a
// claimed row, held (its heartbeat extends the lease) from the hand-over,
// and sent and settled by the same code; if the process dies between the
// commit and the send, the reclaim sweep offers the row again once its
// lease runs out, as it does a claimed row's (the stale sweep ends a send
// that had begun UNKNOWN, never a second call). If the create writes
// nothing (a replay, a conflict, a dedup hit) or is not Handable, the slot
// is given back (Hand.Drop) and the row, if any, is PENDING as before; if
// it fails, the slot is given back too, and a row its statement may have
// committed claimed before the connection broke is offered again when its
// lease runs out (a minute by default), as a claim's are.
//
// An offer is refused, and the row goes to the outbox, where the claim's
// order and fairness decide: while the lane has a backlog (the last claim
// came back full: older rows are due; also until the first claim has
// looked) that the row would not come before (below), when no slot is
// free but those a claim under way may fill (its limit, pledged to it),
// and when the tenant, or its scope, already holds its share of the slots
// (ClaimerConfig.Reserve, share), counting the claim under way as if every
// row it may bring were the tenant's, in its fullest scope (none, or its
// cap of the tenant's other scopes' rows, where the claim leaves the
// tenant or that scope: Claimer.fits). So a hand-over does not overtake a
// backlog the claimer knows of, nor lets a tenant past its share; a row
// committed PENDING a moment before (another process's, one refused an
// offer) may go after it, as after any row claimed a moment sooner.
//
// A backlog refuses only the rows it would be claimed before. The claim
// that came back full names the tenants and scopes whose rows wait
// (Claimer.waiting), and so does every offer refused while the backlog
// lasts (its row goes to the outbox); a row of a tenant not among them
// holding fewer sends than each of their tenants has a lower turn than
// any of their rows, so the next claim would most likely take it first:
// it is handed over instead of waiting for that claim. A small tenant's
// notification beside a big one's backlog then starts as it does on an
// idle lane, not after the wake-up, a gather and a claim (issue 12's
// fairness run on SQLite, three alternated pairs: B's p99 beside A
// 10.5–14.3 ms, 2.0–2.5× idle, now 6.5–6.7 ms, 1.32–1.46×; p50 3.6–5.3
// ms, now 2.0–2.5; docs/benchmarks.md). The rule is this process's view,
// as the shares are: it counts its own sends in flight, where the claim
// counts every process's rows held, and tenants the full claim left out
// are only known to be at its highest turns or later. Each row handed
// over counts in its tenant's sends at once, so a tenant keeps this way
// only while it holds fewer than the backlog's tenants. Inside a waiting
// tenant the claim orders the scopes as it orders tenants: a scope that
// does not wait and holds fewer sends than each of its tenant's waiting
// scopes has the tenant's next turn, so its row passes too, while its
// tenant holds fewer sends than each other waiting tenant and than a
// limit: in a lane with a reserve, the bound plus half the reserve, as
// the shares let a tenant's other scopes have (and keep the rest of the
// reserve for the other tenants, among them those the full claim left
// out); with none, the most a tenant of the full claim held with its rows
// (that claim's highest turn, about where the tenants it left out wait: a
// tenant's turn is its sends held plus one). A clinic's notification beside another
// clinic's backlog of the same tenant then starts as on an idle lane too,
// on the slots the backlog's own sends free (issue 12's scoped fairness
// run, docs/benchmarks.md). A row handed over may pass rows of its own
// tenant that were refused an offer before, as rows claimed together may
// start in any order.
//
// A loop whose last claim found nothing due (and skipped no tenant: the
// lane drained) starts no claim when a send's slot frees: nothing was left
// that the slot could take, and rows that fall due later come with a wake-up
// (intake's, a chain's next step's, a reclaimed lease's, a NOTIFY from
// another process) or by the poll (a retry's); it looks once more
// ClaimAgainAfterWake after the claim that found it drained, since on
// PostgreSQL that claim may only have found its picks locked by another
// process's claim, with more rows due behind them. With rows handed over,
// every send's end otherwise made an empty claim: 1,269 empty claims for
// 10,000 notifications in the HTTP end-to-end run, most of what the
// hand-over had saved. A freed slot still claims at once after a claim
// that took rows (a short claim may leave some behind: a tenant's past
// its share, rows another process had locked) or skipped a tenant, and
// after a look that found no slot free.
package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// Backoff is the dispatcher's wait before the n-th retry of a row (1-based):
// 1, 2, 4, 8, 16, then 30 minutes.
func Backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 5 {
		return 30 * time.Minute
	}
	return time.Duration(1<<(n-1)) * time.Minute
}

// AlertAfterAttempts is the failed dispatch attempt that raises an alert.
const AlertAfterAttempts = 5

// Sender is the one sender algorithm, as the claimer uses it.
type Sender interface {
	Send(ctx context.Context, job heraldtype.Job) sender.Result
}

// ClaimerConfig configures one lane's claimer.
type ClaimerConfig struct {
	Lane  heraldtype.Lane
	Store store.Outbox
	// Wake carries "rows became due" signals for this lane.
	Wake   <-chan struct{}
	Sender Sender
	// Owner names this process in claims.
	Owner string
	// Concurrency is the number of sends in flight on this lane: rows
	// claimed whose provider call has not returned. A row whose call has
	// returned gives its slot back (sender.WithCallEnded) and keeps a place
	// of its own while its result is written, at most Concurrency more, so
	// the next send does not wait for that write's commit.
	Concurrency int
	// Reserve is how many of those slots are kept from the tenant holding
	// the most: a tenant with Concurrency − Reserve sends in flight is
	// skipped by the next claims (store.OutboxClaimParams.Skip) until one
	// of its calls ends. The
	// fair claim already puts a small tenant's rows first, but only into
	// a slot that is free: behind a big tenant's sends to a slow provider,
	// which start together and end together, a small tenant's row waited
	// for the next wave (50 ms p99 behind 100 ms sends, against 5–10 ms
	// idle). Half of the kept slots (rounded down: none of a Reserve of 1)
	// may serve the tenant's other scopes while one scope holds nearly all
	// of its share (Claimer.share). Below half of Concurrency (more is
	// taken as the most below it); zero (the default) lets one tenant fill
	// the lane.
	Reserve int
	// Gather is how many free slots a claim waits for while the lane has
	// a backlog (the claim before it came back full), for at most
	// GatherWait: fewer, larger claims. A claim's cost on PostgreSQL is
	// mostly fixed (it walks the tenants and their turns, then updates and
	// joins its rows), so claiming as each slot frees made a 0 ms
	// provider's drain claim about 10 rows at a time, 74 µs of the
	// database's time a row; waiting for 32 of 64 slots made it 23 rows,
	// 53 µs a row. A wake-up (rows just committed) ends the wait, and with
	// no backlog a row is claimed as soon as it is due, as before. Zero
	// (the default) claims as soon as any slot is free.
	Gather int
	// GatherWait bounds the wait for Gather free slots: the most a claim
	// is put off. Defaults to DefaultGatherWait.
	GatherWait time.Duration
	// Cooldown is the least time from the start of a claim that took
	// CoolAfter rows or more but came back short of its limit (the lane
	// caught up with a stream) to the start of the next: the wake-ups,
	// freed slots and second looks meanwhile make one claim when it ends.
	// Zero (the default) claims on each of them at once. See "Claims cool
	// down" in the package doc.
	Cooldown time.Duration
	// Lease is how long a claim holds a row before the reclaim sweep may
	// offer it again. While a row's send is in flight the claimer extends
	// its lease every Heartbeat, so a send that takes longer (store
	// retries, the provider call, record retries) keeps its row.
	Lease time.Duration
	// Heartbeat is how often the leases of the rows this claimer holds are
	// extended, all in one fenced write. Defaults to a third of Lease.
	Heartbeat time.Duration
	// PollInterval is how often an idle claimer looks for due rows unbidden.
	PollInterval time.Duration
	// MaxAttempts is the failed dispatch attempts after which a row is FAILED.
	MaxAttempts int
	Logger      *slog.Logger
	Alerts      alert.Sink
	Metrics     *metrics.Metrics
	// SettleTimeout bounds the fenced write after a send. Defaults to 10 seconds.
	SettleTimeout time.Duration
	// Gate, when set, looks at each claimed job before the sender does:
	// the dispatcher's own layer of the send policy (quiet hours' early
	// stop, the non-production allow-list). It returns the result of what
	// it decided (sender.Sender.Apply) and true, or false to hand the job
	// to the sender. The result is settled as the sender's would be. A
	// job whose notification the claim found cancelled does not meet it.
	Gate func(ctx context.Context, job heraldtype.Job) (sender.Result, bool)
}

// Claimer leases a lane's due rows and runs the sender on each.
type Claimer struct {
	ClaimerConfig
	settler settler
	// slots holds a token per send in flight (Concurrency), from the claim
	// until the provider call returns or the row is settled without one;
	// places, one per row held (twice Concurrency), from the claim until
	// the row is settled. A claim takes what both have free.
	slots  chan struct{}
	places chan struct{}
	freed  chan struct{}
	held   held

	// Rows handed over at intake (Offer). mu orders an offer's take of a
	// slot against the loop's count of free slots before a claim: the
	// slots the claim may fill are pledged to it until its rows have
	// started, and an offer takes only a slot beyond them (one freed
	// while the claim ran).
	mu      sync.Mutex
	running bool // Run is claiming; offers may be made
	pledged int  // the claim under way's limit
	// pledgedSkip is what the claim under way leaves (share): of the
	// tenant it names it brings at most Cap rows, or none.
	pledgedSkip skipping
	backlog     bool // the loop's last claim came back full
	// waiting is, while backlog, the tenants and scopes whose rows are
	// known to wait: those of the last claim's rows (it came back full)
	// and those refused an offer since (none until a claim has looked:
	// every offer waits).
	waiting []scopeOf
	// top is, while backlog, the most sends a tenant of the last full
	// claim held with that claim's rows: about the claim's highest turn.
	top     int
	work    chan<- store.Claimed
	handing sync.WaitGroup // offers made and not yet taken or dropped
}

// held is the fences of the rows a claimer holds, from the claim until the
// row is settled: the rows whose leases its heartbeat extends; and how
// many sends in flight each scope of a tenant has (Reserve).
type held struct {
	mu     sync.Mutex
	rows   map[store.Fence]struct{}
	scopes map[scopeOf]int
}

// scopeOf names a scope of a tenant.
type scopeOf struct{ tenant, scope string }

func (h *held) add(row store.Claimed) {
	h.reserve(row.Tenant, row.Scope)
	h.hold(row)
}

// reserve counts a send of tenant's scope in flight (add, Offer).
func (h *held) reserve(tenant, scope string) {
	h.mu.Lock()
	if h.scopes == nil {
		h.scopes = map[scopeOf]int{}
	}
	h.scopes[scopeOf{tenant, scope}]++
	h.mu.Unlock()
}

// hold holds row's fence: its lease is extended until it is removed.
func (h *held) hold(row store.Claimed) {
	h.mu.Lock()
	if h.rows == nil {
		h.rows = map[store.Fence]struct{}{}
	}
	h.rows[row.Fence] = struct{}{}
	h.mu.Unlock()
}

// called counts row's send as no longer in flight; its row stays held.
func (h *held) called(row store.Claimed) {
	h.mu.Lock()
	g := scopeOf{row.Tenant, row.Scope}
	if h.scopes[g]--; h.scopes[g] <= 0 {
		delete(h.scopes, g)
	}
	h.mu.Unlock()
}

// remove lets row go, after called.
func (h *held) remove(row store.Claimed) {
	h.mu.Lock()
	delete(h.rows, row.Fence)
	h.mu.Unlock()
}

// of returns how many sends in flight tenant has.
func (h *held) of(tenant string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ofLocked(tenant)
}

// ofLocked is of, under mu.
func (h *held) ofLocked(tenant string) int {
	n, _ := h.tenantLocked(tenant)
	return n
}

// tenantLocked returns how many sends in flight tenant has and the most
// one of its scopes has, under mu.
func (h *held) tenantLocked(tenant string) (all, fullest int) {
	for g, k := range h.scopes {
		if g.tenant == tenant {
			all += k
			fullest = max(fullest, k)
		}
	}
	return all, fullest
}

// before reports whether a row of tenant's scope would be claimed before
// every row of waiting (the tenants and scopes whose rows are known to
// wait). A tenant none of whose scopes waits passes where it holds fewer
// sends than each waiting tenant: its turn is below all of theirs. A
// waiting tenant's other scope passes where that scope holds fewer sends
// than each of its tenant's waiting scopes (it comes first among the
// tenant's rows), its tenant fewer than each other waiting tenant, and
// fewer than top, the limit the caller allows its turn (offerable: the
// full claim's highest, or the shares' bound with a reserve). False for
// an empty waiting, and for a scope that waits itself.
func (h *held) before(tenant, scope string, waiting []scopeOf, top int) bool {
	if len(waiting) == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	mine, ours := h.ofLocked(tenant), h.scopes[scopeOf{tenant, scope}]
	for _, g := range waiting {
		switch {
		case g.tenant != tenant:
			if mine >= h.ofLocked(g.tenant) {
				return false
			}
		case g.scope == scope || ours >= h.scopes[g] || mine >= top:
			return false
		}
	}
	return true
}

// within returns how many sends in flight tenant has, the most one of
// its scopes has, and how many scope has.
func (h *held) within(tenant, scope string) (all, fullest, ours int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	all, fullest = h.tenantLocked(tenant)
	return all, fullest, h.scopes[scopeOf{tenant, scope}]
}

// most returns the tenant with the most sends in flight and how many,
// and of that tenant's scopes the one with the most and how many.
func (h *held) most() (tenant string, n int, scope string, m int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tenants := make(map[string]int, len(h.scopes))
	for g, k := range h.scopes {
		tenants[g.tenant] += k
	}
	for t, k := range tenants {
		if k > n {
			tenant, n = t, k
		}
	}
	for g, k := range h.scopes {
		if g.tenant == tenant && k > m {
			scope, m = g.scope, k
		}
	}
	return tenant, n, scope, m
}

func (h *held) list() []store.Fence {
	h.mu.Lock()
	defer h.mu.Unlock()
	fences := make([]store.Fence, 0, len(h.rows))
	for f := range h.rows {
		fences = append(fences, f)
	}
	return fences
}

// NewClaimer returns a claimer.
func NewClaimer(cfg ClaimerConfig) *Claimer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Alerts == nil {
		cfg.Alerts = alert.Log{Logger: cfg.Logger}
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 10 * time.Second
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	cfg.Reserve = max(min(cfg.Reserve, (cfg.Concurrency-1)/2), 0)
	cfg.Gather = max(min(cfg.Gather, cfg.Concurrency), 0)
	if cfg.GatherWait <= 0 {
		cfg.GatherWait = DefaultGatherWait
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.MaxAttempts < 1 {
		cfg.MaxAttempts = 20
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = max(cfg.Lease/3, time.Millisecond)
	}
	return &Claimer{
		ClaimerConfig: cfg, slots: make(chan struct{}, cfg.Concurrency), places: make(chan struct{}, 2*cfg.Concurrency),
		freed: make(chan struct{}, 1),
		settler: settler{who: "dispatch", lane: cfg.Lane, store: cfg.Store, maxAttempts: cfg.MaxAttempts,
			logger: cfg.Logger, alerts: cfg.Alerts, metrics: cfg.Metrics},
	}
}

// Run claims and sends until ctx is cancelled, then stops claiming and waits
// for the sends in flight, extending their leases until they are settled.
// Rows claimed but not yet started go back to PENDING at once.
func (c *Claimer) Run(ctx context.Context) {
	// A long-lived worker per row that may be held runs the sends: a
	// goroutine per row would grow a fresh stack for every send. A row
	// takes a slot and a place before it is handed over, so work never
	// holds more rows than there are workers.
	work := make(chan store.Claimed, cap(c.places))
	var workers sync.WaitGroup
	for range cap(c.places) {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for row := range work {
				c.process(ctx, row)
			}
		}()
	}
	// The heartbeat outlives ctx: sends in flight at shutdown still
	// finish, and keep their rows until they do.
	beat, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	var beating sync.WaitGroup
	beating.Go(func() { c.heartbeat(beat) })
	c.mu.Lock()
	// Until the first claim has looked, the outbox may hold rows due
	// before any intake would hand over (a restart's): no offers.
	c.running, c.work, c.backlog, c.waiting = true, work, true, nil
	c.mu.Unlock()
	defer func() {
		// No new offers; those made are taken or dropped first.
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
		c.handing.Wait()
		close(work)
		workers.Wait()
		stopBeat()
		beating.Wait()
	}()
	poll := time.NewTicker(c.PollInterval)
	defer poll.Stop()
	again := time.NewTimer(ClaimAgainAfterWake)
	again.Stop()
	defer again.Stop()
	var pause claimPause
	backlog := false // the last claim came back full
	// drained: the last claim found nothing and skipped no tenant, so
	// nothing was left due that a slot freed since could take; rows that
	// fall due later come with a wake-up (or by the poll, as a retry's
	// do). A freed slot then starts no claim: with intake handing rows
	// over, every send's end made an empty claim.
	drained := false
	cool := cooler{every: c.Cooldown}
	var served round // whom the last claims served last (lastServed)
	for {
		if ctx.Err() != nil {
			return
		}
		var woken, ok bool
		if backlog {
			woken, ok = c.gather(ctx)
		} else {
			woken, ok = cool.wait(ctx, c.Wake, c.freed)
		}
		if !ok {
			return
		}
		if woken {
			again.Reset(ClaimAgainAfterWake)
		}
		c.mu.Lock()
		free := c.free()
		var limit int
		var skip skipping
		if free > 0 {
			limit, skip = c.share(free)
			c.pledged, c.pledgedSkip = limit, skip
		}
		c.mu.Unlock()
		full := false
		wasDrained := drained
		drained = false
		if free > 0 {
			began := time.Now()
			rows, err := c.Store.OutboxClaim(ctx, store.OutboxClaimParams{
				Lane: c.Lane, Owner: c.Owner, Limit: limit, Lease: c.Lease, Skip: skip.Tenant, SkipScope: skip.Scope, SkipCap: skip.Cap, After: served.after,
				Scopes: served.scopes,
			})
			if err != nil {
				c.claimed()
				if !pause.after(ctx, c.Logger, "dispatch", c.Lane, err) {
					return
				}
				continue
			}
			pause.reset()
			served.served(rows)
			// The backlog, and whose rows wait, are known before the rows
			// count in their tenants' sends: an offer meanwhile weighs the
			// new counts against the new backlog (the pledge keeps the
			// slots the rows will take).
			full = len(rows) == limit
			c.looked(full, rows)
			for _, row := range rows {
				c.held.add(row)
				c.slots <- struct{}{}
				c.places <- struct{}{}
				work <- row
			}
			// Drained only when the claim found nothing at all and
			// skipped no tenant: a short claim may have left rows behind
			// (a tenant's past its share, rows another process had
			// locked, whose claim then takes fewer), and a freed slot
			// claims them.
			drained = len(rows) == 0 && skip.Tenant == ""
			if drained && !wasDrained {
				// One more look soon: on PostgreSQL an empty claim may
				// only have found its picks locked by another process's
				// claim, with more rows due behind them.
				again.Reset(ClaimAgainAfterWake)
			}
			cool.claimed(began, len(rows), limit)
			c.claimed()
		} else {
			c.claimed() // no slot free: the backlog stays as it was known
		}
		// A look with no slot free claims at the first freed slot, not
		// after a gather (the backlog intake's offers wait out is
		// c.backlog, kept as it was): a small tenant's row whose wake-up
		// that look took would otherwise wait out GatherWait.
		if backlog = full; full {
			continue // more may be waiting
		}
		freed := c.freed
		if drained {
			freed = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-c.Wake:
			again.Reset(ClaimAgainAfterWake)
		case <-again.C:
		case <-poll.C:
		case <-freed:
		}
	}
}

// looked records what a claim found: whether it came back full (full), a
// backlog of rows due before the ones intake would hand over, and if so
// the tenants and scopes of its rows, whose rows wait (Claimer.waiting),
// and the most sends one of those tenants holds with its rows
// (Claimer.top). It runs before the rows count in their tenants' sends.
func (c *Claimer) looked(full bool, rows []store.Claimed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backlog = full
	c.waiting, c.top = c.waiting[:0], 0
	if !full {
		return
	}
	took := map[string]int{}
	for _, r := range rows {
		c.wait(scopeOf{r.Tenant, r.Scope})
		took[r.Tenant]++
	}
	for tenant, n := range took {
		c.top = max(c.top, c.held.of(tenant)+n)
	}
}

// wait adds g to the tenants and scopes whose rows wait, under mu.
func (c *Claimer) wait(g scopeOf) {
	if !slices.Contains(c.waiting, g) {
		c.waiting = append(c.waiting, g)
	}
}

// claimed ends a claim's pledge of free slots, its rows started (or none
// claimed: it failed, or no slot was free, and the backlog stays as last
// known): offers may take the slots left.
func (c *Claimer) claimed() {
	c.mu.Lock()
	c.pledged, c.pledgedSkip = 0, skipping{}
	c.mu.Unlock()
}

// DefaultGatherWait is ClaimerConfig.GatherWait's default: what a row of a
// lane with a backlog may wait for a larger claim, beside the many
// milliseconds such a row waits for a slot anyway.
const DefaultGatherWait = 3 * time.Millisecond

// gather waits, while fewer than Gather slots are free, for more sends to
// end, at most GatherWait. A wake-up ends the wait (woken): rows just
// committed, perhaps a small tenant's behind a big one's backlog, are
// claimed at once, so the wait puts off only a backlog's own rows. It
// returns ok false if ctx ended.
func (c *Claimer) gather(ctx context.Context) (woken, ok bool) {
	if c.free() >= c.Gather {
		return false, true
	}
	t := time.NewTimer(c.GatherWait)
	defer t.Stop()
	for c.free() < c.Gather {
		select {
		case <-c.freed:
		case <-c.Wake:
			return true, true
		case <-t.C:
			return false, true
		case <-ctx.Done():
			return false, false
		}
	}
	return false, true
}

// free returns how many rows a claim may take now: the free send slots,
// or fewer while the rows whose results are being written fill the rest.
func (c *Claimer) free() int {
	return min(cap(c.slots)-len(c.slots), cap(c.places)-len(c.places))
}

// share returns how many rows the next claim may take of the free slots,
// and what it must skip (skip.Tenant "" none): no tenant is handed more
// than Concurrency − Reserve rows at once. Reserve is below half the
// slots, so only one tenant can hold that many, the one holding the most:
// the claim skips it and may fill every free slot with the others' rows.
// Below the bound, a claim takes no more rows than that tenant may still
// hold, whoever they are for, and the loop claims again at once when it
// came back full.
//
// A tenant's scopes (a clinic's campaign beside its other clinics) get
// half the reserve: while all but at most Reserve/2 of the tenant's sends
// are one scope's and the tenant holds less than the bound plus that
// half, the claim skips that scope only, and takes no more of the
// tenant's other scopes' rows than they may still add (SkipCap; the other
// tenants' rows are not capped by it); so their rows find a slot while
// the big scope's sends are out, and the other tenants keep at least the
// other half. (Skipping the whole tenant, the other scopes' rows waited
// for the next wave of the big scope's sends: p99 60 ms beside its
// backlog against 14 ms idle, BenchmarkFairnessScopes on SQLite. Letting
// them fill every free slot, the tenant took the whole lane and the
// other tenants waited instead.) With a Reserve of 1 there is no half to
// give.
func (c *Claimer) share(free int) (int, skipping) {
	if c.Reserve <= 0 {
		return free, skipping{}
	}
	top, n, scope, m := c.held.most()
	if bound := c.Concurrency - c.Reserve; n < bound {
		return min(free, bound-n), skipping{}
	}
	if others := c.othersRoom(n, m); others > 0 {
		return free, skipping{Tenant: top, Scope: &scope, Cap: others}
	}
	return free, skipping{Tenant: top}
}

// othersRoom is how many more sends a tenant holding n, at or past the
// bound (Concurrency − Reserve), may start in scopes other than its
// fullest, which holds m: while the fullest holds all but at most half
// the reserve of them, up to the bound plus that half; else none (share,
// and fits for an offer beside a claim under way).
func (c *Claimer) othersRoom(n, m int) int {
	if m >= n-c.Reserve/2 {
		return max(0, c.othersLimit()-n)
	}
	return 0
}

// othersLimit is the most sends a tenant may hold with its scopes other
// than its fullest: the bound (Concurrency − Reserve) plus half the
// reserve.
func (c *Claimer) othersLimit() int {
	return c.Concurrency - c.Reserve + c.Reserve/2
}

// skipping is what a claim leaves (store.OutboxClaimParams.Skip,
// SkipScope and SkipCap).
type skipping struct {
	Tenant string
	Scope  *string // nil: all of Tenant's rows
	Cap    int     // with Scope, how many of Tenant's other rows it may take
}

func (c *Claimer) process(ctx context.Context, row store.Claimed) {
	// The send slot is given back when the provider call returns, or at
	// the end for a row that made none; its place once it is settled.
	callEnded := sync.OnceFunc(func() {
		c.held.called(row)
		<-c.slots
		c.signalFreed()
	})
	defer func() {
		callEnded()
		c.held.remove(row)
		<-c.places
		c.signalFreed()
	}()
	ctx = sender.WithCallEnded(ctx, callEnded)
	// The sender's result write settles the row too, fenced by this claim.
	job := row.Job
	fence := row.Fence
	job.Outbox = &fence
	// A job whose notification the claim found cancelled passes the gate:
	// the sender ends it before any rule (heraldtype.Known.Cancelled).
	if cancelled := job.Known != nil && job.Known.Cancelled; c.Gate != nil && !cancelled {
		if res, decided := c.Gate(ctx, job); decided {
			c.settle(ctx, row, res)
			return
		}
	}
	res := c.Sender.Send(ctx, job)
	c.settle(ctx, row, res)
}

func (c *Claimer) signalFreed() {
	select {
	case c.freed <- struct{}{}:
	default:
	}
}

// settle records the sender's verdict on the outbox row, fenced.
func (c *Claimer) settle(ctx context.Context, row store.Claimed, res sender.Result) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.SettleTimeout)
	defer cancel()
	var (
		ok     bool
		err    error
		result string
	)
	switch {
	case res.OutboxSettled:
		result, ok = ResultDone, true
		if res.Verdict == sender.Retry {
			result = ResultRetry
		}
	case res.Verdict == sender.Done || res.Verdict == sender.Park:
		result = ResultDone
		ok, err = c.Store.OutboxComplete(wctx, row.Fence, heraldtype.OutboxDone, res.Reason)
	case res.Verdict == sender.Retry:
		result = ResultRetry
		ok, err = c.Store.OutboxRetry(wctx, store.OutboxRetryParams{Fence: row.Fence, Delay: res.Delay, Reason: res.Reason})
	default: // Backoff
		if ctx.Err() != nil && errors.Is(res.Err, ctx.Err()) {
			// Shutting down before the claim: give the row back at once.
			result = ResultReleased
			ok, err = c.Store.OutboxRetry(wctx, store.OutboxRetryParams{Fence: row.Fence, Reason: "SHUTDOWN"})
			break
		}
		result, ok, err = c.settler.backOff(wctx, row, res.Reason, res.Err)
	}
	c.settler.report(ctx, row, result, ok, err)
}

// heartbeat extends the leases of the rows this claimer holds, every
// Heartbeat until ctx ends, in one fenced write: a send that outlasts
// Lease (slow store retries, a long provider call, record retries) keeps
// its row, while the rows of a claimer that died or froze are offered
// again once their lease runs out. A row that is no longer held by its
// fence (settled meanwhile, or lost to the reclaim sweep) is left alone.
// On the normal path a send takes milliseconds and is settled long before
// the first beat: an idle beat writes nothing.
func (c *Claimer) heartbeat(ctx context.Context) {
	tick := time.NewTicker(c.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fences := c.held.list()
		if len(fences) == 0 {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, c.Heartbeat)
		n, err := c.Store.OutboxExtend(wctx, fences, c.Lease)
		cancel()
		if err != nil {
			// The next beat tries again; the lease has two more beats to go.
			c.Logger.LogAttrs(ctx, slog.LevelWarn, "dispatch: could not extend leases",
				slog.String("lane", string(c.Lane)), slog.Int("rows", len(fences)), slog.Any("error", err))
			continue
		}
		if n < len(fences) {
			c.Logger.LogAttrs(ctx, slog.LevelDebug, "dispatch: some leases no longer held",
				slog.String("lane", string(c.Lane)), slog.Int("rows", len(fences)), slog.Int("extended", n))
		}
	}
}
