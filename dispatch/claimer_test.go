package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

type bundle struct {
	store  store.Store
	clk    *clock.Fake
	sim    *sim.Sim
	reg    *provider.Registry
	cat    *catalog.Catalog
	alerts *alert.Recorder
	ctx    context.Context
}

func setup(t *testing.T) bundle {
	t.Helper()
	return setupOn(t, "sqlite")
}

// eachStore runs test on SQLite and on PostgreSQL.
func eachStore(t *testing.T, test func(t *testing.T, b bundle)) {
	t.Helper()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, setupOn(t, driver))
		})
	}
}

// setupOn is setup on the store driver named (sqlite, postgres).
func setupOn(t *testing.T, driver string) bundle {
	t.Helper()
	clk := clock.NewFake(epoch)
	var s store.Store
	var err error
	switch driver {
	case "sqlite":
		s, err = sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{Clock: clk})
	case "postgres":
		s, err = postgres.Open(context.Background(), testpg.Schema(t), postgres.Options{Clock: clk})
	default:
		t.Fatalf("no store driver %q", driver)
	}
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	tmpl := map[string]config.Template{"webhook": {Title: "t", Body: "b"}}
	cat, err := catalog.New([]config.Kind{
		{Name: "pay", Category: "transactional", Channels: []string{"webhook"}, Templates: tmpl},
		{Name: "promo", Category: "marketing", Channels: []string{"webhook"}, Templates: tmpl},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := bundle{store: s, clk: clk, sim: sim.New(sim.Config{}), reg: provider.NewRegistry(), cat: cat, alerts: &alert.Recorder{}, ctx: context.Background()}
	b.reg.Register(heraldtype.ChannelWebhook, "sim", b.sim)
	return b
}

func (b bundle) sender(hooks sender.Hooks) *sender.Sender {
	return b.senderOn(b.store, hooks)
}

// senderOn is the one sender on s. A failing store call is given up after
// 100 ms (5 s in production), so a test of failed attempts does not wait
// out the real retry budget on every attempt.
func (b bundle) senderOn(s sender.Store, hooks sender.Hooks) *sender.Sender {
	return sender.New(sender.Config{Store: s, Providers: b.reg, Catalog: b.cat, Clock: b.clk, Owner: "test", Hooks: hooks,
		Alerts: b.alerts, StoreRetry: 100 * time.Millisecond})
}

func (b bundle) claimer(lane heraldtype.Lane, out store.Outbox, snd dispatch.Sender, concurrency int) *dispatch.Claimer {
	return dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: lane, Store: out, Wake: b.store.Wakeups().C(lane), Sender: snd, Owner: "c",
		Concurrency: concurrency, Lease: time.Minute, PollInterval: 5 * time.Millisecond, MaxAttempts: 3, Alerts: b.alerts,
	})
}

func (b bundle) notify(t *testing.T, kind string, lane heraldtype.Lane) string {
	t.Helper()
	return b.notifyAs(t, "t1", kind, lane)
}

// notifyAs creates a notification of tenant's to r1 on the webhook.
func (b bundle) notifyAs(t *testing.T, tenant, kind string, lane heraldtype.Lane) string {
	t.Helper()
	return b.notifyIn(t, tenant, "", "r1", kind, lane)
}

// notifyIn is notifyAs for recipient in a scope of tenant.
func (b bundle) notifyIn(t *testing.T, tenant, scope, recipient, kind string, lane heraldtype.Lane) string {
	t.Helper()
	id := ids.New("ntf", b.clk.Now())
	_, err := b.store.NotificationCreate(b.ctx, store.NotificationCreateParams{
		Tenant: tenant, Scope: scope, ID: id, Recipient: recipient, EventID: id, Kind: kind, Lane: lane,
		Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// run starts c; stop stops it and waits.
func run(t *testing.T, c *dispatch.Claimer) (stop func()) {
	t.Helper()
	return testenv.Start(t, c.Run)
}

func (b bundle) entry(t *testing.T, id string) store.DeliveryView {
	t.Helper()
	return b.entryOf(t, "t1", id)
}

// entryOf reads the first planned send of tenant's notification id.
func (b bundle) entryOf(t *testing.T, tenant, id string) store.DeliveryView {
	t.Helper()
	v, err := b.store.NotificationGet(b.ctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	return v.Deliveries[0]
}

func TestClaimerSendsAndCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	log := &settleLog{Outbox: b.store}
	stop := run(t, b.claimer(heraldtype.LaneTransactional, log, b.sender(sender.Hooks{}), 4))
	defer stop()
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	testenv.WaitFor(t, "outbox DONE", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxDone })
	if d := b.entry(t, id).Delivery; d == nil || d.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("delivery %+v", d)
	}
	// The result write settled the row; the claimer wrote nothing more.
	if got := log.get(); len(got) != 0 {
		t.Fatalf("claimer made %d outbox writes after the sender's, want 0", len(got))
	}
}

// settleLog wraps the outbox to record whether each fenced write took.
type settleLog struct {
	store.Outbox
	mu      sync.Mutex
	results []bool
}

func (l *settleLog) record(ok bool) {
	l.mu.Lock()
	l.results = append(l.results, ok)
	l.mu.Unlock()
}

func (l *settleLog) OutboxComplete(ctx context.Context, f store.Fence, s heraldtype.OutboxState, r string) (bool, error) {
	ok, err := l.Outbox.OutboxComplete(ctx, f, s, r)
	l.record(ok)
	return ok, err
}

func (l *settleLog) OutboxRetry(ctx context.Context, p store.OutboxRetryParams) (bool, error) {
	ok, err := l.Outbox.OutboxRetry(ctx, p)
	l.record(ok)
	return ok, err
}

func (l *settleLog) get() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]bool(nil), l.results...)
}

func TestStalledClaimerIsFencedAndAnotherTakesTheRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stalled := make(chan struct{})
	resume := make(chan struct{})
	a := &settleLog{Outbox: b.store}
	stopA := run(t, b.claimer(heraldtype.LaneTransactional, a, b.sender(sender.Hooks{AfterPeek: func(ctx context.Context, _ heraldtype.Job) {
		close(stalled)
		select { // claimer A stalls past its lease here (a GC pause, a frozen VM)
		case <-resume:
		case <-ctx.Done(): // the test ended early
		}
	}}), 1))
	defer stopA()
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	testenv.Recv(t, stalled, "claimer A to take the row")

	b.clk.Advance(2 * time.Minute) // A's lease runs out
	if n, err := b.store.OutboxReclaimExpired(b.ctx); err != nil || n != 1 {
		t.Fatalf("reclaimed %d (%v)", n, err)
	}
	stopB := run(t, b.claimer(heraldtype.LaneTransactional, b.store, b.sender(sender.Hooks{}), 1))
	defer stopB()
	testenv.WaitFor(t, "claimer B to send and settle", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxDone })

	close(resume)
	testenv.WaitFor(t, "claimer A to try to settle", testenv.Patience, func() bool { return len(a.get()) == 1 })
	if got := a.get(); got[0] {
		t.Fatal("the stalled claimer's write took effect after its lease ran out")
	}
	if n := b.sim.CallCount(store.MessageID(id, heraldtype.ChannelWebhook)); n != 1 {
		t.Fatalf("provider called %d times, want 1", n)
	}
}

func TestDefiniteNonSendIsRetriedThroughTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	calls := 0
	b.sim.OnCall(func(context.Context, provider.Message) provider.Outcome {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return provider.NotSentOutcome("CONNECTION_REFUSED", 0)
		}
		return provider.Outcome{}
	})
	stop := run(t, b.claimer(heraldtype.LaneTransactional, b.store, b.sender(sender.Hooks{}), 2))
	defer stop()
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	testenv.WaitFor(t, "RETRY_WAIT", testenv.Patience, func() bool {
		e := b.entry(t, id)
		return e.Delivery != nil && e.Delivery.State == heraldtype.DeliveryRetryWait && e.OutboxState == heraldtype.OutboxPending
	})
	if e := b.entry(t, id); !e.AvailableAt.Equal(epoch.Add(time.Second)) {
		t.Fatalf("retry due at %s, want one second later", e.AvailableAt)
	}
	b.clk.Advance(time.Second)
	testenv.WaitFor(t, "second attempt", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxDone })
	if d := b.entry(t, id).Delivery; d.State != heraldtype.DeliveryProviderAccepted || d.Attempts != 2 {
		t.Fatalf("delivery %+v", d)
	}
}

// failingClaims fails every delivery claim before it reaches the database,
// as a refused connection would.
type failingClaims struct{ store.Store }

func (failingClaims) DeliveryClaim(context.Context, store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	return store.DeliveryClaimResult{}, errors.New("connection refused")
}

func TestTransientFailuresBackOffThenFail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stop := run(t, b.claimer(heraldtype.LaneTransactional, b.store, b.senderOn(failingClaims{b.store}, sender.Hooks{}), 1))
	defer stop()
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	for attempt := 1; attempt < 3; attempt++ {
		want := epoch.Add(dispatch.Backoff(1))
		if attempt == 2 {
			want = b.clk.Now().Add(dispatch.Backoff(2))
		}
		testenv.WaitFor(t, "backoff", testenv.Patience, func() bool {
			e := b.entry(t, id)
			return e.OutboxState == heraldtype.OutboxPending && e.AvailableAt.Equal(want)
		})
		b.clk.Advance(dispatch.Backoff(attempt))
	}
	testenv.WaitFor(t, "FAILED after 3 attempts", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxFailed })
	if e := b.entry(t, id); e.Delivery != nil {
		t.Fatalf("a delivery row was written: %+v", e.Delivery)
	}
	testenv.WaitFor(t, "the alert", testenv.Patience, func() bool { return len(b.alerts.Alerts()) > 0 })
	if got := b.alerts.Alerts(); len(got) != 1 || got[0].Kind != alert.OutboxFailed {
		t.Fatalf("alerts %+v", got)
	}
	if b.sim.Total() != 0 {
		t.Fatal("provider called")
	}
}

func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i, w := range want {
		if got := dispatch.Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestABlockedLaneDoesNotDelayAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	stuck := make(chan struct{})
	var once sync.Once
	b.sim.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
		if m.Kind == "promo" {
			once.Do(func() { close(stuck) })
			<-release // the marketing provider hangs
		}
		return provider.Outcome{}
	})
	snd := b.sender(sender.Hooks{})
	if err := b.store.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: "r1", Consent: map[heraldtype.Channel]bool{heraldtype.ChannelWebhook: true}}); err != nil {
		t.Fatal(err)
	}
	stopM := run(t, b.claimer(heraldtype.LaneMarketing, b.store, snd, 1))
	defer stopM()
	stopT := run(t, b.claimer(heraldtype.LaneTransactional, b.store, snd, 1))
	defer stopT()
	defer close(release) // runs first: unblock the campaign before stopping
	b.notify(t, "promo", heraldtype.LaneMarketing)
	b.notify(t, "promo", heraldtype.LaneMarketing)
	testenv.Recv(t, stuck, "the campaign's call to hang") // the marketing lane's only slot is now taken
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	testenv.WaitFor(t, "the payment to be sent past the stuck campaign", testenv.Patience, func() bool {
		return b.entry(t, id).OutboxState == heraldtype.OutboxDone
	})
}

func TestShutdownFinishesInFlightSends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inCall := make(chan struct{})
	finish := make(chan struct{})
	var finishOnce sync.Once
	letFinish := func() { finishOnce.Do(func() { close(finish) }) }
	t.Cleanup(letFinish)
	b.sim.OnCall(func(ctx context.Context, _ provider.Message) provider.Outcome {
		close(inCall)
		<-finish
		if ctx.Err() != nil {
			return provider.UnknownOutcome("CANCELLED")
		}
		return provider.Outcome{}
	})
	claims := &heldClaims{Outbox: b.store, holding: make(chan struct{}, 1), released: make(chan struct{}, 1)}
	c := b.claimer(heraldtype.LaneTransactional, claims, b.sender(sender.Hooks{}), 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	testenv.Recv(t, inCall, "the provider call")
	// A slot is still free, so the claim loop keeps asking for rows; the
	// next ask is held until the shutdown.
	claims.hold.Store(true)
	testenv.Recv(t, claims.holding, "the claim loop's next claim")
	cancel() // SIGTERM while the provider call is in flight
	testenv.Recv(t, claims.released, "the claim loop to see the shutdown")
	// The claim loop has stopped; a Run that did not wait for its sends
	// would return within microseconds. Give it far more than that.
	select {
	case <-done:
		t.Fatal("Run returned before the in-flight send finished")
	case <-time.After(200 * time.Millisecond):
	}
	letFinish()
	testenv.Recv(t, done, "Run to return after the send finished")
	e := b.entry(t, id)
	if e.OutboxState != heraldtype.OutboxDone || e.Delivery.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("after drain: outbox %s delivery %+v", e.OutboxState, e.Delivery)
	}
}

// heldClaims holds an outbox claim, once hold is set, until the claimer's
// context ends: it tells the test where the claim loop is when shutdown
// comes (holding) and when the loop has seen it (released).
type heldClaims struct {
	store.Outbox
	hold              atomic.Bool
	holding, released chan struct{}
}

func (h *heldClaims) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	if !h.hold.Load() {
		return h.Outbox.OutboxClaim(ctx, p)
	}
	h.holding <- struct{}{}
	<-ctx.Done()
	h.released <- struct{}{}
	return nil, ctx.Err()
}

// The fifth failed attempt on a row raises DISPATCH_RETRYING, once, with the
// row's message id and tenant (README: alerts carry the tenant).
func TestFifthFailedAttemptAlertsWithTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stop := run(t, dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Sender: b.senderOn(failingClaims{b.store}, sender.Hooks{}), Owner: "c", Concurrency: 1, Lease: time.Minute,
		PollInterval: 5 * time.Millisecond, MaxAttempts: 10, Alerts: b.alerts,
	}))
	defer stop()
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	for attempt := 1; attempt <= dispatch.AlertAfterAttempts; attempt++ {
		if got := b.alerts.Alerts(); len(got) != 0 {
			t.Fatalf("alerts before attempt %d: %+v", attempt, got)
		}
		want := b.clk.Now().Add(dispatch.Backoff(attempt))
		testenv.WaitFor(t, fmt.Sprintf("attempt %d to back off", attempt), testenv.Patience, func() bool {
			e := b.entry(t, id)
			return e.OutboxState == heraldtype.OutboxPending && e.AvailableAt.Equal(want)
		})
		b.clk.Advance(dispatch.Backoff(attempt))
	}
	testenv.WaitFor(t, "the alert", testenv.Patience, func() bool { return len(b.alerts.Alerts()) > 0 })
	want := alert.Alert{Kind: alert.DispatchSlow, MessageID: store.MessageID(id, heraldtype.ChannelWebhook), Tenant: "t1",
		Reason: heraldtype.ReasonStoreUnavailable}
	if got := b.alerts.Alerts(); len(got) != 1 || got[0] != want {
		t.Fatalf("alerts %+v, want [%+v]", got, want)
	}
}

// claimLog wraps the outbox to record each claim: when it began, its
// limit and how many rows it took. after, when set before the claimer
// starts, runs after each claim's statement and before the claimer sees
// its rows.
type claimLog struct {
	store.Outbox
	mu     sync.Mutex
	claims []loggedClaim
	after  func(began time.Time)
}

type loggedClaim struct {
	began       time.Time
	limit, took int
}

func (c *claimLog) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	began := time.Now()
	rows, err := c.Outbox.OutboxClaim(ctx, p)
	if c.after != nil {
		c.after(began)
	}
	c.mu.Lock()
	c.claims = append(c.claims, loggedClaim{began: began, limit: p.Limit, took: len(rows)})
	c.mu.Unlock()
	return rows, err
}

func (c *claimLog) get() []loggedClaim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.claims)
}

// count is how many claims have returned.
func (c *claimLog) count() int { return len(c.get()) }

// limits are the claims' limits, in order.
func (c *claimLog) limits() []int {
	var out []int
	for _, cl := range c.get() {
		out = append(out, cl.limit)
	}
	return out
}

// TestAWokenClaimerLooksAgain: rows that commit just after the claim a
// wake-up caused, with no wake-up of their own (herald.Client throttles
// them), are taken by the claimer's second look, not at its next poll (an
// hour here). The row commits inside the woken claim, after its
// statement: committed by the test once that claim had returned, it missed
// the second look whenever the commit took longer than ClaimAgainAfterWake
// (a loaded machine, under -race).
func TestAWokenClaimerLooksAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := &claimLog{Outbox: b.store}
	var wokeAt atomic.Int64 // when the wake-up was sent, in Unix nanoseconds
	ready, committed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	out.after = func(began time.Time) {
		if w := wokeAt.Load(); w == 0 || began.UnixNano() <= w {
			return
		}
		once.Do(func() {
			select {
			case ready <- struct{}{}:
				select {
				case <-committed:
				case <-time.After(testenv.Patience):
				}
			case <-time.After(testenv.Patience):
			}
		})
	}
	wake := make(chan struct{}, 1)
	c := dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: out, Wake: wake, Sender: b.sender(sender.Hooks{}), Owner: "c",
		Concurrency: 2, Lease: time.Minute, PollInterval: time.Hour, MaxAttempts: 3, Alerts: b.alerts,
	})
	stop := run(t, c)
	defer stop()
	// The first claim, at the start, found the lane drained and looked
	// once more after ClaimAgainAfterWake; after that only a wake-up starts
	// a claim (or the poll, an hour away).
	testenv.WaitFor(t, "the first claim and its second look", testenv.Patience, func() bool { return out.count() == 2 })
	wokeAt.Store(time.Now().UnixNano())
	wake <- struct{}{}
	select {
	case <-ready:
	case <-time.After(testenv.Patience):
		t.Fatal("no claim began after the wake-up")
	}
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	close(committed)
	testenv.WaitFor(t, "the row taken by the second look", testenv.Patience, func() bool {
		return b.entry(t, id).OutboxState == heraldtype.OutboxDone
	})
}

// A tenant never fills the slots the lane reserves (Reserve): tenant A's
// sends hang at the provider, and A holds Concurrency − Reserve of them
// however many it has waiting; tenant B's row, posted after them, takes a
// kept slot at once and is sent while A's are still in flight. Without the
// reserve A held every slot and B waited for A's provider. The same holds
// inside a tenant for a scope that holds the tenant's share by itself:
// the tenant's other scope (B: tenant-a's scope y beside A: its scope x)
// takes a kept slot. Skipping the whole tenant, it waited for x's sends.
func TestATenantLeavesTheReservedSlotsToTheOthers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, tenantB, scopeA, scopeB string }{
		{"Tenants", "tenant-b", "", ""},
		{"ScopesOfATenant", "tenant-a", "x", "y"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			leavesTheReservedSlots(t, c.tenantB, c.scopeA, c.scopeB)
		})
	}
}

// reservingClaimer is a transactional lane's Claimer of 5 slots, 2 of them
// reserved: a tenant holds at most 3.
func reservingClaimer(b bundle) *dispatch.Claimer {
	return dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Sender: b.sender(sender.Hooks{}), Owner: "c", Concurrency: 5, Reserve: 2, Lease: time.Minute,
		PollInterval: 5 * time.Millisecond, MaxAttempts: 3, Alerts: b.alerts,
	})
}

// leavesTheReservedSlots is TestATenantLeavesTheReservedSlotsToTheOthers
// with A tenant-a's scope scopeA and B tenantB's scope scopeB.
func leavesTheReservedSlots(t *testing.T, tenantB, scopeA, scopeB string) {
	eachStore(t, func(t *testing.T, b bundle) {
		release := make(chan struct{})
		var callsA atomic.Int64
		b.sim.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
			if m.Recipient == "r-a" {
				callsA.Add(1)
				<-release
			}
			return provider.Outcome{}
		})
		state := func(tenant, id string) heraldtype.OutboxState { return b.entryOf(t, tenant, id).OutboxState }
		var idsA []string
		for range 10 {
			idsA = append(idsA, b.notifyIn(t, "tenant-a", scopeA, "r-a", "pay", heraldtype.LaneTransactional))
		}
		stop := run(t, reservingClaimer(b))
		defer stop()
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		testenv.WaitFor(t, "tenant A's first three sends to reach the provider", testenv.Patience, func() bool { return callsA.Load() >= 3 })
		idB := b.notifyIn(t, tenantB, scopeB, "r-b", "pay", heraldtype.LaneTransactional)
		testenv.WaitFor(t, "B's send to be done beside A's three", testenv.Patience, func() bool {
			return state(tenantB, idB) == heraldtype.OutboxDone
		})
		// B's claim and every claim after it skipped A: A holds three rows,
		// its other seven wait.
		claimed := 0
		for _, id := range idsA {
			switch s := state("tenant-a", id); s {
			case heraldtype.OutboxClaimed:
				claimed++
			case heraldtype.OutboxPending:
			default:
				t.Fatalf("A's %s is %s while A's provider hangs", id, s)
			}
		}
		if claimed != 3 || callsA.Load() != 3 {
			t.Fatalf("A holds %d rows and made %d calls, want 3 and 3 (5 slots, 2 reserved)", claimed, callsA.Load())
		}
		close(release)
		released = true
		testenv.WaitFor(t, "all of A's sends to be done", testenv.Patience, func() bool {
			for _, id := range idsA {
				if state("tenant-a", id) != heraldtype.OutboxDone {
					return false
				}
			}
			return true
		})
	})
}

// A tenant's other scopes take half the reserve while one scope holds
// the tenant's share, never all of it: with 5 slots, 2 kept, tenant A's
// scope x holds 3 sends that hang, its scope y takes one more slot (and
// hangs too), and then tenant B's row still finds the last slot free.
// Had y's rows been free to fill every kept slot, B would wait for A's
// provider.
func TestATenantsScopesLeaveTheOtherTenantsHalfTheReserve(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		release := make(chan struct{})
		var callsX, callsY atomic.Int64
		b.sim.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
			switch m.Recipient {
			case "r-x":
				callsX.Add(1)
				<-release
			case "r-y":
				callsY.Add(1)
				<-release
			}
			return provider.Outcome{}
		})
		for range 10 {
			b.notifyIn(t, "tenant-a", "x", "r-x", "pay", heraldtype.LaneTransactional)
		}
		stop := run(t, reservingClaimer(b))
		defer stop()
		defer close(release) // before the stop: the hanging sends end first
		testenv.WaitFor(t, "scope x's three sends to reach the provider", testenv.Patience, func() bool { return callsX.Load() >= 3 })
		for range 3 {
			b.notifyIn(t, "tenant-a", "y", "r-y", "pay", heraldtype.LaneTransactional)
		}
		testenv.WaitFor(t, "one of scope y's sends to reach the provider", testenv.Patience, func() bool { return callsY.Load() >= 1 })
		idB := b.notifyIn(t, "tenant-b", "", "r-b", "pay", heraldtype.LaneTransactional)
		testenv.WaitFor(t, "tenant B's send to be done beside A's four", testenv.Patience, func() bool {
			return b.entryOf(t, "tenant-b", idB).OutboxState == heraldtype.OutboxDone
		})
		if x, y := callsX.Load(), callsY.Load(); x != 3 || y != 1 {
			t.Fatalf("A's scopes made %d and %d calls, want 3 and 1 (5 slots: A's bound 3, its scopes' half of the reserve 1)", x, y)
		}
	})
}

// While a lane has a backlog, a claim waits for Gather free slots
// (GatherWait is an hour here, so only slots or a wake-up end the wait):
// the sends end one at a time, and still the claims after the first take
// four rows each, but for one a wake-up started with a single slot free,
// as it would for a row just committed. A lane without a backlog claims
// at once: a row posted to the drained lane is sent without waiting out
// the hour. Gather 0 claims each slot as it frees, the claims this test
// tells apart.
func TestALaneWithABacklogClaimsGatheredSlots(t *testing.T) {
	t.Parallel()
	for _, gather := range []int{4, 0} {
		t.Run(fmt.Sprintf("gather %d", gather), func(t *testing.T) {
			eachStore(t, func(t *testing.T, b bundle) {
				release := make(chan struct{})
				releaseAll := sync.OnceFunc(func() { close(release) })
				b.sim.OnCall(func(ctx context.Context, _ provider.Message) provider.Outcome {
					select {
					case <-release:
					case <-ctx.Done():
					}
					return provider.Outcome{}
				})
				var posted []string
				for range 20 {
					posted = append(posted, b.notify(t, "pay", heraldtype.LaneTransactional))
				}
				out := &claimLog{Outbox: b.store}
				wake := make(chan struct{}, 1)
				stop := run(t, dispatch.NewClaimer(dispatch.ClaimerConfig{
					Lane: heraldtype.LaneTransactional, Store: out, Wake: wake,
					Sender: b.sender(sender.Hooks{}), Owner: "c", Concurrency: 8, Gather: gather, GatherWait: time.Hour,
					Lease: time.Minute, PollInterval: time.Hour, MaxAttempts: 3, Alerts: b.alerts,
				}))
				defer stop()
				defer releaseAll() // before stop: it waits for the sends in flight
				claims := func(n int) {
					t.Helper()
					if gather > 0 {
						testenv.WaitFor(t, fmt.Sprintf("claim %d", n), testenv.Patience, func() bool { return out.count() >= n })
					}
				}
				// Each send ends alone, the next not before the one
				// before it is done (so before any claim it freed ran).
				done := 0
				end := func(n int) {
					t.Helper()
					for range n {
						release <- struct{}{}
						done++
						testenv.WaitFor(t, "the released send to be done", testenv.Patience, func() bool {
							n := 0
							for _, id := range posted {
								if b.entry(t, id).OutboxState == heraldtype.OutboxDone {
									n++
								}
							}
							return n == done
						})
					}
				}
				poke := func() {
					select {
					case wake <- struct{}{}:
					default:
					}
				}
				claims(1)
				end(4)
				claims(2)
				end(4)
				claims(3)
				end(1)
				poke()
				claims(4)
				end(4)
				claims(5)
				got := out.limits()
				if gather > 0 {
					// The twelve rows behind the first eight went four,
					// four, one (woken) and the last three.
					if !slices.Equal(got[:5], []int{8, 4, 4, 1, 4}) {
						t.Fatalf("claim limits %v, want [8 4 4 1 4] first", got)
					}
				} else if !slices.Contains(got[1:], 1) {
					t.Fatalf("claim limits %v: no claim of a single freed slot", got)
				}
				releaseAll()
				id := b.notify(t, "pay", heraldtype.LaneTransactional)
				poke()
				testenv.WaitFor(t, "a row posted to the drained lane to be sent", testenv.Patience, func() bool {
					return b.entry(t, id).OutboxState == heraldtype.OutboxDone
				})
			})
		})
	}
}

// slowRecords holds every result write until release is closed, counting
// the writes waiting.
type slowRecords struct {
	sender.Store
	release chan struct{}
	waiting atomic.Int32
}

func (s *slowRecords) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	s.waiting.Add(1)
	<-s.release
	s.waiting.Add(-1)
	return s.Store.DeliveryRecord(ctx, p)
}

// A send's slot is free again once its provider call has returned: the
// next send starts while the result is still being written. The rows whose
// results are being written are bounded too, by Concurrency more.
func TestASendGivesItsSlotBackWhenItsCallReturns(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		var calling, most atomic.Int32
		calls := make(chan struct{})
		b.sim.OnCall(func(ctx context.Context, _ provider.Message) provider.Outcome {
			n := calling.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-calls
			calling.Add(-1)
			return provider.Outcome{}
		})
		var posted []string
		for range 10 {
			posted = append(posted, b.notify(t, "pay", heraldtype.LaneTransactional))
		}
		records := &slowRecords{Store: b.store, release: make(chan struct{})}
		releaseRecords := sync.OnceFunc(func() { close(records.release) })
		stop := run(t, b.claimer(heraldtype.LaneTransactional, b.store, b.senderOn(records, sender.Hooks{}), 2))
		defer stop()
		defer releaseRecords() // before stop: it waits for the sends in flight
		state := func() (int32, int32) { return calling.Load(), records.waiting.Load() }
		want := func(what string, call, record int32) {
			t.Helper()
			testenv.WaitFor(t, what, testenv.Patience, func() bool {
				c, r := state()
				return c == call && r == record
			})
		}
		stays := func(what string, call, record int32) {
			t.Helper()
			deadline := time.Now().Add(200 * time.Millisecond)
			for time.Now().Before(deadline) {
				if c, r := state(); c != call || r != record {
					t.Fatalf("%s: %d calls and %d result writes, want %d and %d", what, c, r, call, record)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		want("two calls", 2, 0)
		stays("two slots, two calls", 2, 0)
		calls <- struct{}{}
		calls <- struct{}{}
		want("two more calls beside the two result writes", 2, 2)
		calls <- struct{}{}
		calls <- struct{}{}
		want("four result writes", 0, 4)
		stays("four rows held, twice the concurrency", 0, 4)
		releaseRecords()
		close(calls)
		testenv.WaitFor(t, "every row sent and settled", testenv.Patience, func() bool {
			for _, id := range posted {
				if b.entry(t, id).OutboxState != heraldtype.OutboxDone {
					return false
				}
			}
			return true
		})
		if m := most.Load(); m > 2 {
			t.Fatalf("%d calls at once with a concurrency of 2", m)
		}
	})
}
