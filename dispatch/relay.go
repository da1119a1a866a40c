package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// ErrConnectionLost is a publish whose broker connection broke before its
// confirm came. The message may or may not be in the queue; the relay offers
// the row again at once (not counted as a failed attempt) once the publisher
// is connected again, and the deliveries claim stops a second send.
var ErrConnectionLost = errors.New("dispatch: broker connection lost before the confirm")

// Queue is which of a lane's two broker queues a message goes to.
type Queue uint8

const (
	// LaneQueue is the lane's queue: every row of a tenant with a backlog,
	// and every row when the relay has no express queue.
	LaneQueue Queue = iota
	// ExpressQueue is the lane's express queue: the rows of tenants'
	// scopes without a backlog (RelayConfig.Express). The consumer keeps some of
	// its slots for it, so these do not wait behind the lane queue's
	// ready messages.
	ExpressQueue
)

// Publisher puts jobs on a broker (the rabbitmq transport implements it).
type Publisher interface {
	// Ready blocks until the publisher is connected, or ctx is done.
	Ready(ctx context.Context) error
	// Publish sends every job to one queue of a lane as a persistent
	// message whose message id is the job's MessageID, without waiting for
	// confirms. Each job comes with the relay's claim of its row
	// (Job.Outbox), whose token the message carries (the publication a
	// consumer may put back into the outbox for a long deferral:
	// store.Deferrals).
	Publish(ctx context.Context, lane heraldtype.Lane, q Queue, jobs []heraldtype.Job) Confirms
}

// Confirms are a published batch's outcomes.
type Confirms interface {
	// Wait returns, per job, nil once the broker confirmed it, or why not
	// (nacked, returned as unroutable, no confirm within the publisher's
	// timeout, connection lost). It returns within the confirm timeout.
	Wait() []error
}

// RelayHooks are test seams. Each may be nil.
type RelayHooks struct {
	// BeforeMark runs after a batch's confirms arrived, with the rows the
	// broker confirmed, before they are marked PUBLISHED. Returning false
	// skips the marking, exactly as if the process died at that point.
	BeforeMark func(rows []store.Claimed) bool
	// AfterSettle runs after a batch was settled.
	AfterSettle func(published, retried int)
}

// RelayConfig configures one lane's relay.
type RelayConfig struct {
	Lane  heraldtype.Lane
	Store store.Outbox
	// Wake carries "rows became due" signals for this lane.
	Wake      <-chan struct{}
	Publisher Publisher
	// Owner names this process in claims.
	Owner string
	// BatchSize is the rows claimed and published at once. Defaults to 500.
	BatchSize int
	// InFlight is the batches awaiting confirms at once; the next claim
	// overlaps with the wait. Defaults to 4.
	InFlight int
	// Claimers is the claim-and-publish loops of this lane. Defaults to 1.
	Claimers int
	// Lease must outlast a publish and its confirm timeout.
	Lease time.Duration
	// PollInterval is how often an idle relay looks for due rows unbidden.
	PollInterval time.Duration
	// Cooldown is the least time from the start of a claim that took
	// CoolAfter rows or more but came back short of its limit to the start
	// of the loop's next, as ClaimerConfig.Cooldown: under a steady stream
	// the relay publishes fewer, larger batches. Zero (the default) claims
	// on each wake-up.
	Cooldown time.Duration
	// MaxAttempts is the failed publish attempts after which a row is FAILED.
	MaxAttempts int
	Logger      *slog.Logger
	Alerts      alert.Sink
	Metrics     *metrics.Metrics
	Hooks       RelayHooks
	// SettleTimeout bounds the fenced writes after a batch. Defaults to 30 seconds.
	SettleTimeout time.Duration
	// Window, with Backlog, is the most jobs the relay lets wait ready in
	// the lane's queue (a message may carry several, a bundle): it claims
	// only Window less what waits there, and claims nothing while the
	// queue holds Window or more (looking again every WindowPoll). The
	// rest of a backlog stays in the outbox, where each claim shares the
	// lane between tenants (store.OutboxClaim): a broker queue is one FIFO,
	// so a tenant's row published behind another tenant's 20,000 waits for
	// all of them. 0 publishes without a window.
	// The window is kept as well as the depth is known: a quorum queue
	// counts a message a moment after confirming it, so on a loaded broker
	// the queue may briefly hold more (the rabbitmq tests allow twice).
	Window int
	// Backlog reads how many jobs wait ready in the lane's queue. An
	// error is logged and that claim goes without the window: a relay that
	// cannot read the depth publishes rather than stops.
	Backlog func(ctx context.Context) (int, error)
	// WindowPoll is how often a relay whose window is full reads the depth
	// again. Defaults to 10ms.
	WindowPoll time.Duration
	// Express sends the rows of tenants' scopes without a backlog to the
	// lane's express queue, the others' to the lane's queue (see "Tenants
	// share a lane" below). Off, every row goes to the lane's queue.
	Express bool
	// ExpressHold is how long a tenant's scope keeps its backlog mark
	// after the last full claim that marked it, or that gave it a row
	// while it was marked and no tenant two ("Tenants share a lane").
	// Defaults to DefaultExpressHold.
	ExpressHold time.Duration
	// Gate, when set, looks at each claimed job before it is published:
	// the dispatcher's own layer of the send policy, as the db claimers'
	// ClaimerConfig.Gate (quiet hours' early stop). The claim then reads
	// each job's recipient profile for it (heraldtype.Known). A ruling
	// that defers puts the row back to PENDING, due after Defer, with the
	// ruling's reason (fenced, not a failed attempt): nothing is
	// published, and the row waits in the outbox as with db. Any other
	// ruling is the sender's to make, at send time: the job is published.
	Gate func(ctx context.Context, job heraldtype.Job) sender.Ruling
}

// Relay moves one lane's outbox rows to the broker (seed 000 §2-2, §2-3):
//
//  1. claim up to BatchSize due rows with a lease and a fresh fencing token
//     (PENDING → PUBLISHING), one autocommitted statement: no transaction is
//     open while it publishes;
//  2. publish each as a persistent message with the row's message id;
//  3. wait for the publisher confirms (the next claim and publish go on
//     meanwhile, up to InFlight batches);
//  4. only then mark the confirmed rows PUBLISHED, fenced, in one write.
//
// A row the broker nacked or returned, or whose confirm timed out, goes back
// to PENDING with the dispatcher's backoff; a row whose connection broke goes
// back at once. A relay that dies between 3 and 4 leaves PUBLISHING rows:
// their lease runs out, the sweep returns them to PENDING and they are
// published again with the same message id, and the consumer's claim acks
// the second copy without a provider call. Two relays (or two processes)
// take disjoint rows: the claim skips locked rows and fences every write.
//
// # Held claims
//
// A store that can hold a claim open (store.OutboxHolder: PostgreSQL) saves
// steps 1 and 4 a row version each: the claim writes its rows PUBLISHED at
// once in a transaction it keeps open through the publish and the
// confirms, and the settling commits it, leaving the rows not confirmed
// PUBLISHING (then retried or failed, fenced, as above) and those the gate
// deferred PENDING. Until the commit every other transaction sees the rows
// PENDING with their old token; a relay that dies, or whose commit fails,
// leaves them PENDING and due at once, and they are published again as
// after a lapsed lease. Each claim starts each tenant's scope past the
// rows this relay holds in it (store.HeldPast: passing them one by one
// cost what the second row version had cost), and at least every
// HoldRecheck it claims without that, for a row that fell due behind them.
//
// # Deferred rows stay in the outbox
//
// With a Gate (quiet hours), a claimed row the gate defers is not
// published: it goes back to PENDING, due at the end of the deferral, and
// waits there as with the db transport, unseen by every claim until then
// (the claim walks outbox_fair only up to now, and a deferral past
// store.DeferHorizon leaves outbox_fair until shortly before its time). The seed puts this layer
// here (seed 000 §2-2: the relay stops publishing marketing at 20:40 and
// defers it to 08:00), so the night's backlog makes no broker copy at all.
// What this layer cannot see, a message already in the broker when the
// window closes (a campaign's queue still draining at 20:50) or a profile
// changed after the publication, the consumer's sender defers at send
// time; the consumer then puts the row back into the outbox itself
// (store.Deferrals, package broker/rabbitmq), so no copy cycles through
// the retry queues all night either.
//
// # Rows handed over at intake
//
// As a Claimer takes rows from intake (the Claimer's "Rows handed over at
// intake"), so does a relay: intake asks for a place (Offer), the create
// writes the row PUBLISHING under the relay's owner and lease with token
// 1 (store.CreateClaim.Publishing), and the row is queued for the
// relay's hand loop (Take), which publishes what is queued in batches of
// at most BatchSize, cooling down as the claim loops do, and hands each
// batch to the same confirm wait and settling as a claimed batch. The row
// is spared the claim's statement, its row version and the NOTIFY that
// woke the claim loop for it. A relay that dies before the mark leaves
// the row PUBLISHING, and its lease brings it back as a claimed row's.
//
// An offer is refused, and the row waits in the outbox for a claim:
// before the first claim has looked, and while a claim loop's last claim
// came back full (older rows are due) or failed (what is due is
// unknown); when the window (its depth as last read, with every message
// published or handed over and not yet confirmed) has no room for one
// more; while a publish found the broker connection lost and none has
// been confirmed since (a claim publishes the rows that went back once
// the publisher is ready again); and when BatchSize rows are already
// queued. A handed row goes to the express queue unless its tenant's
// scope was marked by the time it is published (publish): a backlog mark
// routes its scope's rows, it does not refuse their offers. The turns
// between tenants need none: a backlog in the outbox is a claim come back
// full (or one past a full window that left the marked rows), which
// refuses every offer until the claims have taken it; rows that fall due
// by the clock (a retry, a deferral's end) are found by the next claim,
// and a place given before it may go first. One offer passes a backlog
// and a full window: with Express, a tenant's scope without a mark while
// another has one, as long as the window and ExpressPastWindow more hold
// room for it (offers alone are held to that; the claims past the window
// below take up to ExpressPastWindow a wake-up) and no claim loop's last
// claim failed or has yet to look. Its row goes to the express queue, as
// a claim past the full window would send it, but without the wake-up and
// that claim: in issue 12's fairness run a small tenant's rows otherwise
// waited for them behind the big tenant's backlog (docs/benchmarks.md). It
// may pass rows of unmarked scopes that wait in the outbox, its own
// older ones too (a scope whose mark lapsed while the window stayed full
// is unmarked until a claim marks it again), as rows claimed together may
// go in any order; and a scope marked between its offer and the publish
// has that row sent to the lane queue, past the window by at most
// ExpressPastWindow. (Refusing a marked tenant's
// offers, as the first version did, fed itself: each refused row waited
// in the outbox, the claims that took it came back full and renewed the
// mark, and in one run of 20,000 from one tenant 44% of the offers were
// refused for it and 38% of the rows handed over.) Shutdown refuses new
// offers after the claim loops stop, waits for the offers made, and
// publishes what was handed over before the batches' settling ends.
//
// # Tenants share a lane
//
// The claim shares the lane's rows between its tenants in turns, and the
// window keeps a backlog in the outbox, where the turns apply. A relay's
// published rows are no longer in flight, so when a slow consumer frees
// one slot of the window at a time and each claim takes one row, every
// tenant is at the same turn: each loop passes the tenant it served last
// (OutboxClaimParams.After) and the ties go round the tenants, so a small
// tenant's row is claimed within one round of the tenants, not after the
// big tenant's whole backlog ("Tenants take turns" in the package doc).
// What the window lets into the broker still waits in one FIFO: a small
// tenant's row published behind a big tenant's Window ready messages
// waits for all of them (at 64 slots and a 100 ms provider, 100 ms).
// With Express, the relay sends a tenant's rows to the lane's express
// queue unless their scope of the tenant has a backlog (below), and the
// consumer keeps the lane's reserve of its slots for that queue
// (broker/rabbitmq).
//
// A tenant has a backlog when a full claim (as many rows as it asked for,
// so more may be due) gave it the most rows of any tenant, at least two:
// the turns gave every other tenant all its due rows first. Inside it,
// the turns go round its scopes the same way, so the backlog is in the
// scopes given the most of its rows, and those are marked: another scope
// of the tenant (a clinic's reminder beside another clinic's campaign)
// still goes to the express queue. The scopes given one row fewer than
// the most, at least two, are marked too: the turns split a backlog
// spread over a tenant's scopes evenly, give or take a row, and it marks
// them all. (Marks by tenant sent that clinic's reminder
// behind the window: 530 ms p99 in issue 12's scoped fairness run on
// RabbitMQ, 12–16 ms with marks by scope.) A scope keeps the
// mark for ExpressHold after its last such claim, so the small claims a
// window lets through one by one do not send its rows to the express
// queue between two full ones. A slow consumer may let only such claims
// through, one row each, for longer than ExpressHold, so a full claim
// that gave no tenant two rows renews the mark of each marked scope it
// gave a row, and marks nobody: one row, the ties going round, shows no
// backlog, but a marked tenant given its turn again most likely still has
// one. Without the renewal the mark lapsed under the one-row claims: the
// big tenant's rows went to the express queue, and with no tenant marked
// a small tenant's wake-up took nothing past the window. Nor can a tenant
// never marked be marked by a claim of several rows while only one-row
// claims come (a relay started during a drain behind a full window): so
// two full one-row claims in a row that give the same tenant's scope its
// row mark that scope, the ties having gone round to it twice with nobody
// else's row due. (A backlog spread over a tenant's scopes, its one-row
// claims going round them, is marked only by a claim of several rows.) A
// marked scope whose last row such a claim took keeps its mark
// ExpressHold more, as after a full claim that took its last rows. A row's queue changes
// nothing else: the same message, the same consumer, the same sender; the
// window counts both queues.
//
// While the window is full the relay looks again every WindowPoll, and a
// row committed meanwhile would wait for that look. So on a wake-up (one
// that comes while the window is full, or one taken since the last claim
// before the window was found full: by the wait after a short claim, or by
// its cooldown), when the marks are all one tenant's, it claims up to
// ExpressPastWindow rows at once, leaving the marked scope's rows
// (OutboxClaimParams.Skip and SkipScope), or all the tenant's when several
// of its scopes are marked: the others' rows, which go to the express
// queue past the window. With two tenants marked or more it waits for the
// look: their rows would go to the lane queue, past the window.
type Relay struct {
	RelayConfig
	settler settler
	// backlogged is when each tenant's scope's backlog mark ends
	// (Express), under backlogMu: the claim loops share it.
	backlogMu  sync.Mutex
	backlogged map[scopeOf]time.Time
	// lastOne is the tenant's scope of the last full claim of one row (nil
	// when the last full claim was larger or a claim came back short),
	// under backlogMu.
	lastOne *scopeOf
	// now is the backlog marks' clock (time.Now; a test's seam).
	now func() time.Time
	// depthFailing: the last depth read failed (logged once per outage).
	depthFailing atomic.Bool
	// unconfirmed counts the messages published and not yet confirmed,
	// and the rows handed over and not yet published: the queue's depth
	// may not show them yet, so the window counts them.
	unconfirmed atomic.Int64
	// depth is the lane's queues' depth at the last read (room).
	depth atomic.Int64
	// disconnected: a publish found the broker connection lost, and no
	// publish has been confirmed since. No offers meanwhile.
	disconnected atomic.Bool

	// Rows handed over at intake (Offer), under handMu: handOpen while
	// Run relays; handFull counts the claim loops whose last claim came
	// back full (or that have not looked yet); handHeld counts the offers
	// not yet dropped and the rows queued in hands, which the hand loop
	// publishes.
	handMu   sync.Mutex
	handOpen bool
	handFull int
	// handBlind counts the claim loops whose last claim failed or that
	// have not looked yet (claimSeen).
	handBlind int
	handHeld  int
	hands     chan store.Claimed
	handing   sync.WaitGroup // offers made and not yet taken or dropped

	// Held claims (store.OutboxHolder), under heldMu: the rows of each
	// tenant's scope held in claims not yet settled, and when a claim last
	// passed them (HoldRecheck).
	heldMu      sync.Mutex
	heldRows    map[scopeOf]*heldScope
	heldRecheck time.Time
}

// NewRelay returns a relay.
func NewRelay(cfg RelayConfig) *Relay {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Alerts == nil {
		cfg.Alerts = alert.Log{Logger: cfg.Logger}
	}
	if cfg.BatchSize < 1 {
		cfg.BatchSize = 500
	}
	if cfg.InFlight < 1 {
		cfg.InFlight = 4
	}
	if cfg.Claimers < 1 {
		cfg.Claimers = 1
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 30 * time.Second
	}
	if cfg.MaxAttempts < 1 {
		cfg.MaxAttempts = 20
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.WindowPoll <= 0 {
		cfg.WindowPoll = 10 * time.Millisecond
	}
	if cfg.ExpressHold <= 0 {
		cfg.ExpressHold = DefaultExpressHold
	}
	return &Relay{RelayConfig: cfg, settler: settler{who: "relay", lane: cfg.Lane, store: cfg.Store,
		maxAttempts: cfg.MaxAttempts, logger: cfg.Logger, alerts: cfg.Alerts, metrics: cfg.Metrics},
		backlogged: map[scopeOf]time.Time{}, now: time.Now}
}

// DefaultExpressHold is RelayConfig.ExpressHold's default.
const DefaultExpressHold = time.Second

// ExpressPastWindow is the most rows a claim takes past a full window, on
// a wake-up, leaving the one backlogged tenant's marked rows ("Tenants
// share a lane").
const ExpressPastWindow = 8

// onlyBacklogged is what a claim past a full window leaves
// (OutboxClaimParams.Skip and SkipScope): when the backlog marks at now
// are all one tenant's, that tenant, and the scope when it is one; else
// "" (no such claim: the other marked tenants' rows would go to the lane
// queue, past the window).
func (r *Relay) onlyBacklogged(now time.Time) (string, *string) {
	r.backlogMu.Lock()
	defer r.backlogMu.Unlock()
	var only *scopeOf
	pairs := 0
	for g, until := range r.backlogged {
		if now.Before(until) {
			if only != nil && only.tenant != g.tenant {
				return "", nil
			}
			only = &g
			pairs++
		}
	}
	switch {
	case only == nil:
		return "", nil
	case pairs > 1:
		return only.tenant, nil
	}
	return only.tenant, &only.scope
}

// backlogs marks the tenants' scopes with a backlog from a claim of limit
// rows, or renews their marks ("Tenants share a lane"), and returns the
// scopes marked at now, whose rows go to the lane queue; nil without
// Express, when every row does.
func (r *Relay) backlogs(now time.Time, rows []store.Claimed, limit int) map[scopeOf]bool {
	if !r.Express {
		return nil
	}
	per, tenants := map[scopeOf]int{}, map[string]int{}
	most := 0
	for _, row := range rows {
		g := scopeOf{row.Job.Tenant, row.Job.Scope}
		per[g]++
		tenants[g.tenant]++
		most = max(most, tenants[g.tenant])
	}
	r.backlogMu.Lock()
	defer r.backlogMu.Unlock()
	var one *scopeOf
	switch {
	case len(rows) < limit:
	case most >= 2:
		// The tenants given the most rows have a backlog, and inside each
		// the scopes given the most of its rows (the turns gave its other
		// scopes all their due rows first), with those given at least two
		// and one fewer: the turns split a backlog spread over scopes
		// evenly, give or take a row.
		fullest := map[string]int{}
		for g, n := range per {
			if tenants[g.tenant] == most {
				fullest[g.tenant] = max(fullest[g.tenant], n)
			}
		}
		for g, n := range per {
			if m, ok := fullest[g.tenant]; ok && (n == m || n >= 2 && n >= m-1) {
				r.backlogged[g] = now.Add(r.ExpressHold)
			}
		}
	default:
		// A full claim that gave no tenant two rows (the window's one-row
		// top-ups) shows no backlog, but a scope marked already and given
		// its turn again most likely still has one: its mark is renewed.
		for g := range per {
			if until, ok := r.backlogged[g]; ok && now.Before(until) {
				r.backlogged[g] = now.Add(r.ExpressHold)
			}
		}
		// And a tenant's scope given two full one-row claims in a row, the
		// ties going round the tenants and their scopes, was the only one
		// with rows due both times: it is marked. Without this, one-row
		// claims alone (a relay started during a drain behind a full
		// window) never marked its backlog, and all of it went to the
		// express queue.
		if len(rows) == 1 {
			one = &scopeOf{rows[0].Job.Tenant, rows[0].Job.Scope}
			if r.lastOne != nil && *one == *r.lastOne {
				r.backlogged[*one] = now.Add(r.ExpressHold)
			}
		}
	}
	r.lastOne = one
	return r.markedLocked(now)
}

// besideBacklog reports whether some tenant's scope has a backlog mark now
// and tenant's scope has none (Express): its rows go to the express
// queue, past the marked scopes' in the lane queue.
func (r *Relay) besideBacklog(tenant, scope string) bool {
	r.backlogMu.Lock()
	defer r.backlogMu.Unlock()
	now := r.now()
	if now.Before(r.backlogged[scopeOf{tenant, scope}]) {
		return false
	}
	for _, until := range r.backlogged {
		if now.Before(until) {
			return true
		}
	}
	return false
}

// markedNow is the scopes marked now, whose rows go to the lane queue;
// nil without Express, when every row does.
func (r *Relay) markedNow() map[scopeOf]bool {
	if !r.Express {
		return nil
	}
	r.backlogMu.Lock()
	defer r.backlogMu.Unlock()
	return r.markedLocked(r.now())
}

// markedLocked is markedNow at now, under backlogMu; it forgets the marks
// that ended.
func (r *Relay) markedLocked(now time.Time) map[scopeOf]bool {
	marked := make(map[scopeOf]bool, len(r.backlogged))
	for g, until := range r.backlogged {
		if now.Before(until) {
			marked[g] = true
		} else {
			delete(r.backlogged, g)
		}
	}
	return marked
}

// claimedNone records a claim that found no row due: a tenant's next
// one-row claim is not "in a row" with its last (backlogs), since nothing
// of its was due between them.
func (r *Relay) claimedNone() {
	r.backlogMu.Lock()
	r.lastOne = nil
	r.backlogMu.Unlock()
}

// inflight is one claimed batch: the rows published, awaiting their
// confirms (nil when none was), and the rows the gate held back.
type inflight struct {
	// hold is the batch's held claim (store.OutboxHolder), nil when its
	// rows were claimed PUBLISHING or handed over at intake.
	hold     store.Hold
	rows     []store.Claimed
	confirms Confirms
	held     []heldRow
}

// heldRow is a claimed row the gate deferred.
type heldRow struct {
	row    store.Claimed
	ruling sender.Ruling
}

// Run relays until ctx is cancelled. It then stops claiming, waits for the
// confirms of the batches already published and settles them (a confirmed
// row is still marked PUBLISHED during shutdown), and returns.
func (r *Relay) Run(ctx context.Context) {
	// Up to InFlight batches wait for their confirms at once, each settled
	// by its own goroutine: the marks of different batches touch disjoint
	// rows and commit side by side.
	batches := make(chan inflight)
	var wg sync.WaitGroup
	for range r.InFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				r.settle(ctx, b)
			}
		}()
	}
	defer func() { close(batches); wg.Wait() }()

	// Rows handed over at intake are published by a loop of their own;
	// at shutdown, after the claim loops, no more are offered, and those
	// handed over are published before the batches close.
	r.openHands()
	handed := make(chan struct{})
	go func() { defer close(handed); r.handLoop(ctx, batches) }()
	var loops sync.WaitGroup
	for range r.Claimers {
		loops.Add(1)
		go func() { defer loops.Done(); r.claimLoop(ctx, batches) }()
	}
	loops.Wait()
	r.closeHands()
	<-handed
}

// claimLoop claims and publishes batches until ctx is cancelled. Several
// run side by side: the claim skips rows another holds, so each takes
// disjoint rows, and one loop's claim overlaps another's publish.
func (r *Relay) claimLoop(ctx context.Context, batches chan<- inflight) {
	poll := time.NewTicker(r.PollInterval)
	defer poll.Stop()
	again := time.NewTimer(ClaimAgainAfterWake)
	again.Stop()
	defer again.Stop()
	var pause claimPause
	cool := cooler{every: r.Cooldown}
	// woke: a wake-up (or its second look) came since the last claim, so a
	// row may have committed that no claim has seen.
	woke := false
	var served round // whom the last claims served last (lastServed)
	full := true     // the last claim came back full, or none has looked (Offer)
	seen := false    // the last claim saw what is due: it did not fail (Offer)
	// A batch's publish and its hand-over to a settling go on beside the
	// next claim: the claim is the loop's longest step (20 of 31 ms a batch
	// of 500 in the relay's drain, docs/benchmarks.md), and while it ran
	// the publish and the wait for a free settling had been waiting for it.
	// One batch at a time is sent (sending), so batches are published in
	// the order they were claimed, and the loop waits for it before it
	// returns, so Run closes batches after the last.
	sending := make(chan struct{}, 1)
	var sent sync.WaitGroup
	defer sent.Wait()
	for ctx.Err() == nil {
		if err := r.Publisher.Ready(ctx); err != nil {
			return
		}
		woken, ok := cool.wait(ctx, r.Wake, nil)
		if !ok {
			return
		}
		if woken {
			woke = true
			again.Reset(ClaimAgainAfterWake)
		}
		var skip string       // a claim past a full window leaves this tenant's rows
		var skipScope *string // or only this scope's of them
		limit, ok := r.room(ctx)
		if !ok {
			// A row just committed may be of a scope without a backlog:
			// past the full window, a small claim that leaves the one
			// backlogged tenant's marked rows takes it to the express queue now,
			// not at the next look. The wake-up for it may have come
			// already (the one that ended the last wait, or one the
			// cooldown took) or come while the window is full.
			if r.Express && woke {
				skip, skipScope = r.onlyBacklogged(r.now())
			}
			if skip == "" {
				var wake <-chan struct{}
				if r.Express {
					wake = r.Wake
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(r.WindowPoll):
					continue
				case <-wake:
					if skip, skipScope = r.onlyBacklogged(r.now()); skip == "" {
						continue
					}
				}
			}
			limit = ExpressPastWindow
		}
		woke = false
		began := time.Now()
		rows, hold, err := r.claim(ctx, store.OutboxClaimParams{
			Lane: r.Lane, Owner: r.Owner, Limit: limit, Lease: r.Lease, Publishing: true, Profiles: r.Gate != nil, Skip: skip,
			SkipScope: skipScope, After: served.after, Scopes: served.scopes,
		})
		if err != nil {
			// What is due is unknown: offers wait, as behind a full
			// claim, so rows handed over do not overtake rows that only a
			// claim can take (a failed publish's, a lapsed lease's).
			full = r.claimLooked(full, true)
			seen = r.claimSeen(seen, false)
			if !pause.after(ctx, r.Logger, "relay", r.Lane, err) {
				return
			}
			continue
		}
		pause.reset()
		served.served(rows)
		// A claim past a full window that left the marked rows left them
		// in the outbox: a backlog, as a full claim's.
		full = r.claimLooked(full, len(rows) >= limit || skip != "")
		seen = r.claimSeen(seen, true)
		if len(rows) == 0 {
			r.claimedNone()
		} else {
			marked := r.backlogs(r.now(), rows, limit)
			b := r.gate(ctx, rows)
			b.hold = hold
			r.unconfirmed.Add(int64(len(b.rows)))
			sending <- struct{}{}
			sent.Go(func() {
				defer func() { <-sending }()
				b.rows, b.confirms = r.publish(ctx, b.rows, marked)
				batches <- b
			})
		}
		if len(rows) == limit || skip != "" {
			continue // more may be waiting; or the window, full, is to be looked at again
		}
		cool.claimed(began, len(rows), limit)
		select {
		case <-ctx.Done():
			return
		case <-r.Wake:
			woke = true
			again.Reset(ClaimAgainAfterWake)
		case <-again.C:
			woke = true
		case <-poll.C:
		}
	}
}

// publish publishes rows, the marked scopes' (backlogs) to the lane
// queue and the others' to the express queue (all to the lane queue when
// marked is nil), and returns them in the order of their confirms, the
// lane queue's first, with the confirms (nil when there were no rows).
// The caller has counted them unconfirmed.
func (r *Relay) publish(ctx context.Context, rows []store.Claimed, marked map[scopeOf]bool) ([]store.Claimed, Confirms) {
	if len(rows) == 0 {
		return rows, nil
	}
	var lane, fast []store.Claimed
	for _, row := range rows {
		if marked == nil || marked[scopeOf{row.Job.Tenant, row.Job.Scope}] {
			lane = append(lane, row)
		} else {
			fast = append(fast, row)
		}
	}
	// The publish is not cancelled by shutdown once the rows are claimed:
	// finishing it costs at most the confirm timeout and spares the rows a
	// wait for their lease.
	var all joinedConfirms
	for _, part := range []struct {
		q    Queue
		rows []store.Claimed
	}{{LaneQueue, lane}, {ExpressQueue, fast}} {
		if len(part.rows) > 0 {
			all = append(all, r.Publisher.Publish(context.WithoutCancel(ctx), r.Lane, part.q, jobsOf(part.rows)))
		}
	}
	if len(all) == 1 {
		return rows, all[0] // one queue: rows keep their order
	}
	return append(lane, fast...), all
}

// jobsOf is the jobs of claimed rows, each with its claim.
func jobsOf(rows []store.Claimed) []heraldtype.Job {
	jobs := make([]heraldtype.Job, len(rows))
	for i := range rows {
		jobs[i] = rows[i].Job
		jobs[i].Outbox = &rows[i].Fence
		jobs[i].OffChain = rows[i].Fence.OffChain
	}
	return jobs
}

// joinedConfirms are the confirms of one batch published to both queues,
// in the order they were published.
type joinedConfirms []Confirms

func (j joinedConfirms) Wait() []error {
	var errs []error
	for _, c := range j {
		errs = append(errs, c.Wait()...)
	}
	return errs
}

// room is how many rows the next claim may take: BatchSize, or less when
// the lane's queue already holds part of the Window; false when it holds
// all of it.
func (r *Relay) room(ctx context.Context) (int, bool) {
	if r.Window <= 0 || r.Backlog == nil {
		return r.BatchSize, true
	}
	depth, ok := r.readDepth(ctx)
	if !ok {
		return r.BatchSize, true
	}
	// A confirmed message is in the queue; one not yet confirmed may not
	// show in its depth, so it counts against the window too (a confirmed
	// one not yet settled counts twice for a moment: the window errs low).
	depth += int(r.unconfirmed.Load())
	if depth >= r.Window {
		return 0, false
	}
	return min(r.BatchSize, r.Window-depth), true
}

// readDepth reads the lane's queues' depth and keeps it for the offers
// (Offer); false when it cannot be read, which is logged once an outage
// and lets claims and offers go without the window (depthFailing).
func (r *Relay) readDepth(ctx context.Context) (int, bool) {
	depth, err := r.Backlog(ctx)
	if err != nil {
		if ctx.Err() == nil && !r.depthFailing.Swap(true) {
			r.Logger.LogAttrs(ctx, slog.LevelWarn, "relay: cannot read the queue's depth; publishing without the window",
				slog.String("lane", string(r.Lane)), slog.Any("error", err))
		}
		return 0, false
	}
	if r.depthFailing.Swap(false) {
		r.Logger.LogAttrs(ctx, slog.LevelInfo, "relay: the queue's depth reads again; publishing within the window",
			slog.String("lane", string(r.Lane)))
	}
	r.depth.Store(int64(depth))
	return depth, true
}

// gate splits claimed rows into those to publish and those the Gate
// defers.
func (r *Relay) gate(ctx context.Context, rows []store.Claimed) inflight {
	if r.Gate == nil {
		return inflight{rows: rows}
	}
	var b inflight
	for _, row := range rows {
		if v := r.Gate(ctx, row.Job); v.State == "" && v.Defer > 0 {
			b.held = append(b.held, heldRow{row: row, ruling: v})
			continue
		}
		b.rows = append(b.rows, row)
	}
	return b
}

// putBackAtOnce bounds the gate's deferral writes in flight per batch.
const putBackAtOnce = 64

// putBack returns the rows the gate held to PENDING, due after their
// deferral, fenced. The writes go side by side: both stores commit
// concurrent writes together (group commit), so a night's batch costs a
// few commits, not one per row.
func (r *Relay) putBack(ctx, wctx context.Context, held []heldRow) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, putBackAtOnce)
	for _, h := range held {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ok, err := r.Store.OutboxRetry(wctx, store.OutboxRetryParams{Fence: h.row.Fence, Delay: h.ruling.Defer, Reason: h.ruling.Reason})
			r.settler.report(ctx, h.row, ResultDeferred, ok, err)
		})
	}
	wg.Wait()
}

// settle puts back the rows the gate held, waits for a batch's confirms
// and writes the outcome, fenced.
func (r *Relay) settle(ctx context.Context, b inflight) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.SettleTimeout)
	defer cancel()
	if b.hold != nil {
		r.settleHeld(ctx, wctx, b)
		return
	}
	r.putBack(ctx, wctx, b.held)
	if b.confirms == nil {
		if h := r.Hooks.AfterSettle; h != nil {
			h(0, 0)
		}
		return
	}
	errs, confirmed, failed := r.confirmed(b)
	published := 0
	if len(confirmed) > 0 {
		if h := r.Hooks.BeforeMark; h != nil && !h(confirmed) {
			return
		}
		fences := make([]store.Fence, len(confirmed))
		for i, c := range confirmed {
			fences[i] = c.Fence
		}
		n, err := r.Store.OutboxMarkPublished(wctx, fences)
		switch {
		case err != nil:
			// The rows stay PUBLISHING until their lease runs out; then
			// they are published again and the second copy is acked
			// without a provider call.
			r.Logger.LogAttrs(ctx, slog.LevelWarn, "relay: could not mark rows published",
				slog.String("lane", string(r.Lane)), slog.Int("rows", len(fences)), slog.Any("error", err))
		case n < len(fences):
			r.Logger.LogAttrs(ctx, slog.LevelWarn, "relay: lease lost before marking; writes fenced off",
				slog.String("lane", string(r.Lane)), slog.Int("rows", len(fences)-n))
		}
		published = n
		r.Metrics.DispatchN(r.Lane, ResultPublished, n)
	}
	for _, i := range failed {
		r.retry(wctx, b.rows[i], errs[i])
	}
	if h := r.Hooks.AfterSettle; h != nil {
		h(published, len(failed))
	}
}

// confirmed waits for a batch's confirms and splits its rows into the
// confirmed and the places of the others, with each row's outcome.
func (r *Relay) confirmed(b inflight) (errs []error, confirmed []store.Claimed, failed []int) {
	if b.confirms == nil {
		return nil, nil, nil
	}
	errs = b.confirms.Wait()
	confirmed = make([]store.Claimed, 0, len(b.rows))
	for i, err := range errs {
		if err == nil {
			confirmed = append(confirmed, b.rows[i])
		} else {
			failed = append(failed, i)
		}
	}
	// The confirmed are in the queue: the depth last read counts them
	// until the next read (an offer's window; Offer).
	r.depth.Add(int64(len(confirmed)))
	if len(confirmed) > 0 {
		r.disconnected.Store(false) // the broker confirms again: offers may resume
	}
	r.unconfirmed.Add(-int64(len(b.rows)))
	return errs, confirmed, failed
}

// settleHeld settles a batch of a held claim: its transaction commits with
// the confirmed rows PUBLISHED, those the gate held back PENDING until
// their deferral ends, and the others (not confirmed) PUBLISHING, which
// then take the fenced writes a batch claimed PUBLISHING takes (retry,
// fail).
func (r *Relay) settleHeld(ctx, wctx context.Context, b inflight) {
	errs, confirmed, failed := r.confirmed(b)
	defer r.heldDone(b)
	if h := r.Hooks.BeforeMark; h != nil && len(confirmed) > 0 && !h(confirmed) {
		b.hold.Rollback(wctx) // as if the process died: the rows are PENDING again
		return
	}
	unpublished := make([]store.Fence, 0, len(failed))
	for _, i := range failed {
		unpublished = append(unpublished, b.rows[i].Fence)
	}
	putBack := make([]store.OutboxRetryParams, len(b.held))
	for i, h := range b.held {
		putBack[i] = store.OutboxRetryParams{Fence: h.row.Fence, Delay: h.ruling.Defer, Reason: h.ruling.Reason}
	}
	if err := b.hold.Commit(wctx, unpublished, putBack); err != nil {
		// The rows are PENDING again, or the commit took and those not
		// published wait for their lease; either way a row published is
		// published again, and the consumer's claim acks the second copy
		// without a call.
		r.Logger.LogAttrs(ctx, slog.LevelWarn, "relay: could not commit a held claim; its rows are published again",
			slog.String("lane", string(r.Lane)), slog.Int("rows", len(b.rows)+len(b.held)), slog.Any("error", err))
		if h := r.Hooks.AfterSettle; h != nil {
			h(0, 0)
		}
		return
	}
	r.Metrics.DispatchN(r.Lane, ResultPublished, len(confirmed))
	for _, h := range b.held {
		r.settler.report(ctx, h.row, ResultDeferred, true, nil)
	}
	for _, i := range failed {
		r.retry(wctx, b.rows[i], errs[i])
	}
	if h := r.Hooks.AfterSettle; h != nil {
		h(len(confirmed), len(failed))
	}
}

// retry returns a row whose publish was not confirmed to PENDING.
func (r *Relay) retry(ctx context.Context, row store.Claimed, cause error) {
	var (
		ok     bool
		err    error
		result string
	)
	if errors.Is(cause, ErrConnectionLost) {
		// Not the row's fault: offer it again as soon as the publisher is
		// connected again (Run waits for that before it claims). Until a
		// publish is confirmed again, intake hands nothing over.
		r.disconnected.Store(true)
		result = ResultRepublish
		ok, err = r.Store.OutboxRetry(ctx, store.OutboxRetryParams{Fence: row.Fence, Reason: "BROKER_DISCONNECTED"})
	} else {
		result, ok, err = r.settler.backOff(ctx, row, "PUBLISH_FAILED", cause)
	}
	r.settler.report(ctx, row, result, ok, err)
}

// claim claims the lane's next rows: held until their confirms when the
// store can hold a claim (store.OutboxHolder), each scope past the rows
// this relay already holds in it but at least once every HoldRecheck.
func (r *Relay) claim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, store.Hold, error) {
	holder, ok := r.Store.(store.OutboxHolder)
	if !ok {
		rows, err := r.Store.OutboxClaim(ctx, p)
		return rows, nil, err
	}
	rows, hold, err := holder.OutboxClaimHold(ctx, p, r.heldPast())
	if err == nil && len(rows) > 0 {
		r.heldAdd(rows)
	}
	return rows, hold, err
}

// HoldRecheck is how often at most a relay's held claims pass the rows
// it holds (store.OutboxHolder's HeldPast): a row that fell due behind
// them, whose claim would otherwise wait for the scope's held rows to
// settle (under a steady backlog, for the backlog's end), waits at most
// this long.
const HoldRecheck = time.Second

// heldScope is a tenant's scope's rows this relay holds in claims not yet
// settled: how many, and the last by due time and id.
type heldScope struct {
	n    int
	last store.HeldPast
}

// heldPast is the HeldPast of every scope with rows held, or nil for a
// claim that passes them (every HoldRecheck, or nothing held).
func (r *Relay) heldPast() []store.HeldPast {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	now := time.Now()
	if len(r.heldRows) == 0 || now.Sub(r.heldRecheck) >= HoldRecheck {
		r.heldRecheck = now
		return nil
	}
	past := make([]store.HeldPast, 0, len(r.heldRows))
	for _, h := range r.heldRows {
		past = append(past, h.last)
	}
	return past
}

// heldAdd counts a held claim's rows.
func (r *Relay) heldAdd(rows []store.Claimed) {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if r.heldRows == nil {
		r.heldRows = map[scopeOf]*heldScope{}
	}
	for _, row := range rows {
		k := scopeOf{row.Tenant, row.Scope}
		h := r.heldRows[k]
		if h == nil {
			h = &heldScope{last: store.HeldPast{Tenant: row.Tenant, Scope: row.Scope}}
			r.heldRows[k] = h
		}
		h.n++
		if at := row.AvailableAt; at.After(h.last.AvailableAt) || (at.Equal(h.last.AvailableAt) && row.Fence.ID > h.last.ID) {
			h.last.AvailableAt, h.last.ID = at, row.Fence.ID
		}
	}
}

// heldDone uncounts a settled held claim's rows.
func (r *Relay) heldDone(b inflight) {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	done := func(row store.Claimed) {
		k := scopeOf{row.Tenant, row.Scope}
		if h := r.heldRows[k]; h != nil {
			if h.n--; h.n <= 0 {
				delete(r.heldRows, k)
			}
		}
	}
	for _, row := range b.rows {
		done(row)
	}
	for _, h := range b.held {
		done(h.row)
	}
}
