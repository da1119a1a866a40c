package rabbitmq_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
)

// closedLater returns a channel that release closes (once, and at the
// test's end if not before).
func closedLater(t *testing.T) (gate <-chan struct{}, release func()) {
	c := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(c) }) }
	t.Cleanup(release)
	return c, release
}

// blockCalls makes every provider call wait until the returned release is
// called (also at the test's end); inCall counts the calls begun.
func (e *env) blockCalls(t *testing.T) (inCall *atomic.Int32, release func()) {
	t.Helper()
	inCall = new(atomic.Int32)
	gate, release := closedLater(t)
	e.sim.OnCall(func(ctx context.Context, _ provider.Message) provider.Outcome {
		inCall.Add(1)
		<-gate
		return provider.Outcome{}
	})
	return inCall, release
}

// prefetchOf is the prefetch of the one consumer the broker lists on
// queue, or -1 while it lists none or several.
func (e *env) prefetchOf(t *testing.T, queue string) int {
	t.Helper()
	n, prefetch := 0, -1
	for _, c := range e.consumers(t) {
		if c.Queue == queue {
			n, prefetch = n+1, c.Prefetch
		}
	}
	if n != 1 {
		return -1
	}
	return prefetch
}

// sentOnceAndAcked waits until each of ids is delivered and its last
// settle is an ack, and fails the test unless each was called once.
func (e *env) sentOnceAndAcked(t *testing.T, ids []string) {
	t.Helper()
	for _, id := range ids {
		e.waitFor(t, "the ack of "+id, func() bool {
			a := e.actions(id)
			return len(a) > 0 && a[len(a)-1] == rabbitmq.ActionAcked
		})
		if n := e.sim.CallCount(id); n != 1 {
			t.Fatalf("%s called %d times", id, n)
		}
	}
	if d := e.sim.Duplicates(); len(d) > 0 {
		t.Fatalf("duplicates: %v", d)
	}
}

// A consumer's Prefetch counts jobs: behind ten bundles of sixteen, a
// consumer of 8 jobs holds three bundles (its 8 jobs and two bundles more),
// not eight (128 jobs, as when the broker's prefetch was Prefetch
// messages); the other seven stay ready in the queue, for any process.
func TestConsumerHoldsItsPrefetchInJobsNotBundles(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ids := e.notifyAll(t, 160)
	e.publishedBeforeConsumingBy(t, relayOpts{batch: 160}, ids, 10, "10 bundles of 16 (one claim)")
	inCall, release := e.blockCalls(t)
	e.consumer(t, rabbitmq.ConsumerConfig{Sender: e.sender(t), Concurrency: 8, Bundle: 16})
	e.waitFor(t, "8 sends in flight", func() bool { return inCall.Load() == 8 })
	for _, q := range []string{e.topo.Queue(lane), e.topo.ExpressQueue(lane)} {
		e.awaitConsumers(t, 1, q)
		if p := e.prefetchOf(t, q); p != 3 {
			t.Fatalf("%s: the consumer's prefetch is %d messages, want 3", q, p)
		}
	}
	if n := e.steadyReady(t, e.topo.Queue(lane)); n != 7 {
		t.Fatalf("%d bundles left ready in the lane queue with every send blocked, want 7 (three held)", n)
	}
	if n := inCall.Load(); n != 8 {
		t.Fatalf("%d sends in flight, want the consumer's 8", n)
	}
	release()
	e.sentOnceAndAcked(t, ids)
}

// gatedSender holds every job at its gate before the sender sees it.
type gatedSender struct {
	dispatch.Sender
	gate  <-chan struct{}
	taken *atomic.Int32 // jobs begun
}

func (g gatedSender) Send(ctx context.Context, job heraldtype.Job) sender.Result {
	g.taken.Add(1)
	<-g.gate
	return g.Sender.Send(ctx, job)
}

// Two processes share a lane: one is stuck (its provider hangs, say) with
// a backlog of bundles in the queue. It holds only its jobs' worth and two
// bundles more, so the other process sends the rest meanwhile: seven of
// ten bundles, where the stuck one used to hold eight of them.
func TestAStuckConsumerLeavesTheRestOfABacklogToAnother(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ids := e.notifyAll(t, 160)
	e.publishedBeforeConsumingBy(t, relayOpts{batch: 160}, ids, 10, "10 bundles of 16 (one claim)")
	gate, release := closedLater(t)
	stuck := gatedSender{Sender: e.sender(t), gate: gate, taken: new(atomic.Int32)}
	e.consumer(t, rabbitmq.ConsumerConfig{Name: "stuck", Sender: stuck, Concurrency: 8, Bundle: 16})
	e.waitFor(t, "the stuck consumer's 8 slots taken", func() bool { return stuck.taken.Load() == 8 })
	e.awaitConsumers(t, 1, e.topo.Queue(lane))
	if n := e.steadyReady(t, e.topo.Queue(lane)); n != 7 {
		t.Fatalf("%d bundles ready beside the stuck consumer, want 7", n)
	}
	e.consumer(t, rabbitmq.ConsumerConfig{Name: "other", Sender: e.sender(t), Concurrency: 8, Bundle: 16})
	e.waitFor(t, "the other consumer's 112 sends", func() bool { return e.sim.Total() == 112 })
	release()
	e.sentOnceAndAcked(t, ids)
}

// singleJobsFromBundles publishes 40 notifications a message each
// (relay_bundle: 1) and starts a consumer of 8 that assumes bundles of 16,
// with resubscribe as its Resubscribe hook and m as its metrics.
func singleJobsFromBundles(t *testing.T, m *metrics.Metrics, resubscribe func(queue string, prefetch int, kill func())) (*env, []string) {
	t.Helper()
	e := setup(t, options{})
	ids := e.notifyAll(t, 40)
	e.publishedBeforeConsumingBy(t, relayOpts{bundle: 1}, ids, 40, "a message a job")
	e.consumer(t, rabbitmq.ConsumerConfig{Sender: e.sender(t), Concurrency: 8, Bundle: 16, Metrics: m,
		Hooks: rabbitmq.ConsumerHooks{Resubscribe: resubscribe}})
	return e, ids
}

// Messages of one job (relay_bundle: 1 here; in production a lightly
// loaded lane, rows handed over at intake, retries, a split bundle's
// copies) bring a consumer that started from bundles back to its whole
// prefetch, each job sent once through every re-subscription.
func TestConsumerPrefetchGrowsBackForMessagesOfOneJob(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	steps := map[string][]int{} // queue → its prefetch at each re-subscription
	m := metrics.New(nil)
	prefetchGauge := func() float64 {
		return metricstest.Series(t, m, "herald_consumer_prefetch_messages", "lane", "queue")[string(lane)+"/lane"]
	}
	e, ids := singleJobsFromBundles(t, m, func(queue string, prefetch int, _ func()) {
		mu.Lock()
		defer mu.Unlock()
		steps[queue] = append(steps[queue], prefetch)
	})
	e.sentOnceAndAcked(t, ids)
	e.waitFor(t, "the lane consumer at its whole prefetch", func() bool { return e.prefetchOf(t, e.topo.Queue(lane)) == 8 })
	// The gauge is set once the new consumer started, a moment after the
	// broker lists it.
	e.waitFor(t, "herald_consumer_prefetch_messages of the lane queue at 8", func() bool { return prefetchGauge() == 8 })
	mu.Lock()
	defer mu.Unlock()
	if steps := steps[e.topo.Queue(lane)]; len(steps) == 0 || steps[len(steps)-1] != 8 || !slices.IsSorted(steps) {
		t.Fatalf("the lane consumer's prefetch went %v, want up from 3 to 8", steps)
	}
}

// A connection lost in the middle of a re-subscription (the old consumer
// cancelled, the new one not yet started) loses nothing and sends nothing
// twice: the session connects again, the broker delivers again what the
// lost channel held, and the sender's claim refuses what was sent.
func TestConsumerKilledWhileChangingItsPrefetchSendsEachJobOnce(t *testing.T) {
	t.Parallel()
	var kills atomic.Int32
	e, ids := singleJobsFromBundles(t, nil, func(_ string, _ int, kill func()) {
		if kills.Add(1) == 1 {
			kill()
		}
	})
	e.sentOnceAndAcked(t, ids)
	if n := kills.Load(); n < 2 {
		t.Fatalf("%d re-subscriptions, want the killed one and at least one after it", n)
	}
	e.waitFor(t, fmt.Sprintf("the lane consumer at its whole prefetch after the kill (%d re-subscriptions)", kills.Load()),
		func() bool { return e.prefetchOf(t, e.topo.Queue(lane)) == 8 })
}
