package dispatch_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// heldCalls makes every provider call wait for a receive from the channel
// returned, or its close.
func (b bundle) heldCalls() chan struct{} {
	calls := make(chan struct{})
	b.sim.OnCall(func(ctx context.Context, _ provider.Message) provider.Outcome {
		<-calls
		return provider.Outcome{}
	})
	return calls
}

// reserved is a claimer of the transactional lane on out, woken by the
// store, with 4 slots of which 1 is kept from the tenant holding the
// most, polling hourly.
func (b bundle) reserved(out store.Outbox) *dispatch.Claimer {
	return dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: out, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Sender: b.sender(sender.Hooks{}), Owner: "c", Concurrency: 4, Reserve: 1, Lease: time.Minute, PollInterval: time.Hour,
		MaxAttempts: 3, Alerts: b.alerts,
	})
}

// offer waits for c (a claimer or a relay) to run and returns its offer
// of a place for tenant's scope.
func offer(t *testing.T, c dispatch.Offerer, tenant, scope string) dispatch.Hand {
	t.Helper()
	var h dispatch.Hand
	testenv.WaitFor(t, "an offer", testenv.Patience, func() bool { h = c.Offer(tenant, scope); return h != nil })
	return h
}

// handed writes a notification of tenant's claimed under h, as intake does,
// and hands its row over; it returns the notification's id.
func (b bundle) handed(t *testing.T, h dispatch.Hand, tenant, scope string) string {
	t.Helper()
	id := ids.New("ntf", b.clk.Now())
	res, err := b.store.NotificationCreate(b.ctx, store.NotificationCreateParams{
		Tenant: tenant, Scope: scope, ID: id, Recipient: "r1", EventID: id, Kind: "pay", Lane: heraldtype.LaneTransactional,
		Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Claim: h.Claim(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed == nil {
		t.Fatal("the store wrote the row PENDING")
	}
	h.Take(*res.Claimed)
	return id
}

// TestARowHandedOverIsSentWithoutAClaim: intake's create writes the row
// claimed and hands it to the claimer's slot; it is sent and settled, and
// no claim ever took it.
func TestARowHandedOverIsSentWithoutAClaim(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		out := &claimLog{Outbox: b.store}
		c := b.claimer(heraldtype.LaneTransactional, out, b.sender(sender.Hooks{}), 4)
		stop := run(t, c)
		defer stop()
		id := b.handed(t, offer(t, c, "t1", ""), "t1", "")
		testenv.WaitFor(t, "outbox DONE", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxDone })
		if d := b.entry(t, id).Delivery; d == nil || d.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("delivery %+v", d)
		}
		for _, cl := range out.get() {
			if cl.took != 0 {
				t.Fatalf("a claim took %d rows: %+v", cl.took, out.get())
			}
		}
	})
}

// TestAnOfferTakesOnlyAFreeSlot: an offer holds a slot until its row is
// taken or the offer dropped; none is made while every slot is held,
// before the claimer runs, or after it stopped.
func TestAnOfferTakesOnlyAFreeSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.claimer(heraldtype.LaneTransactional, b.store, b.sender(sender.Hooks{}), 2)
	if h := c.Offer("t1", ""); h != nil {
		t.Fatal("an offer before the claimer runs")
	}
	if h := (*dispatch.Claimer)(nil).Offer("t1", ""); h != nil {
		t.Fatal("an offer from no claimer")
	}
	stop := run(t, c)
	first := offer(t, c, "t1", "")
	second := offer(t, c, "t2", "")
	if h := c.Offer("t3", ""); h != nil {
		t.Fatal("a third offer with two slots held")
	}
	first.Drop()
	third := offer(t, c, "t3", "")
	second.Drop()
	third.Drop()
	stop()
	if h := c.Offer("t1", ""); h != nil {
		t.Fatal("an offer after the claimer stopped")
	}
}

// TestAnOfferKeepsTheReserve: a tenant that holds its share of the slots
// (Concurrency − Reserve) is offered none; another tenant is.
func TestAnOfferKeepsTheReserve(t *testing.T) {
	t.Parallel()
	b := setup(t)
	calls := b.heldCalls()
	c := b.reserved(b.store)
	stop := run(t, c)
	defer stop()
	defer close(calls) // before the stop: it waits for the sends
	for range 3 {
		b.handed(t, offer(t, c, "big", ""), "big", "")
	}
	if h := c.Offer("big", ""); h != nil {
		t.Fatal("the big tenant was offered a slot of the reserve")
	}
	b.handed(t, offer(t, c, "small", ""), "small", "")
}

// backlogOf writes rows notifications of tenant's scope and runs a claimer of
// slots slots whose every claim after the first waits for all of them
// (Gather), an hour at most, and no wake-up; it returns once the first
// claim has come back full, a backlog of rows-slots rows left waiting.
// calls are the held provider calls (heldCalls), let go if it fails.
func (b bundle) backlogOf(t *testing.T, calls chan struct{}, tenant, scope string, rows, slots int) (*dispatch.Claimer, *claimLog, func()) {
	t.Helper()
	return b.backlogWithReserve(t, calls, tenant, scope, rows, slots, 0)
}

// backlogWithReserve is backlogOf in a lane with reserve slots kept from
// the tenant holding the most: the first claim takes slots-reserve rows.
func (b bundle) backlogWithReserve(t *testing.T, calls chan struct{}, tenant, scope string, rows, slots, reserve int) (*dispatch.Claimer, *claimLog, func()) {
	t.Helper()
	for range rows {
		b.notifyIn(t, tenant, scope, "r1", "pay", heraldtype.LaneTransactional)
	}
	out := &claimLog{Outbox: b.store}
	c := dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: out, Wake: make(chan struct{}), Sender: b.sender(sender.Hooks{}), Owner: "c",
		Concurrency: slots, Reserve: reserve, Gather: slots, GatherWait: time.Hour, Lease: time.Minute, PollInterval: time.Hour,
		MaxAttempts: 3, Alerts: b.alerts,
	})
	stop := run(t, c)
	testenv.WaitFor(t, "a full claim", testenv.Patience, func() bool { return out.count() > 0 })
	if got, want := out.get()[0], slots-reserve; got.took != want || got.limit != want {
		close(calls)
		stop()
		t.Fatalf("first claim %+v, want %d of %d", got, want, want)
	}
	// Its rows started: an offer before then is refused for the claim's
	// pledge, and its party joins the backlog.
	testenv.WaitFor(t, "the first claim's rows started", testenv.Patience, func() bool { return dispatch.Pledged(c) == 0 })
	return c, out, stop
}

// TestAnOfferWaitsOutABacklog: while the lane's last claim came back full
// (rows older than intake's are due), intake's rows go to the outbox,
// where the claim's order and shares decide; once a claim comes back
// short, offers are made again.
func TestAnOfferWaitsOutABacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	calls := b.heldCalls()
	c, out, stop := b.backlogOf(t, calls, "t1", "", 3, 2)
	defer stop()
	defer close(calls) // before the stop: it waits for the sends
	// One send ends: a slot is free, but the lane has a row older than
	// any intake would hand over.
	calls <- struct{}{}
	testenv.WaitFor(t, "the first send ended", testenv.Patience, func() bool { return b.sim.Total() == 1 && out.count() == 1 })
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
		if h := c.Offer("t1", ""); h != nil {
			h.Drop()
			t.Fatal("an offer with a row of the backlog still waiting")
		}
		time.Sleep(time.Millisecond)
	}
	calls <- struct{}{}
	testenv.WaitFor(t, "the backlog's last row claimed", testenv.Patience, func() bool {
		n := 0
		for _, cl := range out.get() {
			n += cl.took
		}
		return n == 3
	})
	calls <- struct{}{}
	// The claim came back short: offers again.
	offer(t, c, "t1", "").Drop()
}

// TestAnOfferBesideABacklogGoesToARowBehindIt: a backlog refuses only the
// rows it would be claimed before, between tenants and, inside a tenant,
// between its scopes. Party big's rows fill every slot and more wait; a
// slot frees and the claimer gathers for more. big's next row waits behind
// big's own, but small, holding fewer sends than big (a tenant; or a scope
// of big's tenant, which then has the tenant's next turn), has its row
// handed over at once: it would come first in the next claim. Then a party
// refused an offer while no slot is free has its row wait in the outbox,
// so it joins the backlog: once a slot frees, neither it nor a party
// holding as few sends is given it.
func TestAnOfferBesideABacklogGoesToARowBehindIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		big, small, mid, other party
	}{
		{"tenants", party{"big", ""}, party{"small", ""}, party{"mid", ""}, party{"new", ""}},
		{"scopes of a tenant", party{"t1", "clinic-a"}, party{"t1", "clinic-b"}, party{"t1", "clinic-c"}, party{"t1", "clinic-d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			calls := b.heldCalls()
			c, out, stop := b.backlogOf(t, calls, tc.big.tenant, tc.big.scope, 6, 4)
			defer stop()
			defer close(calls) // before the stop: it waits for the sends
			calls <- struct{}{}
			testenv.WaitFor(t, "a slot free", testenv.Patience, func() bool { return dispatch.FreeSlots(c) == 1 })
			if h := c.Offer(tc.big.tenant, tc.big.scope); h != nil {
				h.Drop()
				t.Fatal("big's row was handed over ahead of its own backlog")
			}
			b.handed(t, offer(t, c, tc.small.tenant, tc.small.scope), tc.small.tenant, tc.small.scope)
			if h := c.Offer(tc.mid.tenant, tc.mid.scope); h != nil {
				t.Fatal("an offer with every slot held")
			}
			b.notifyIn(t, tc.mid.tenant, tc.mid.scope, "r1", "pay", heraldtype.LaneTransactional) // its row, in the outbox
			calls <- struct{}{}
			testenv.WaitFor(t, "a slot free", testenv.Patience, func() bool { return dispatch.FreeSlots(c) == 1 })
			for _, p := range []party{tc.mid, tc.other} {
				if h := c.Offer(p.tenant, p.scope); h != nil {
					h.Drop()
					t.Fatalf("%+v was given a slot ahead of mid's row", p)
				}
			}
			if n := out.count(); n != 1 {
				t.Fatalf("%d claims, want the first only", n)
			}
		})
	}
}

// TestAnotherScopeTakesHalfTheReserveBesideItsTenantsBacklog: in a lane
// with a reserve (8 slots, 2 kept from the tenant holding the most), clinic
// a's backlog takes the tenant to its bound of 6 and more wait. Its
// tenant holds as many sends as the full claim left it, but the share
// lets its other scopes have half the reserve, as a claim would: clinic
// b's row is handed over a reserved slot at once. Then the tenant holds
// its bound and half the reserve, and clinic c's row is refused the slot
// left, kept for other tenants.
func TestAnotherScopeTakesHalfTheReserveBesideItsTenantsBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	calls := b.heldCalls()
	c, _, stop := b.backlogWithReserve(t, calls, "t1", "clinic-a", 10, 8, 2)
	defer stop()
	defer close(calls) // before the stop: it waits for the sends
	b.handed(t, offer(t, c, "t1", "clinic-b"), "t1", "clinic-b")
	if h := c.Offer("t1", "clinic-c"); h != nil {
		h.Drop()
		t.Fatal("clinic-c was given a slot past its tenant's bound and half the reserve")
	}
	if h := c.Offer("other", ""); h == nil {
		t.Fatal("another tenant was refused the reserve's last slot")
	} else {
		h.Drop()
	}
}

// TestShutdownWaitsForTheOffersMade: a claimer told to stop still takes
// the row an offer was made for; the row, not started, goes back to
// PENDING at once (as a claimed row not yet started does) and is sent by
// the next claimer.
func TestShutdownWaitsForTheOffersMade(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.claimer(heraldtype.LaneTransactional, b.store, b.sender(sender.Hooks{}), 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	h := offer(t, c, "t1", "")
	cancel()
	select {
	case <-done:
		t.Fatal("the claimer stopped with an offer outstanding")
	case <-time.After(50 * time.Millisecond):
	}
	id := b.handed(t, h, "t1", "")
	testenv.Recv(t, done, "the claimer's stop")
	if e := b.entry(t, id); e.OutboxState == heraldtype.OutboxDone {
		t.Fatalf("sent after the stop: %+v", e)
	}
	stop := run(t, b.claimer(heraldtype.LaneTransactional, b.store, b.sender(sender.Hooks{}), 2))
	defer stop()
	testenv.WaitFor(t, "the row sent by the next claimer", testenv.Patience, func() bool {
		return b.entry(t, id).OutboxState == heraldtype.OutboxDone
	})
}

// TestAHandedRowsLeaseIsExtended: the heartbeat extends a handed row's
// lease as it does a claimed row's, while its send is in flight.
func TestAHandedRowsLeaseIsExtended(t *testing.T) {
	t.Parallel()
	b := setup(t)
	calls := b.heldCalls()
	out := &beats{Outbox: b.store, extended: make(chan int, 1)}
	c := dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: out, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Sender: b.sender(sender.Hooks{}), Owner: "c", Concurrency: 2, Lease: time.Minute, Heartbeat: 50 * time.Millisecond,
		PollInterval: time.Hour, MaxAttempts: 3, Alerts: b.alerts,
	})
	stop := run(t, c)
	defer stop()
	defer close(calls) // before the stop: it waits for the send
	b.handed(t, offer(t, c, "t1", ""), "t1", "")
	testenv.WaitFor(t, "the handed row's lease extended", testenv.Patience, func() bool { return out.next(t) == 1 })
}

// TestAFreedSlotAfterADrainedClaimClaimsNothing: once a claim came back
// short of its limit, the lane had nothing more due; the sends that end
// after it start no claim (with intake handing rows over, every send's end
// made an empty claim). A freed slot after a claim that came back full
// still claims at once.
func TestAFreedSlotAfterADrainedClaimClaimsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wake := make(chan struct{}, 1)
	out := &claimLog{Outbox: b.store}
	c := dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: out, Wake: wake, Sender: b.sender(sender.Hooks{}), Owner: "c",
		Concurrency: 4, Lease: time.Minute, PollInterval: time.Hour, MaxAttempts: 3, Alerts: b.alerts,
	})
	stop := run(t, c)
	defer stop()
	// The first claim finds nothing, and so does its second look.
	testenv.WaitFor(t, "the first claim and its second look", testenv.Patience, func() bool { return out.count() == 2 })
	var ids []string
	for range 3 {
		ids = append(ids, b.handed(t, offer(t, c, "t1", ""), "t1", ""))
	}
	testenv.WaitFor(t, "the handed rows sent", testenv.Patience, func() bool {
		for _, id := range ids {
			if b.entry(t, id).OutboxState != heraldtype.OutboxDone {
				return false
			}
		}
		return true
	})
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := out.count(); n != 2 {
			t.Fatalf("%d claims after three sends ended, want the first two alone", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gatedClaims is the outbox with its claims held at a gate once shut: a
// claim under way, its slots pledged, for as long as the test likes.
type gatedClaims struct {
	store.Outbox
	shut    atomic.Bool
	waiting chan struct{} // a claim reached the shut gate
	open    chan struct{}
}

func (g *gatedClaims) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	if g.shut.Load() {
		g.waiting <- struct{}{}
		<-g.open
	}
	return g.Outbox.OutboxClaim(ctx, p)
}

// TestAnOfferBesideAClaimKeepsTheReserve: a claim under way may bring up
// to its limit of one tenant's rows (Concurrency − Reserve of them); an
// offer made meanwhile for that tenant would take it past its share, so
// none is made until the claim's rows have started.
func TestAnOfferBesideAClaimKeepsTheReserve(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := &gatedClaims{Outbox: b.store, waiting: make(chan struct{}, 1), open: make(chan struct{})}
	c := b.reserved(out)
	stop := run(t, c)
	defer stop()
	opened := sync.OnceFunc(func() { out.shut.Store(false); close(out.open) })
	defer opened()                // before the stop: a claim may wait at the gate
	offer(t, c, "big", "").Drop() // the first claim has looked
	out.shut.Store(true)
	b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
	testenv.Recv(t, out.waiting, "the woken claim")
	if h := c.Offer("big", ""); h != nil {
		h.Drop()
		t.Fatal("an offer beside a claim that may bring three of the tenant's rows, with a bound of three")
	}
	opened()
	offer(t, c, "big", "").Drop()
}

// TestAShortClaimThatSkippedATenantClaimsWhenASlotFrees: a claim that
// skipped the tenant holding its share came back with nothing, but the
// tenant's rows are still due; when one of its sends ends, the freed slot
// claims the next at once (the poll is an hour away).
func TestAShortClaimThatSkippedATenantClaimsWhenASlotFrees(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	release := make(chan struct{})
	b.sim.OnCall(func(ctx context.Context, _ provider.Message) provider.Outcome {
		calls.Add(1)
		<-release
		return provider.Outcome{}
	})
	for range 6 {
		b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
	}
	c := dispatch.NewClaimer(dispatch.ClaimerConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: make(chan struct{}),
		Sender: b.sender(sender.Hooks{}), Owner: "c", Concurrency: 4, Reserve: 1, Lease: time.Minute, PollInterval: time.Hour,
		MaxAttempts: 3, Alerts: b.alerts,
	})
	stop := run(t, c)
	defer stop()
	defer close(release) // before the stop: it waits for the sends
	testenv.WaitFor(t, "three calls, the tenant's share", testenv.Patience, func() bool { return calls.Load() == 3 })
	release <- struct{}{}
	testenv.WaitFor(t, "the fourth call, claimed when the first ended", testenv.Patience, func() bool { return calls.Load() == 4 })
}
