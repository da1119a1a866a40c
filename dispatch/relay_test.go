package dispatch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/store"
)

// fakePublisher confirms or fails every job with outcome(job) and records
// each message id it was asked to publish, and the jobs that said they
// were on no fallback chain.
type fakePublisher struct {
	mu        sync.Mutex
	published map[string]int
	offChain  map[string]bool
	outcome   func(job heraldtype.Job) error
}

type fakeConfirms []error

func (f fakeConfirms) Wait() []error { return f }

func (p *fakePublisher) Ready(ctx context.Context) error { return nil }

func (p *fakePublisher) Publish(_ context.Context, _ heraldtype.Lane, _ dispatch.Queue, jobs []heraldtype.Job) dispatch.Confirms {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(fakeConfirms, len(jobs))
	for i, j := range jobs {
		p.published[j.MessageID]++
		if j.OffChain {
			if p.offChain == nil {
				p.offChain = map[string]bool{}
			}
			p.offChain[j.MessageID] = true
		}
		if p.outcome != nil {
			out[i] = p.outcome(j)
		}
	}
	return out
}

func (p *fakePublisher) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published[id]
}

func (b bundle) relay(pub dispatch.Publisher, hooks dispatch.RelayHooks) *dispatch.Relay {
	return dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Publisher: pub, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: 5 * time.Millisecond,
		MaxAttempts: 3, Alerts: b.alerts, Hooks: hooks,
	})
}

func runRelay(t *testing.T, r *dispatch.Relay) (stop func()) {
	t.Helper()
	return testenv.Start(t, r.Run)
}

// On PostgreSQL the relay holds its claims until their confirms
// (store.OutboxHolder): one row version a row; SQLite claims PUBLISHING
// and marks.
func TestRelayMarksConfirmedRowsPublished(t *testing.T) {
	t.Parallel()
	eachStore(t, testRelayMarksConfirmedRowsPublished)
}

func testRelayMarksConfirmedRowsPublished(t *testing.T, b bundle) {
	pub := &fakePublisher{published: map[string]int{}}
	stop := runRelay(t, b.relay(pub, dispatch.RelayHooks{}))
	defer stop()
	var idsN []string
	for range 20 {
		idsN = append(idsN, b.notify(t, "pay", heraldtype.LaneTransactional))
	}
	for _, id := range idsN {
		testenv.WaitFor(t, "PUBLISHED", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxPublished })
		if n := pub.count(store.MessageID(id, heraldtype.ChannelWebhook)); n != 1 {
			t.Fatalf("%s published %d times", id, n)
		}
		// The message says the row is on no chain, so the consumer's
		// result write need not look for one.
		pub.mu.Lock()
		off := pub.offChain[store.MessageID(id, heraldtype.ChannelWebhook)]
		pub.mu.Unlock()
		if !off {
			t.Fatalf("%s, on no chain, was published without OffChain", id)
		}
	}
}

func TestRelayReturnsUnconfirmedRowsToPending(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		err          error
		wantDelay    time.Duration
		wantAttempts int
	}{
		{"NackedBacksOffAndCounts", errors.New("nacked"), dispatch.Backoff(1), 1},
		{"ConnectionLostIsDueAtOnceAndNotCounted", dispatch.ErrConnectionLost, 0, 0},
	} {
		eachStore(t, func(t *testing.T, b bundle) {
			t.Run(c.name, func(t *testing.T) {
				settled := make(chan struct{}, 1)
				pub := &fakePublisher{published: map[string]int{}, outcome: func(heraldtype.Job) error { return c.err }}
				stop := runRelay(t, b.relay(pub, dispatch.RelayHooks{AfterSettle: func(published, retried int) {
					if retried > 0 {
						select {
						case settled <- struct{}{}:
						default:
						}
					}
				}}))
				id := b.notify(t, "pay", heraldtype.LaneTransactional)
				testenv.Recv(t, settled, "the unconfirmed batch to be settled")
				stop()
				e := b.entry(t, id)
				if e.OutboxState != heraldtype.OutboxPending || !e.AvailableAt.Equal(b.clk.Now().Add(c.wantDelay)) {
					t.Fatalf("outbox %s due %s, want PENDING due in %s", e.OutboxState, e.AvailableAt, c.wantDelay)
				}
				claim := func() []store.Claimed {
					t.Helper()
					rows, err := b.store.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "x", Limit: 1, Lease: time.Minute})
					if err != nil {
						t.Fatal(err)
					}
					return rows
				}
				if c.wantDelay > 0 {
					if rows := claim(); len(rows) != 0 {
						t.Fatalf("claimed %+v before its backoff of %s passed", rows, c.wantDelay)
					}
					b.clk.Advance(c.wantDelay)
				}
				if rows := claim(); len(rows) != 1 || rows[0].Attempts != c.wantAttempts {
					t.Fatalf("claimed %+v, want one row with attempts %d", rows, c.wantAttempts)
				}
			})
		})
	}
}

func TestTwoRelaysPublishDisjointRows(t *testing.T) {
	t.Parallel()
	eachStore(t, testTwoRelaysPublishDisjointRows)
}

func testTwoRelaysPublishDisjointRows(t *testing.T, b bundle) {
	pub1 := &fakePublisher{published: map[string]int{}}
	pub2 := &fakePublisher{published: map[string]int{}}
	var idsN []string
	for range 60 {
		idsN = append(idsN, b.notify(t, "pay", heraldtype.LaneTransactional))
	}
	stop1 := runRelay(t, b.relay(pub1, dispatch.RelayHooks{}))
	stop2 := runRelay(t, b.relay(pub2, dispatch.RelayHooks{}))
	for _, id := range idsN {
		testenv.WaitFor(t, "PUBLISHED", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxPublished })
	}
	stop1()
	stop2()
	for _, id := range idsN {
		m := store.MessageID(id, heraldtype.ChannelWebhook)
		if n := pub1.count(m) + pub2.count(m); n != 1 {
			t.Fatalf("%s published %d times by the two relays", m, n)
		}
	}
}

// gatedPublisher publishes at once and holds each batch's confirms until
// the test releases them, one batch per receive from release. It counts the
// batches published and the waits for confirms under way.
type gatedPublisher struct {
	release chan struct{}
	closed  chan struct{} // closed by unblock: every wait returns
	changed chan struct{} // poked on every change

	mu                           sync.Mutex
	published, waiting, maxWaits int
}

func newGatedPublisher() *gatedPublisher {
	return &gatedPublisher{release: make(chan struct{}), closed: make(chan struct{}), changed: make(chan struct{}, 1)}
}

// unblock confirms every batch from now on.
func (p *gatedPublisher) unblock() { close(p.closed) }

func (p *gatedPublisher) Ready(context.Context) error { return nil }

func (p *gatedPublisher) Publish(_ context.Context, _ heraldtype.Lane, _ dispatch.Queue, jobs []heraldtype.Job) dispatch.Confirms {
	p.update(func() { p.published++ })
	return gatedConfirms{p, len(jobs)}
}

func (p *gatedPublisher) update(f func()) {
	p.mu.Lock()
	f()
	p.maxWaits = max(p.maxWaits, p.waiting)
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// await waits until the publisher has published at least published batches
// and at least waiting of them are awaiting their confirms.
func (p *gatedPublisher) await(t *testing.T, published, waiting int) {
	t.Helper()
	deadline := time.After(testenv.Patience)
	for {
		p.mu.Lock()
		pub, w := p.published, p.waiting
		p.mu.Unlock()
		if pub >= published && w >= waiting {
			return
		}
		select {
		case <-p.changed:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %d batches published and %d awaiting confirms; have %d and %d",
				testenv.Patience, published, waiting, pub, w)
		}
	}
}

type gatedConfirms struct {
	p *gatedPublisher
	n int
}

func (c gatedConfirms) Wait() []error {
	c.p.update(func() { c.p.waiting++ })
	select {
	case <-c.p.release:
	case <-c.p.closed:
	}
	c.p.update(func() { c.p.waiting-- })
	return make([]error, c.n) // all confirmed
}

// Up to InFlight batches await their confirms at once while the next batch
// is claimed and published (README: relay_in_flight, default 4), and never
// more.
func TestRelayKeepsInFlightBatchesAwaitingConfirmsAtOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name             string
		inFlight, expect int
	}{
		{"Configured", 2, 2},
		{"Default", 0, 4},
	} {
		eachStore(t, func(t *testing.T, b bundle) {
			t.Run(c.name, func(t *testing.T) {
				total := 3 * c.expect
				var idsN []string
				for range total {
					idsN = append(idsN, b.notify(t, "pay", heraldtype.LaneTransactional))
				}
				pub := newGatedPublisher()
				runRelay(t, dispatch.NewRelay(dispatch.RelayConfig{
					Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
					Publisher: pub, Owner: "relay", BatchSize: 1, InFlight: c.inFlight, Lease: time.Minute,
					PollInterval: 5 * time.Millisecond, Alerts: b.alerts,
				}))
				t.Cleanup(pub.unblock) // runs before the relay is stopped, so a failed test still stops it
				// Release one batch's confirms at a time; each time, the relay
				// fills its window again and publishes the next batch ahead.
				for released := 0; released < total; released++ {
					pub.await(t, min(c.expect+1+released, total), min(c.expect, total-released))
					select {
					case pub.release <- struct{}{}:
					case <-time.After(testenv.Patience):
						t.Fatalf("no batch awaiting its confirms after %d released", released)
					}
				}
				for _, id := range idsN {
					testenv.WaitFor(t, "PUBLISHED", testenv.Patience, func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxPublished })
				}
				pub.mu.Lock()
				defer pub.mu.Unlock()
				if pub.maxWaits != c.expect || pub.published != total {
					t.Fatalf("%d batches published, at most %d awaiting confirms at once; want %d and %d",
						pub.published, pub.maxWaits, total, c.expect)
				}
			})
		})
	}
}

// TestAWokenRelayLooksAgain is TestAWokenClaimerLooksAgain for the relay:
// a row committed just after the claim a wake-up caused, with no wake-up
// of its own, is published at the loop's second look, not at its next poll
// (an hour here).
func TestAWokenRelayLooksAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := &claimLog{Outbox: b.store}
	wake := make(chan struct{}, 1)
	pub := &fakePublisher{published: map[string]int{}}
	stop := runRelay(t, dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: out, Wake: wake, Publisher: pub, Owner: "relay", BatchSize: 7,
		Lease: time.Minute, PollInterval: time.Hour, MaxAttempts: 3, Alerts: b.alerts, Claimers: 1,
	}))
	defer stop()
	testenv.WaitFor(t, "the first claim", testenv.Patience, func() bool { return out.count() == 1 })
	wake <- struct{}{}
	testenv.WaitFor(t, "the woken claim", testenv.Patience, func() bool { return out.count() == 2 })
	id := b.notify(t, "pay", heraldtype.LaneTransactional)
	testenv.WaitFor(t, "the row published by the second look", testenv.Patience, func() bool {
		return b.entry(t, id).OutboxState == heraldtype.OutboxPublished
	})
}
