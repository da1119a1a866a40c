package rabbitmq_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
)

// notifyAll creates n notifications and returns their message ids.
func (e *env) notifyAll(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.notify(t, "pay")
	}
	return ids
}

// publishedBeforeConsuming starts a relay with no consumer, waits until it
// has published every one of ids, and fails the test unless the lane's
// queue then holds want messages (what is, said why).
func (e *env) publishedBeforeConsuming(t *testing.T, ids []string, want int, what string) {
	t.Helper()
	e.publishedBeforeConsumingBy(t, relayOpts{}, ids, want, what)
}

// publishedBeforeConsumingBy is publishedBeforeConsuming with a relay
// started with o.
func (e *env) publishedBeforeConsumingBy(t *testing.T, o relayOpts, ids []string, want int, what string) {
	t.Helper()
	e.startRelay(t, o)
	for _, id := range ids {
		e.waitFor(t, "PUBLISHED", func() bool { return e.outboxState(t, id) == heraldtype.OutboxPublished })
	}
	if n := e.steadyReady(t, e.topo.Queue(lane)); n != want {
		t.Fatalf("the queue holds %d messages for %d rows, want %s", n, len(ids), what)
	}
}

// steadyReady is the count of messages ready in queue once it has held
// for 200 ms (a quorum queue counts a message a moment after confirming
// it), and not 0.
func (e *env) steadyReady(t *testing.T, queue string) int {
	t.Helper()
	ch := testmq.Channel(t, e.url)
	var q amqp.Queue
	var err error
	last, since := -1, time.Now()
	for deadline := time.Now().Add(testenv.Patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if q.Messages != last {
			last, since = q.Messages, time.Now()
		} else if q.Messages > 0 && time.Since(since) >= 200*time.Millisecond {
			break
		}
	}
	return q.Messages
}

// A claim's rows go out sixteen to a message; the consumer sends each job
// once and acks each bundle once all of its jobs are done.
func TestRelayBundlesAClaimAndTheConsumerSendsEachJobOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ids := e.notifyAll(t, 40)
	e.publishedBeforeConsuming(t, ids, 3, "3 bundles (16, 16, 8)")
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	for _, id := range ids {
		e.waitFor(t, "delivery of "+id, func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
		e.waitFor(t, "the ack of "+id, func() bool { return len(e.actions(id)) == 1 })
		if a := e.actions(id); a[0] != rabbitmq.ActionAcked {
			t.Fatalf("%s: actions %v", id, a)
		}
		if n := e.sim.CallCount(id); n != 1 {
			t.Fatalf("%s called %d times", id, n)
		}
	}
}

// The consumer dies holding a bundle, some of its jobs sent and some not:
// the broker delivers the bundle again, the next consumer splits it into
// a message a job, and each job is sent once in all.
func TestRedeliveredBundleIsSplitAndEachJobSentOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ids := e.notifyAll(t, 16)
	e.publishedBeforeConsuming(t, ids, 1, "one bundle")
	var kills atomic.Int32
	m := metrics.New(nil)
	e.consumer(t, rabbitmq.ConsumerConfig{Sender: e.sender(t), Concurrency: 4, Metrics: m, Hooks: rabbitmq.ConsumerHooks{
		BeforeAck: func(job heraldtype.Job, res sender.Result, kill func()) {
			if kills.Add(1) == 3 {
				kill() // three jobs decided, the rest of the bundle in flight or waiting
			}
		},
	}})
	e.sentOnceAndAcked(t, ids)
	for _, id := range ids {
		if s := e.delivery(t, id).State; s != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("%s: delivery %s, want %s", id, s, heraldtype.DeliveryProviderAccepted)
		}
		// The first delivery was never acked: what was acked is a copy. If
		// every job of the bundle was decided before the connection's close
		// had ended (the loop hands a bundle's jobs on until it sees the
		// close), the bundle's ack was tried and lost first.
		a := e.actions(id)
		if acked := slices.DeleteFunc(slices.Clone(a), func(s string) bool { return s == rabbitmq.ActionAckLost }); !slices.Equal(acked, []string{rabbitmq.ActionAcked}) {
			t.Errorf("%s: actions %v, want one ack of its split copy (after a lost one, if any)", id, a)
		}
	}
	if n := metricstest.Series(t, m, "herald_dispatch_total", "result")[rabbitmq.ActionSplit]; n != 1 {
		t.Errorf("bundles split: %v, want 1", n)
	}
}

// One job of a bundle is not sent: its copy alone goes through the retry
// queue; the bundle is acked with the other jobs sent once.
func TestOneJobOfABundleRetriesAlone(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	ids := e.notifyAll(t, 16)
	failing := ids[5]
	var failed atomic.Bool
	e.sim.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
		if m.MessageID == failing && failed.CompareAndSwap(false, true) {
			return provider.NotSentOutcome("CONNECTION_REFUSED", 0)
		}
		return provider.Outcome{}
	})
	e.publishedBeforeConsuming(t, ids, 1, "one bundle")
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	e.waitFor(t, "sent after a retry", func() bool { return e.delivery(t, failing).State == heraldtype.DeliveryProviderAccepted })
	e.waitFor(t, "the copy acked", func() bool { return len(e.actions(failing)) == 2 })
	// The bundle's ack waits for its other jobs, so the copy back from the
	// retry queue may be acked first: the two in either order.
	if a := slices.Sorted(slices.Values(e.actions(failing))); a[0] != rabbitmq.ActionAcked || a[1] != rabbitmq.ActionRetryQueued {
		t.Fatalf("the failing job's actions %v, want retry_queued (its bundle) and acked (its copy)", e.actions(failing))
	}
	for _, id := range ids {
		e.waitFor(t, "delivery of "+id, func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
		want := 1
		if id == failing {
			want = 2
		}
		if n := e.sim.CallCount(id); n != want {
			t.Errorf("%s called %d times, want %d", id, n, want)
		}
		if id != failing {
			if a := e.actions(id); len(a) != 1 || a[0] != rabbitmq.ActionAcked {
				t.Errorf("%s: actions %v, want [acked]", id, a)
			}
		}
	}
}

// A lost confirm of a bundle is lost for all of its jobs: the relay offers
// every one again, and each is sent once.
func TestBundleWhoseConfirmIsLostIsOfferedAgainWhole(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	e := setup(t, options{clk: clk})
	ids := e.notifyAll(t, 10)
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	failed := make(chan int, 1)
	_, stop := e.startRelay(t, relayOpts{
		// The confirm naming ids[3] is lost (a bundle's names each of its
		// jobs), so the wait for the bundle's times out.
		timeout: 300 * time.Millisecond,
		confirmHooks: rabbitmq.ConfirmHooks{OnConfirm: func(messageID string, ack bool) bool {
			return messageID != ids[3]
		}},
		hooks: dispatch.RelayHooks{AfterSettle: func(published, n int) {
			if n > 0 {
				select {
				case failed <- n:
				default:
				}
			}
		}},
	})
	if n := testenv.Recv(t, failed, "the publish to time out"); n != len(ids) {
		t.Fatalf("%d rows failed, want all %d of the bundle", n, len(ids))
	}
	stop()
	for _, id := range ids {
		if s := e.outboxState(t, id); s != heraldtype.OutboxPending {
			t.Fatalf("%s: outbox %s after the timeout, want PENDING", id, s)
		}
		e.waitFor(t, "first copy sent", func() bool { return len(e.actions(id)) == 1 })
	}
	clk.Advance(dispatch.Backoff(1) + time.Second)
	e.startRelay(t, relayOpts{})
	for _, id := range ids {
		e.waitFor(t, "second copy settled", func() bool { return len(e.actions(id)) == 2 })
		e.waitFor(t, "PUBLISHED", func() bool { return e.outboxState(t, id) == heraldtype.OutboxPublished })
		if n := e.sim.CallCount(id); n != 1 {
			t.Fatalf("%s called %d times, want 1", id, n)
		}
	}
}

// A lane bundle's jobs each take a lane slot, so the express queue keeps
// its reserve: with two lane slots of three, two jobs of a bundle of four
// start and two wait, and an express bundle's jobs start meanwhile.
func TestBundleJobsTakeLaneSlotsAndLeaveTheReserve(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	started, release := e.reserveConsumer(t)
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: e.url, Name: "test-bundles", Topology: e.topo, Logger: quiet})
	testenv.Start(t, pub.Run)
	waitConnected(t, pub)
	publish := func(tenant string, n int, q dispatch.Queue) []string {
		t.Helper()
		var jobs []heraldtype.Job
		var ids []string
		for i := range n {
			id := fmt.Sprintf("%s-%d", tenant, i)
			ids = append(ids, id)
			jobs = append(jobs, heraldtype.Job{MessageID: id, NotificationID: id, Tenant: tenant, Kind: "pay",
				Lane: lane, Channel: heraldtype.ChannelWebhook})
		}
		for i, err := range pub.Publish(e.ctx, lane, q, jobs).Wait() {
			if err != nil {
				t.Fatalf("publish %s: %v", ids[i], err)
			}
		}
		return ids
	}
	big := publish("big", 4, dispatch.LaneQueue)
	e.wantReserveKept(t, started, release, big, func() []string { return publish("small", 2, dispatch.ExpressQueue) })
}
