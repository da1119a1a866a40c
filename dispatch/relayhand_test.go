package dispatch_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// handRelay is a relay of the transactional lane on out, publishing to
// pub in batches of 7, with cfg's other settings.
func (b bundle) handRelay(out store.Outbox, pub dispatch.Publisher, cfg func(*dispatch.RelayConfig)) *dispatch.Relay {
	c := dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: out, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Publisher: pub, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: 5 * time.Millisecond,
		MaxAttempts: 3, Alerts: b.alerts,
	}
	if cfg != nil {
		cfg(&c)
	}
	return dispatch.NewRelay(c)
}

// offers waits for n offers of r's to t1, one after the other.
func offers(t *testing.T, r *dispatch.Relay, n int) []dispatch.Hand {
	t.Helper()
	hands := make([]dispatch.Hand, n)
	for i := range hands {
		hands[i] = offer(t, r, "t1", "")
	}
	return hands
}

// refusedOnce waits until r refuses an offer to tenant, dropping the
// places it gives meanwhile.
func refusedOnce(t *testing.T, r *dispatch.Relay, tenant string) {
	t.Helper()
	testenv.WaitFor(t, "an offer refused", testenv.Patience, func() bool {
		if h := r.Offer(tenant, ""); h != nil {
			h.Drop()
			return false
		}
		return true
	})
}

// published waits for notification id's row to be PUBLISHED.
func (b bundle) published(t *testing.T, tenant, id string) {
	t.Helper()
	testenv.WaitFor(t, "PUBLISHED", testenv.Patience, func() bool {
		return b.entryOf(t, tenant, id).OutboxState == heraldtype.OutboxPublished
	})
}

// TestARowHandedToTheRelayIsPublishedWithoutAClaim: with the rabbitmq
// transport, intake's create writes the row PUBLISHING and hands it to
// the relay, which publishes it once, on no chain, and marks it; no claim
// ever took it.
func TestARowHandedToTheRelayIsPublishedWithoutAClaim(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		out := &claimLog{Outbox: b.store}
		pub := &fakePublisher{published: map[string]int{}}
		r := b.handRelay(out, pub, nil)
		if h := r.Offer("t1", ""); h != nil {
			h.Drop()
			t.Fatal("an offer before the relay runs")
		}
		if h := (*dispatch.Relay)(nil).Offer("t1", ""); h != nil {
			h.Drop()
			t.Fatal("an offer from no relay")
		}
		stop := runRelay(t, r)
		var ids []string
		for range 10 {
			ids = append(ids, b.handed(t, offer(t, r, "t1", ""), "t1", ""))
		}
		for _, id := range ids {
			b.published(t, "t1", id)
			mid := store.MessageID(id, heraldtype.ChannelWebhook)
			if n := pub.count(mid); n != 1 {
				t.Fatalf("%s published %d times", id, n)
			}
			pub.mu.Lock()
			off := pub.offChain[mid]
			pub.mu.Unlock()
			if !off {
				t.Fatalf("%s, on no chain, was published without OffChain", id)
			}
		}
		for _, cl := range out.get() {
			if cl.took != 0 {
				t.Fatalf("a claim took %d rows: %+v", cl.took, out.get())
			}
		}
		stop()
		if h := r.Offer("t1", ""); h != nil {
			h.Drop()
			t.Fatal("an offer after the relay stopped")
		}
	})
}

// TestARelayOffersWithinItsWindow: an offer counts against the publish
// window from the moment it is made; a handed row, once confirmed, counts
// as the queue holds it until the depth is read again (the relay reads it
// when it claims, not on every offer); a row the gate defers no longer
// counts.
func TestARelayOffersWithinItsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := &queuePublisher{}
	var deferNext atomic.Bool
	var settled atomic.Int64
	r := b.handRelay(b.store, q, func(c *dispatch.RelayConfig) {
		c.Window, c.Backlog, c.WindowPoll, c.PollInterval = 3, q.Backlog, time.Millisecond, time.Hour
		c.Gate = func(_ context.Context, job heraldtype.Job) sender.Ruling {
			if deferNext.Load() {
				return sender.Ruling{Defer: time.Hour, Reason: heraldtype.ReasonQuietHours}
			}
			return sender.Ruling{}
		}
		c.Hooks.AfterSettle = func(published, _ int) { settled.Add(int64(published)) }
	})
	stop := runRelay(t, r)
	defer stop()
	// A row the gate defers is not published, and leaves the window.
	deferNext.Store(true)
	id := b.handed(t, offer(t, r, "t1", ""), "t1", "")
	testenv.WaitFor(t, "the gate's deferral", testenv.Patience, func() bool {
		e := b.entry(t, id)
		return e.OutboxState == heraldtype.OutboxPending && e.OutboxReason == heraldtype.ReasonQuietHours
	})
	deferNext.Store(false)
	first, second, third := offer(t, r, "t1", ""), offer(t, r, "t1", ""), offer(t, r, "t1", "")
	if h := r.Offer("t1", ""); h != nil {
		h.Drop()
		t.Fatal("a fourth offer with a window of three")
	}
	second.Drop()
	second = offer(t, r, "t1", "")
	for _, h := range []dispatch.Hand{first, second, third} {
		b.handed(t, h, "t1", "")
	}
	testenv.WaitFor(t, "three published and marked", testenv.Patience, func() bool { return settled.Load() == 3 })
	if h := r.Offer("t1", ""); h != nil {
		h.Drop()
		t.Fatalf("an offer with the queue holding %d of a window of three", q.depth())
	}
	// The queue drains; a claim (woken by a row written PENDING) reads
	// the depth again, and offers resume.
	q.consume(3)
	b.notify(t, "pay", heraldtype.LaneTransactional)
	offer(t, r, "t1", "").Drop()
}

// TestARelayReadsTheDepthAgainForItsOffers: rows handed over start no
// claim, and claims are what read the queue's depth; so the relay reads it
// again before publishing handed rows once the depth as last known (each
// confirmed message added to it) reaches half its window, and offers go
// on while the consumers keep the queue empty.
func TestARelayReadsTheDepthAgainForItsOffers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := &queuePublisher{}
	var settled atomic.Int64
	r := b.handRelay(b.store, q, func(c *dispatch.RelayConfig) {
		c.Window, c.Backlog, c.PollInterval = 8, q.Backlog, time.Hour
		c.Hooks.AfterSettle = func(published, _ int) { settled.Add(int64(published)) }
	})
	stop := runRelay(t, r)
	defer stop()
	for _, h := range offers(t, r, 4) {
		b.handed(t, h, "t1", "")
	}
	testenv.WaitFor(t, "four published and marked", testenv.Patience, func() bool { return settled.Load() == 4 })
	q.consume(4) // the consumers took them: the queue is empty
	b.handed(t, offer(t, r, "t1", ""), "t1", "")
	testenv.WaitFor(t, "the fifth published and marked", testenv.Patience, func() bool { return settled.Load() == 5 })
	// The depth was read again before the fifth went (4 of a window of
	// 8): one message waits, and seven more fit.
	hands := offers(t, r, 7)
	h := r.Offer("t1", "")
	for _, o := range append(hands, h) {
		if o != nil {
			o.Drop()
		}
	}
	if h != nil {
		t.Fatal("an eighth offer beside one message queued, with a window of eight")
	}
}

// steppedClaims lets each claim through only when the test says so, and
// tells it when one has begun, until released.
type steppedClaims struct {
	store.Outbox
	began   chan struct{}
	proceed chan struct{}
	free    atomic.Bool
}

func newSteppedClaims(out store.Outbox) *steppedClaims {
	return &steppedClaims{Outbox: out, began: make(chan struct{}), proceed: make(chan struct{})}
}

func (s *steppedClaims) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	if !s.free.Load() {
		select {
		case s.began <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-s.proceed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Outbox.OutboxClaim(ctx, p)
}

// next lets the claim that began through and waits for the next to begin.
func (s *steppedClaims) next() {
	s.proceed <- struct{}{}
	<-s.began
}

// release lets the claim that began and every later one through.
func (s *steppedClaims) release() {
	s.free.Store(true)
	close(s.proceed)
}

// TestARelayOffersNothingWhileOlderRowsWait: until its first claim has
// looked, and while its last claim came back full, the relay offers
// nothing: rows due before the one intake would hand over are waiting.
// Once a claim comes back short, it offers again.
func TestARelayOffersNothingWhileOlderRowsWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 10 {
		b.notify(t, "pay", heraldtype.LaneTransactional)
	}
	steps := newSteppedClaims(b.store)
	r := b.handRelay(steps, &fakePublisher{published: map[string]int{}}, nil)
	stop := runRelay(t, r)
	defer stop()
	<-steps.began // the first claim, not yet looked
	if h := r.Offer("t1", ""); h != nil {
		h.Drop()
		t.Fatal("an offer before the first claim looked")
	}
	steps.next() // the first claim took 7 of 10: full
	if h := r.Offer("t1", ""); h != nil {
		h.Drop()
		t.Fatal("an offer after a full claim")
	}
	steps.release() // the second takes the other 3
	b.handed(t, offer(t, r, "t1", ""), "t1", "")
}

// TestARelayRoutesAMarkedTenantsHandedRowsToTheLaneQueue: a tenant
// marked with a backlog (Express) is still given a place once no claim
// finds its backlog (the mark routes rows, the claims' backlog refuses
// offers), and its handed row goes to the lane queue behind its claimed
// rows; another tenant's goes to the express queue.
func TestARelayRoutesAMarkedTenantsHandedRowsToTheLaneQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 20 {
		b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
	}
	q := &queuePublisher{}
	r := b.handRelay(b.store, q, func(c *dispatch.RelayConfig) { c.Express, c.ExpressHold = true, time.Hour })
	stop := runRelay(t, r)
	defer stop()
	testenv.WaitFor(t, "the big tenant's 20 in the lane queue", testenv.Patience, func() bool {
		return len(q.tenants(dispatch.LaneQueue)) == 20
	})
	big := offer(t, r, "big", "") // the claims of 7, 7 and 6 have looked, the last not full
	small := offer(t, r, "small", "")
	b.handed(t, big, "big", "")
	b.handed(t, small, "small", "")
	testenv.WaitFor(t, "the big tenant's handed row in the lane queue, the small tenant's in the express queue", testenv.Patience, func() bool {
		ts := q.tenants(dispatch.ExpressQueue)
		return len(q.tenants(dispatch.LaneQueue)) == 21 && len(ts) == 1 && ts[0] == "small"
	})
	for _, tenant := range q.tenants(dispatch.LaneQueue) {
		if tenant != "big" {
			t.Fatalf("the lane queue holds a row of %q", tenant)
		}
	}
}

// TestARelayOffersPastABacklogToATenantWithoutOne: behind a full window
// and a marked tenant's backlog, that tenant's offers wait for the claims,
// but a tenant without a mark is given a place at once; its row goes to
// the express queue, and offers go past the window only by
// ExpressPastWindow.
func TestARelayOffersPastABacklogToATenantWithoutOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 20 {
		b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
	}
	q := &queuePublisher{}
	var settled atomic.Int64
	out := &failingOutboxClaims{Outbox: b.store}
	r := b.handRelay(out, q, func(c *dispatch.RelayConfig) {
		c.Express, c.ExpressHold, c.BatchSize = true, time.Hour, 16
		// No look at a full window but on a wake-up: the depth is read
		// only by the claims that fill it and by the hand loop before it
		// publishes, so the places counted below are exact.
		c.Window, c.Backlog, c.WindowPoll, c.PollInterval = 3, q.Backlog, time.Hour, time.Hour
		c.Hooks.AfterSettle = func(published, _ int) { settled.Add(int64(published)) }
	})
	stop := runRelay(t, r)
	defer stop()
	testenv.WaitFor(t, "a window of the big tenant's rows published and marked", testenv.Patience, func() bool {
		return len(q.tenants(dispatch.LaneQueue)) == 3 && settled.Load() == 3
	})
	if h := r.Offer("big", ""); h != nil {
		h.Drop()
		t.Fatal("the marked tenant was given a place past its backlog")
	}
	b.handed(t, offer(t, r, "small", ""), "small", "")
	testenv.WaitFor(t, "the small tenant's row in the express queue, marked", testenv.Patience, func() bool {
		ts := q.tenants(dispatch.ExpressQueue)
		return len(ts) == 1 && ts[0] == "small" && settled.Load() == 4
	})
	// Four messages wait: seven more places, to the window and eight past it.
	var hands []dispatch.Hand
	for h := r.Offer("small", ""); h != nil; h = r.Offer("small", "") {
		if hands = append(hands, h); len(hands) > 3+dispatch.ExpressPastWindow {
			break
		}
	}
	for _, h := range hands {
		h.Drop()
	}
	if want := 3 + dispatch.ExpressPastWindow - 4; len(hands) != want {
		t.Fatalf("%d places past the window, want %d", len(hands), want)
	}
	if n := len(q.tenants(dispatch.LaneQueue)); n != 3 {
		t.Fatalf("the lane queue holds %d, want the window's 3", n)
	}
	// A claim that failed leaves what is due unknown: no place past the
	// window until a claim has looked again.
	out.failing.Store(true)
	b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional) // wakes a claim past the window, which fails
	refusedOnce(t, r, "small")
	out.failing.Store(false)
	b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
	offer(t, r, "small", "").Drop()
}

// TestARelayPublishesWhatWasHandedOverAsItStops: shutdown refuses new
// offers, waits for those made, and publishes the rows they hand over
// before the relay returns.
func TestARelayPublishesWhatWasHandedOverAsItStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := &fakePublisher{published: map[string]int{}}
	r := b.handRelay(b.store, pub, nil)
	stop := runRelay(t, r)
	h := offer(t, r, "t1", "")
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	testenv.WaitFor(t, "offers refused", testenv.Patience, func() bool {
		if o := r.Offer("t1", ""); o != nil {
			o.Drop()
			return false
		}
		return true
	})
	select {
	case <-stopped:
		t.Fatal("the relay stopped with an offer outstanding")
	default:
	}
	id := b.handed(t, h, "t1", "")
	testenv.Recv(t, stopped, "the relay's stop")
	if e := b.entry(t, id); e.OutboxState != heraldtype.OutboxPublished {
		t.Fatalf("outbox %s after the stop, want PUBLISHED", e.OutboxState)
	}
	if n := pub.count(store.MessageID(id, heraldtype.ChannelWebhook)); n != 1 {
		t.Fatalf("published %d times", n)
	}
}

// downPublisher is a publisher whose broker connection is lost while
// down: Ready waits, and every publish fails with ErrConnectionLost.
type downPublisher struct {
	fakePublisher
	down atomic.Bool
}

func (p *downPublisher) Ready(ctx context.Context) error {
	for p.down.Load() {
		if !clock.Sleep(ctx, time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

func (p *downPublisher) Publish(ctx context.Context, lane heraldtype.Lane, q dispatch.Queue, jobs []heraldtype.Job) dispatch.Confirms {
	if p.down.Load() {
		out := make(fakeConfirms, len(jobs))
		for i := range out {
			out[i] = dispatch.ErrConnectionLost
		}
		return out
	}
	return p.fakePublisher.Publish(ctx, lane, q, jobs)
}

// TestARelayOffersNothingWhileItsBrokerIsGone: a handed row whose publish
// found the connection lost goes back to PENDING at once, and no offer is
// made until the publisher is ready again; then a claim publishes the row
// and offers resume.
func TestARelayOffersNothingWhileItsBrokerIsGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := &downPublisher{fakePublisher: fakePublisher{published: map[string]int{}}}
	r := b.handRelay(b.store, pub, nil)
	stop := runRelay(t, r)
	defer stop()
	h := offer(t, r, "t1", "")
	pub.down.Store(true)
	id := b.handed(t, h, "t1", "")
	testenv.WaitFor(t, "the row back PENDING", testenv.Patience, func() bool {
		e := b.entry(t, id)
		return e.OutboxState == heraldtype.OutboxPending && e.OutboxReason == "BROKER_DISCONNECTED"
	})
	if o := r.Offer("t1", ""); o != nil {
		o.Drop()
		t.Fatal("an offer while the broker is gone")
	}
	pub.down.Store(false)
	b.published(t, "t1", id)
	b.handed(t, offer(t, r, "t1", ""), "t1", "")
}

// TestARelayOffersPastItsWindowWhileTheDepthCannotBeRead: a relay that
// cannot read its queue's depth publishes without the window, and its
// offers do too, rather than refusing every one on a depth that only
// grows.
func TestARelayOffersPastItsWindowWhileTheDepthCannotBeRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.handRelay(b.store, &fakePublisher{published: map[string]int{}}, func(c *dispatch.RelayConfig) {
		c.Window, c.PollInterval = 2, time.Hour
		c.Backlog = func(context.Context) (int, error) { return 0, errors.New("channel closed") }
	})
	stop := runRelay(t, r)
	defer stop()
	for _, h := range offers(t, r, 3) {
		h.Drop()
	}
}

// TestARelayOffersNothingPastABacklogWhileTheDepthCannotBeRead: with
// Express, a tenant without a backlog mark is given a place past another
// tenant's backlog only where the relay can count the window's room; while
// the depth cannot be read the claims publish without the window, and the
// backlog refuses every offer, as it does without Express, until a claim
// comes back short.
func TestARelayOffersNothingPastABacklogWhileTheDepthCannotBeRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 10 {
		b.notifyAs(t, "big", "pay", heraldtype.LaneTransactional)
	}
	steps := newSteppedClaims(b.store)
	r := b.handRelay(steps, &queuePublisher{}, func(c *dispatch.RelayConfig) {
		c.Express, c.ExpressHold = true, time.Hour
		c.Window, c.WindowPoll, c.PollInterval = 3, time.Hour, time.Hour
		c.Backlog = func(context.Context) (int, error) { return 0, errors.New("channel closed") }
	})
	stop := runRelay(t, r)
	defer stop()
	<-steps.began
	steps.next() // the first claim took 7 of big's 10: full, and big is marked
	if h := r.Offer("small", ""); h != nil {
		h.Drop()
		t.Fatal("a place past the backlog with the window's room unknown")
	}
	steps.release() // the second takes the other 3
	b.handed(t, offer(t, r, "small", ""), "small", "")
}

// failingOutboxClaims fails every outbox claim while failing is set.
type failingOutboxClaims struct {
	store.Outbox
	failing atomic.Bool
}

func (f *failingOutboxClaims) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	if f.failing.Load() {
		return nil, errors.New("statement timeout")
	}
	return f.Outbox.OutboxClaim(ctx, p)
}

// TestARelayOffersNothingWhileItsClaimsFail: a claim that fails says
// nothing of what is due, so the relay offers nothing until one succeeds:
// rows only a claim can take (a failed publish's, a lapsed lease's) are
// not overtaken by rows handed over.
func TestARelayOffersNothingWhileItsClaimsFail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := &failingOutboxClaims{Outbox: b.store}
	r := b.handRelay(out, &fakePublisher{published: map[string]int{}}, nil)
	stop := runRelay(t, r)
	defer stop()
	offer(t, r, "t1", "").Drop() // the first claim came back short
	out.failing.Store(true)
	b.notify(t, "pay", heraldtype.LaneTransactional) // wakes a claim, which fails
	refusedOnce(t, r, "t1")
	out.failing.Store(false)
	offer(t, r, "t1", "").Drop()
}
