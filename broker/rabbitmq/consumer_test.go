package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sender"
)

// senderFunc is a dispatch.Sender that answers every job with f.
type senderFunc func(ctx context.Context, job heraldtype.Job) sender.Result

func (f senderFunc) Send(ctx context.Context, job heraldtype.Job) sender.Result { return f(ctx, job) }

// A Backoff verdict (the store was unavailable, nothing decided) sends a
// copy to the retry queue for the dispatcher's backoff, with the backoff
// counted, and acks the original.
func TestBackoffVerdictGoesToTheRetryQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	e.topo = rabbitmq.Topology{}.WithDefaults() // herald's tiers: the first backoff (1 min) waits in the 1 min queue
	tier := e.topo.RetryTier(dispatch.Backoff(1))
	if tier != time.Minute {
		t.Fatalf("the first backoff waits in the %s tier, want 1m", tier)
	}
	_, stop := e.startConsumer(t, senderFunc(func(context.Context, heraldtype.Job) sender.Result {
		return sender.Result{Verdict: sender.Backoff, Err: errors.New("store unavailable"), Reason: heraldtype.ReasonStoreUnavailable}
	}), rabbitmq.ConsumerHooks{})
	job := heraldtype.Job{MessageID: "m-backoff.webhook", NotificationID: "m-backoff", Tenant: "t1", Kind: "pay",
		Lane: lane, Channel: heraldtype.ChannelWebhook}
	msg, err := rabbitmq.JobMessage(job, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !e.publish(t, e.topo.Exchange(), string(lane), msg) {
		t.Fatal("publish: nacked")
	}
	e.waitFor(t, "the backoff", func() bool { return len(e.actions(job.MessageID)) > 0 })
	stop()
	if a := e.actions(job.MessageID); !slices.Equal(a, []string{"backoff"}) {
		t.Fatalf("actions %v, want [backoff]", a)
	}
	d, ok, err := e.channel(t).Get(e.topo.RetryQueue(lane, tier), false)
	if err != nil || !ok {
		t.Fatalf("no copy in %s (%v)", e.topo.RetryQueue(lane, tier), err)
	}
	if d.MessageId != job.MessageID || d.Headers[rabbitmq.HeaderBackoffs] != int64(1) || string(d.Body) != string(msg.Body) {
		t.Fatalf("retry copy: message id %q, headers %v, body %s", d.MessageId, d.Headers, d.Body)
	}
	if n := e.readyIn(t, e.topo.Queue(lane)); n != 0 {
		t.Fatalf("%d messages back in the lane queue, want 0 (the original is acked)", n)
	}
}

// Shutdown that comes before the sender's claim gives the message back to
// its queue (nack with requeue), not to a retry queue; the next consumer
// sends it once.
func TestShutdownBeforeAClaimNacksTheMessageBackToItsQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	inSend := make(chan struct{}, 1)
	_, stopConsumer := e.startConsumer(t, e.senderWith(t, sender.Hooks{AfterPeek: func(ctx context.Context, _ heraldtype.Job) {
		select {
		case inSend <- struct{}{}:
		default:
		}
		<-ctx.Done() // SIGTERM comes here, before the claim
	}}), rabbitmq.ConsumerHooks{})
	e.startRelay(t, relayOpts{})
	id := e.notify(t, "pay")
	testenv.Recv(t, inSend, "the sender to take the message")
	stopConsumer()
	if a := e.actions(id); !slices.Equal(a, []string{"requeued"}) {
		t.Fatalf("actions %v, want [requeued]", a)
	}
	if d := e.delivery(t, id); d.State != "" {
		t.Fatalf("a delivery was written: %+v", d)
	}
	// The nack reaches the queue on its own: wait for it there.
	e.waitFor(t, "the message back in the lane queue", func() bool { return e.readyIn(t, e.topo.Queue(lane)) == 1 })
	for _, d := range e.topo.RetryDelays {
		if n := e.readyIn(t, e.topo.RetryQueue(lane, d)); n != 0 {
			t.Fatalf("%d messages in %s, want none", n, e.topo.RetryQueue(lane, d))
		}
	}
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	e.waitFor(t, "the requeued message sent", func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
	e.waitFor(t, "the requeued message acked", func() bool { return len(e.actions(id)) == 2 })
	if a := e.actions(id); a[1] != "acked" {
		t.Fatalf("actions %v, want [requeued acked]", a)
	}
	if n := e.sim.CallCount(id); n != 1 {
		t.Fatalf("provider called %d times, want 1", n)
	}
}

// reserveConsumer runs a consumer of three slots, one of them reserved for
// the express queue (a prefetch of six), whose sender says on started
// which job it began and holds tenant "big"'s jobs until release closes.
func (e *env) reserveConsumer(t *testing.T) (started chan string, release chan struct{}) {
	t.Helper()
	started, release = make(chan string, 8), make(chan struct{})
	e.consumer(t, rabbitmq.ConsumerConfig{Lane: lane, Topology: e.topo, Concurrency: 3, Reserve: 1, Prefetch: 6,
		Sender: senderFunc(func(ctx context.Context, job heraldtype.Job) sender.Result {
			started <- job.MessageID
			if job.Tenant == "big" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return sender.Result{Verdict: sender.Done}
		})})
	return started, release
}

// With a reserve, the lane queue's messages take at most Concurrency −
// Reserve of the consumer's slots: while they fill those, a message in the
// express queue (a tenant without a backlog: dispatch.ExpressQueue) is
// sent at once, and the lane queue's next message waits for a lane slot
// although a worker is free and the broker has delivered it (a prefetch
// above the concurrency: the slots, not the prefetch, hold it back).
func TestConsumerKeepsItsReserveForTheExpressQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	started, release := e.reserveConsumer(t)
	publish := func(id, tenant string, q dispatch.Queue) {
		t.Helper()
		msg, err := rabbitmq.JobMessage(heraldtype.Job{MessageID: id, NotificationID: id, Tenant: tenant, Kind: "pay",
			Lane: lane, Channel: heraldtype.ChannelWebhook}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !e.publish(t, e.topo.Exchange(), e.topo.Key(lane, q), msg) {
			t.Fatalf("publish %s: nacked", id)
		}
	}
	for i := range 4 {
		publish(fmt.Sprintf("big-%d", i), "big", dispatch.LaneQueue)
	}
	e.wantReserveKept(t, started, release, []string{"big-0", "big-1", "big-2", "big-3"}, func() []string {
		publish("small-0", "small", dispatch.ExpressQueue)
		return []string{"small-0"}
	})
}

// wantReserveKept follows a reserveConsumer whose lane queue holds the
// four jobs of lane: two start and hold both lane slots and no third
// starts; the express jobs publishExpress then publishes start in the
// reserved slot meanwhile; once release closes, the lane's other two
// start; and every job is acked once.
func (e *env) wantReserveKept(t *testing.T, started chan string, release chan struct{}, lane []string, publishExpress func() []string) {
	t.Helper()
	seen := map[string]bool{}
	for range 2 {
		seen[testenv.Recv(t, started, "a lane job to start")] = true
	}
	select {
	case id := <-started:
		t.Fatalf("%s started while two lane jobs held both lane slots (seen %v)", id, seen)
	case <-time.After(200 * time.Millisecond):
	}
	express := publishExpress()
	for range express {
		if id := testenv.Recv(t, started, "an express job to start"); !slices.Contains(express, id) {
			t.Fatalf("%s started, want the express jobs %v in the reserved slot", id, express)
		}
	}
	close(release)
	for range 2 {
		seen[testenv.Recv(t, started, "the waiting lane jobs to start")] = true
	}
	if len(seen) != 4 {
		t.Fatalf("started %v, want the lane's four jobs %v", seen, lane)
	}
	e.waitFor(t, "every job acked once", func() bool {
		for _, id := range append(slices.Clone(lane), express...) {
			if !slices.Equal(e.actions(id), []string{rabbitmq.ActionAcked}) {
				return false
			}
		}
		return true
	})
}
