package rabbitmq_test

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
)

// declare declares topo on the test's vhost.
func (e *env) declare(t *testing.T, topo rabbitmq.Topology) error {
	t.Helper()
	_, closeConn, err := e.declared(t, topo)
	if err == nil {
		closeConn()
	}
	return err
}

// The README: one durable quorum queue per lane; every dead-lettering queue
// uses x-dead-letter-strategy at-least-once with x-overflow reject-publish; a
// lane queue parks a message delivered delivery_limit times; TTL queues of 1
// s, 10 s, 1 min, 10 min and 30 min plus retry.quick_delay and
// retry.slow_delay dead-letter back to the lane. Read back from the broker.
func TestQueuesAreQuorumAndDeadLetterAtLeastOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	// herald's topology from a config with every default, and from one
	// with its own sender delays (under another prefix, same vhost).
	defaults := app.Topology((&config.Config{}).WithDefaults())
	own := (&config.Config{Retry: config.Retry{QuickDelay: config.Duration(3 * time.Second), SlowDelay: config.Duration(7 * time.Minute)}}).WithDefaults()
	own.RabbitMQ.Prefix = "own"
	custom := app.Topology(own)
	for _, topo := range []rabbitmq.Topology{defaults, custom} {
		if err := e.declare(t, topo); err != nil {
			t.Fatal(err)
		}
	}
	qs := e.queues(t)

	for name, q := range qs {
		if q.Type != "quorum" || q.Args["x-queue-type"] != "quorum" {
			t.Errorf("queue %s is %q (x-queue-type %v), want quorum", name, q.Type, q.Args["x-queue-type"])
		}
		if _, dl := q.Args["x-dead-letter-exchange"]; dl &&
			(q.Args["x-dead-letter-strategy"] != "at-least-once" || q.Args["x-overflow"] != "reject-publish") {
			t.Errorf("queue %s dead-letters with strategy %v, overflow %v; want at-least-once, reject-publish",
				name, q.Args["x-dead-letter-strategy"], q.Args["x-overflow"])
		}
	}
	queues := 0
	for _, c := range []struct {
		topo rabbitmq.Topology
		ttls []time.Duration
	}{
		{defaults, []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute, 30 * time.Minute}},
		{custom, []time.Duration{time.Second, 3 * time.Second, 10 * time.Second, time.Minute, 7 * time.Minute, 10 * time.Minute, 30 * time.Minute}},
	} {
		queues += 1 + len(heraldtype.Lanes)*(2+len(c.ttls))
		if _, ok := qs[c.topo.ParkingQueue()]; !ok {
			t.Errorf("no parking queue %s", c.topo.ParkingQueue())
		}
		for _, l := range heraldtype.Lanes {
			q, ok := qs[c.topo.Queue(l)]
			if !ok {
				t.Fatalf("no lane queue %s in %v", c.topo.Queue(l), slices.Sorted(maps.Keys(qs)))
			}
			if q.Args["x-dead-letter-exchange"] != c.topo.ParkingExchange() || q.Args["x-dead-letter-routing-key"] != rabbitmq.ParkedKey ||
				q.Args["x-delivery-limit"] != float64(20) {
				t.Errorf("lane queue %s: %v; want dead-lettering to %s after 20 deliveries", c.topo.Queue(l), q.Args, c.topo.ParkingExchange())
			}
			if _, sac := q.Args["x-single-active-consumer"]; sac {
				t.Errorf("lane queue %s has single active consumer by default", c.topo.Queue(l))
			}
			if x, ok := qs[c.topo.ExpressQueue(l)]; !ok || !maps.Equal(x.Args, q.Args) {
				t.Errorf("express queue %s: %v (found %v); want the lane queue's arguments %v", c.topo.ExpressQueue(l), x.Args, ok, q.Args)
			}
			var ttls []time.Duration
			for _, d := range c.ttls {
				rq, ok := qs[c.topo.RetryQueue(l, d)]
				if !ok {
					continue
				}
				if rq.Args["x-dead-letter-exchange"] != c.topo.Exchange() || rq.Args["x-dead-letter-routing-key"] != string(l) {
					t.Errorf("retry queue %s does not dead-letter back to lane %s: %v", c.topo.RetryQueue(l, d), l, rq.Args)
				}
				if ttl, _ := rq.Args["x-message-ttl"].(float64); time.Duration(ttl)*time.Millisecond == d {
					ttls = append(ttls, d)
				}
			}
			if !slices.Equal(ttls, c.ttls) {
				t.Errorf("lane %s (prefix %s): retry queues with TTLs %v, want %v", l, c.topo.Prefix, ttls, c.ttls)
			}
		}
	}
	if len(qs) != queues {
		t.Errorf("%d queues, want %d: %v", len(qs), queues, slices.Sorted(maps.Keys(qs)))
	}
}

// A queue's arguments cannot change in place (README): declaring the lane
// queues with another delivery_limit or single_active_consumer is refused
// with PRECONDITION_FAILED, and declaring the same topology again is not.
func TestQueueArgumentsCannotChangeInPlace(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	topo := rabbitmq.Topology{}.WithDefaults()
	for _, c := range []struct {
		name  string
		topo  rabbitmq.Topology
		error bool
	}{
		{"Same", topo, false},
		{"SingleActiveConsumer", rabbitmq.Topology{SingleActiveConsumer: true}, true},
		{"DeliveryLimit", rabbitmq.Topology{DeliveryLimit: 5}, true},
	} {
		if err := e.declare(t, topo); err != nil {
			t.Fatal(err)
		}
		err := e.declare(t, c.topo)
		var amqpErr *amqp.Error
		switch {
		case !c.error && err != nil:
			t.Errorf("%s: declaring the same topology again: %v", c.name, err)
		case c.error && (!errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed):
			t.Errorf("%s: declaring changed arguments: %v, want PRECONDITION_FAILED", c.name, err)
		}
	}
}

// single_active_consumer sets x-single-active-consumer on the lane queues,
// and of two consumers on a lane queue the broker then feeds one.
func TestSingleActiveConsumerFeedsOneConsumerAtATime(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	cases := []struct {
		sac    bool
		topo   rabbitmq.Topology
		active int
	}{
		{false, rabbitmq.Topology{Prefix: "sac-off"}.WithDefaults(), 2},
		{true, rabbitmq.Topology{Prefix: "sac-on", SingleActiveConsumer: true}.WithDefaults(), 1},
	}
	var queues []string
	for _, c := range cases {
		for _, name := range []string{"a", "b"} {
			e.consumer(t, rabbitmq.ConsumerConfig{Name: c.topo.Prefix + "-" + name, Topology: c.topo, Sender: e.sender(t)})
		}
		queues = append(queues, c.topo.Queue(lane))
	}
	cs := e.awaitConsumers(t, 2, queues...)
	qs := e.queues(t)
	for _, c := range cases {
		q := c.topo.Queue(lane)
		n, active := 0, 0
		for _, ci := range cs {
			if ci.Queue == q {
				n++
				if ci.Active {
					active++
				}
			}
		}
		if n != 2 || active != c.active {
			t.Errorf("%s: %d of %d consumers active, want %d of 2: %+v", q, active, n, c.active, cs)
		}
		if got := qs[q].Args["x-single-active-consumer"]; (got == true) != c.sac {
			t.Errorf("%s: x-single-active-consumer %v, want %v", q, got, c.sac)
		}
	}
}

// Each lane's consumer holds rabbitmq.prefetch.<lane> jobs unacked; by
// default, the lane's concurrency. Of the lane queue's, less the lane's
// reserve: those slots are kept for the express queue, whose consumer takes
// the whole prefetch. The broker's prefetch counts messages: wired as app
// wires it, a consumer starts from relay_bundle's bundles (prefetch.go),
// its jobs' messages and two more, at most its jobs.
func TestPrefetchIsPerLaneAndDefaultsToTheLaneConcurrency(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	cfg := (&config.Config{
		Lanes:    map[string]config.Lane{"transactional": {Concurrency: 3}, "alert": {Concurrency: 2}},
		RabbitMQ: config.RabbitMQ{Prefetch: map[string]int{"alert": 7}},
	}).WithDefaults()
	want := map[string]int{}
	for _, l := range []heraldtype.Lane{heraldtype.LaneTransactional, heraldtype.LaneAlert} {
		// As app wires it.
		e.consumer(t, rabbitmq.ConsumerConfig{Lane: l, Sender: e.sender(t), Concurrency: cfg.LaneConcurrency(l), Prefetch: cfg.LanePrefetch(l),
			Bundle: cfg.RabbitMQ.RelayBundle, Reserve: cfg.LaneReserve(l)})
		// 3 jobs: at most 3 messages; 7 jobs in bundles of 16: 1 and 2 more.
		want[e.topo.Queue(l)] = 3
		want[e.topo.ExpressQueue(l)] = 3
	}
	// A consumer given no prefetch takes its concurrency, less its reserve
	// on the lane queue; given no bundle size, in messages of one job.
	e.consumer(t, rabbitmq.ConsumerConfig{Lane: heraldtype.LaneMarketing, Sender: e.sender(t), Concurrency: 5, Reserve: 2})
	want[e.topo.Queue(heraldtype.LaneMarketing)] = 3
	want[e.topo.ExpressQueue(heraldtype.LaneMarketing)] = 5

	got := map[string]int{}
	for _, c := range e.awaitConsumers(t, 1, slices.Collect(maps.Keys(want))...) {
		got[c.Queue] = c.Prefetch
	}
	if !maps.Equal(got, want) {
		t.Fatalf("prefetch per queue %v, want %v", got, want)
	}
}
