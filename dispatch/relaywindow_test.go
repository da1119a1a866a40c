package dispatch_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/store"
)

// queuePublisher is a lane's broker queues: what the relay publishes
// waits in the lane queue (queue, one FIFO) until the test consumes it, or
// in the express queue (express). It records the deepest the lane queue
// got right after a publish. The window counts both (as
// rabbitmq.Publisher.Backlog does).
type queuePublisher struct {
	mu      sync.Mutex
	queue   []heraldtype.Job
	express []heraldtype.Job
	deepest int
}

func (q *queuePublisher) Ready(context.Context) error { return nil }

func (q *queuePublisher) Publish(_ context.Context, _ heraldtype.Lane, to dispatch.Queue, jobs []heraldtype.Job) dispatch.Confirms {
	q.mu.Lock()
	defer q.mu.Unlock()
	if to == dispatch.ExpressQueue {
		q.express = append(q.express, jobs...)
	} else {
		q.queue = append(q.queue, jobs...)
		q.deepest = max(q.deepest, len(q.queue))
	}
	return make(fakeConfirms, len(jobs))
}

func (q *queuePublisher) Backlog(context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue) + len(q.express), nil
}

// countSettled has a relay add to n the rows each of its settles
// published or retried.
func countSettled(n *atomic.Int64) dispatch.RelayHooks {
	return dispatch.RelayHooks{AfterSettle: func(published, retried int) { n.Add(int64(published + retried)) }}
}

// party is who sends: a tenant, and a scope of it.
type party struct{ tenant, scope string }

// parties lists the tenant and scope of each message waiting in queue to.
func (q *queuePublisher) parties(to dispatch.Queue) []party {
	q.mu.Lock()
	defer q.mu.Unlock()
	jobs := q.queue
	if to == dispatch.ExpressQueue {
		jobs = q.express
	}
	var ps []party
	for _, j := range jobs {
		ps = append(ps, party{j.Tenant, j.Scope})
	}
	return ps
}

// tenants lists the tenant of each message waiting in queue to.
func (q *queuePublisher) tenants(to dispatch.Queue) []string {
	var ts []string
	for _, p := range q.parties(to) {
		ts = append(ts, p.tenant)
	}
	return ts
}

// consume takes n messages off the head of the queue.
func (q *queuePublisher) consume(n int) []heraldtype.Job {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.queue))
	out := append([]heraldtype.Job(nil), q.queue[:n]...)
	q.queue = q.queue[n:]
	return out
}

func (q *queuePublisher) depth() int {
	n, _ := q.Backlog(context.Background())
	return n
}

// A relay with a publish window keeps at most Window messages waiting in
// the queue and the rest of the backlog in the outbox, so a small tenant's
// notification accepted behind a big tenant's backlog is published at the
// next top-up (the claim shares the lane between tenants), not behind the
// whole backlog; each consumption lets the relay top the queue up again.
func TestRelayPublishWindowKeepsTheBacklogInTheOutbox(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, b bundle) {
		const window = 10
		notify := func(tenant string) string { return b.notifyAs(t, tenant, "pay", heraldtype.LaneTransactional) }
		for range 200 {
			notify("big")
		}
		q := &queuePublisher{}
		r := dispatch.NewRelay(dispatch.RelayConfig{
			Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
			Publisher: q, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: 5 * time.Millisecond,
			MaxAttempts: 3, Alerts: b.alerts, Window: window, Backlog: q.Backlog, WindowPoll: time.Millisecond,
		})
		defer runRelay(t, r)()

		testenv.WaitFor(t, "the window filled", testenv.Patience, func() bool { return q.depth() >= window })
		small := notify("small")
		smallMsg := store.MessageID(small, heraldtype.ChannelWebhook)
		// The consumer takes a few at a time; the small tenant's message
		// must come out long before the big tenant's 200 have.
		consumed, at := 0, -1
		for consumed < 200 && at < 0 {
			var got []heraldtype.Job
			testenv.WaitFor(t, "a message to consume", testenv.Patience, func() bool {
				got = q.consume(3)
				return len(got) > 0
			})
			for _, j := range got {
				if j.MessageID == smallMsg {
					at = consumed
				}
				consumed++
			}
		}
		if at < 0 || at > 2*window {
			t.Fatalf("the small tenant's message came out after %d of the big tenant's (want within %d: the window, then its fair share)", at, 2*window)
		}
		q.mu.Lock()
		deepest := q.deepest
		q.mu.Unlock()
		if deepest > window {
			t.Fatalf("the queue held %d messages at once, more than the window of %d", deepest, window)
		}
		// The rest of the backlog waits in the outbox, not in the queue.
		backlog, err := b.store.OutboxBacklog(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pending, want := backlog[heraldtype.LaneTransactional], 201-consumed-window; pending < want {
			t.Fatalf("%d rows wait in the outbox, want at least %d (%d consumed, %d in the queue)", pending, want, consumed, q.depth())
		}
	})
}

// A relay that cannot read the queue's depth publishes without the window
// rather than stops (nothing waits on a broker call that fails), and says
// so once, not per claim.
func TestRelayWithoutTheDepthPublishesAndSaysSoOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := &queuePublisher{}
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	r := dispatch.NewRelay(dispatch.RelayConfig{
		Lane: heraldtype.LaneTransactional, Store: b.store, Wake: b.store.Wakeups().C(heraldtype.LaneTransactional),
		Publisher: q, Owner: "relay", BatchSize: 7, Lease: time.Minute, PollInterval: 5 * time.Millisecond,
		MaxAttempts: 3, Alerts: b.alerts, Logger: logger, Window: 5, WindowPoll: time.Millisecond,
		Backlog: func(context.Context) (int, error) { return 0, errors.New("channel closed") },
	})
	defer runRelay(t, r)()
	for range 30 {
		b.notify(t, "pay", heraldtype.LaneTransactional)
	}
	testenv.WaitFor(t, "all 30 published", testenv.Patience, func() bool { return q.depth() == 30 })
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "cannot read the queue's depth"); n != 1 {
		t.Fatalf("the depth failure was logged %d times, want once:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// publishedElsewhere puts n messages of tenant in the lane queue, as
// another process's relay would.
func (q *queuePublisher) publishedElsewhere(n int, tenant string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for range n {
		q.queue = append(q.queue, heraldtype.Job{Tenant: tenant})
	}
}
