package dispatch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// fakePublisher confirms or fails every job with outcome(job) and records
// each message id it was asked to publish.
type fakePublisher struct {
	mu        sync.Mutex
	published map[string]int
	outcome   func(job heraldtype.Job) error
}

type fakeConfirms []error

func (f fakeConfirms) Wait() []error { return f }

func (p *fakePublisher) Ready(ctx context.Context) error { return nil }

func (p *fakePublisher) Publish(_ context.Context, _ heraldtype.Lane, jobs []heraldtype.Job) dispatch.Confirms {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(fakeConfirms, len(jobs))
	for i, j := range jobs {
		p.published[j.MessageID]++
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

func runRelay(r *dispatch.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

func TestRelayMarksConfirmedRowsPublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := &fakePublisher{published: map[string]int{}}
	stop := runRelay(b.relay(pub, dispatch.RelayHooks{}))
	defer stop()
	var idsN []string
	for range 20 {
		idsN = append(idsN, b.notify(t, "pay", heraldtype.LaneTransactional))
	}
	for _, id := range idsN {
		eventually(t, "PUBLISHED", func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxPublished })
		if n := pub.count(store.MessageID(id, heraldtype.ChannelWebhook)); n != 1 {
			t.Fatalf("%s published %d times", id, n)
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
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			settled := make(chan struct{}, 1)
			pub := &fakePublisher{published: map[string]int{}, outcome: func(heraldtype.Job) error { return c.err }}
			stop := runRelay(b.relay(pub, dispatch.RelayHooks{AfterSettle: func(published, retried int) {
				if retried > 0 {
					select {
					case settled <- struct{}{}:
					default:
					}
				}
			}}))
			id := b.notify(t, "pay", heraldtype.LaneTransactional)
			<-settled
			stop()
			e := b.entry(t, id)
			if e.OutboxState != heraldtype.OutboxPending || !e.AvailableAt.Equal(b.clk.Now().Add(c.wantDelay)) {
				t.Fatalf("outbox %s due %s, want PENDING due in %s", e.OutboxState, e.AvailableAt, c.wantDelay)
			}
			rows, _ := b.store.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "x", Limit: 1, Lease: time.Minute})
			b.clk.Advance(c.wantDelay)
			if len(rows) == 0 {
				rows, _ = b.store.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "x", Limit: 1, Lease: time.Minute})
			}
			if len(rows) != 1 || rows[0].Attempts != c.wantAttempts {
				t.Fatalf("claimed %+v, want attempts %d", rows, c.wantAttempts)
			}
		})
	}
}

func TestTwoRelaysPublishDisjointRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub1 := &fakePublisher{published: map[string]int{}}
	pub2 := &fakePublisher{published: map[string]int{}}
	var idsN []string
	for range 60 {
		idsN = append(idsN, b.notify(t, "pay", heraldtype.LaneTransactional))
	}
	stop1 := runRelay(b.relay(pub1, dispatch.RelayHooks{}))
	stop2 := runRelay(b.relay(pub2, dispatch.RelayHooks{}))
	for _, id := range idsN {
		eventually(t, "PUBLISHED", func() bool { return b.entry(t, id).OutboxState == heraldtype.OutboxPublished })
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
