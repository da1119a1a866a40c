package rabbitmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

const lane = heraldtype.LaneTransactional

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is one test's world: a fresh vhost, a SQLite store, the simulated
// provider and the one sender.
type env struct {
	url   string
	store *sqlite.Store
	clk   clock.Clock
	sim   *sim.Sim
	reg   *provider.Registry
	topo  rabbitmq.Topology
	ctx   context.Context

	mu      sync.Mutex
	settled map[string][]string // message id → consumer actions, in order
	changed chan struct{}
}

type options struct {
	clk           clock.Clock
	deliveryLimit int
}

func setup(t *testing.T, o options) *env {
	t.Helper()
	url := testmq.VHost(t)
	if o.clk == nil {
		o.clk = clock.Real{}
	}
	s, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{Clock: o.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// The test's own calls (store, parking) fail rather than hang.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	e := &env{
		url: url, store: s, clk: o.clk, sim: sim.New(sim.Config{}), reg: provider.NewRegistry(), ctx: ctx,
		topo: rabbitmq.Topology{
			RetryDelays:   []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Minute},
			DeliveryLimit: o.deliveryLimit,
		}.WithDefaults(),
		settled: map[string][]string{}, changed: make(chan struct{}, 1),
	}
	e.reg.Register(heraldtype.ChannelWebhook, "sim", e.sim)
	return e
}

func (e *env) sender(t *testing.T, kinds ...string) *sender.Sender {
	t.Helper()
	return e.senderWith(t, sender.Hooks{}, kinds...)
}

// senderWith is the one sender with hooks, serving kinds (default "pay").
func (e *env) senderWith(t *testing.T, hooks sender.Hooks, kinds ...string) *sender.Sender {
	t.Helper()
	if len(kinds) == 0 {
		kinds = []string{"pay"}
	}
	var ks []config.Kind
	for _, k := range kinds {
		ks = append(ks, config.Kind{Name: k, Category: "transactional", Channels: []string{"webhook"},
			Templates: map[string]config.Template{"webhook": {Title: "t", Body: "b"}}})
	}
	cat, err := catalog.New(ks)
	if err != nil {
		t.Fatal(err)
	}
	return sender.New(sender.Config{
		Store: e.store, Providers: e.reg, Catalog: cat, Clock: e.clk, Owner: "test", Logger: quiet, Hooks: hooks,
		Retry: sender.RetryPolicy{Quick: 2, QuickDelay: 100 * time.Millisecond, Slow: 1, SlowDelay: time.Second},
	})
}

// notify creates a notification of kind and returns its message id.
func (e *env) notify(t *testing.T, kind string) string {
	t.Helper()
	id := ids.New("ntf", e.clk.Now())
	_, err := e.store.NotificationCreate(e.ctx, store.NotificationCreateParams{
		Tenant: "t1", ID: id, Recipient: "r1", EventID: id, Kind: kind, Lane: lane,
		Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
	})
	if err != nil {
		t.Fatal(err)
	}
	return store.MessageID(id, heraldtype.ChannelWebhook)
}

type relayOpts struct {
	hooks        dispatch.RelayHooks
	confirmHooks rabbitmq.ConfirmHooks
	// timeout is the confirm timeout. Defaults to testenv.Patience, as
	// wherever the timeout is not what a test is about.
	timeout time.Duration
	// maxAttempts is the relay's MaxAttempts. Defaults to 5.
	maxAttempts int
	alerts      alert.Sink
	// waits, when set, receives what each batch's wait for confirms returned.
	waits chan<- []error
	// window, when set, is the relay's publish window, kept with the
	// publisher's Backlog.
	window int
	// bundle is the publisher's Bundle. Defaults to its default (16).
	bundle int
	// batch is the relay's BatchSize. Defaults to 50.
	batch int
}

// startRelay runs a publisher and a relay for the lane.
func (e *env) startRelay(t *testing.T, o relayOpts) (*rabbitmq.Publisher, func()) {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = testenv.Patience
	}
	if o.maxAttempts == 0 {
		o.maxAttempts = 5
	}
	if o.batch == 0 {
		o.batch = 50
	}
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{
		URL: e.url, Name: "test-relay", Topology: e.topo, ConfirmTimeout: o.timeout, Logger: quiet, Hooks: o.confirmHooks,
		Bundle: o.bundle,
	})
	stopPub := testenv.Start(t, pub.Run)
	var p dispatch.Publisher = pub
	if o.waits != nil {
		p = recordingPublisher{pub, o.waits}
	}
	relay := dispatch.NewRelay(dispatch.RelayConfig{
		Lane: lane, Store: e.store, Wake: e.store.Wakeups().C(lane), Publisher: p, Owner: "relay",
		BatchSize: o.batch, Lease: time.Minute, PollInterval: 20 * time.Millisecond, MaxAttempts: o.maxAttempts,
		Logger: quiet, Alerts: o.alerts, Hooks: o.hooks,
		Window: o.window, Backlog: func(ctx context.Context) (int, error) { return pub.Backlog(ctx, lane) },
	})
	stopRelay := testenv.Start(t, relay.Run)
	return pub, func() { stopRelay(); stopPub() }
}

// recordingPublisher hands what each wait for confirms returned to waits.
type recordingPublisher struct {
	*rabbitmq.Publisher
	waits chan<- []error
}

func (p recordingPublisher) Publish(ctx context.Context, l heraldtype.Lane, q dispatch.Queue, jobs []heraldtype.Job) dispatch.Confirms {
	return recordingConfirms{p.Publisher.Publish(ctx, l, q, jobs), p.waits}
}

type recordingConfirms struct {
	dispatch.Confirms
	waits chan<- []error
}

func (c recordingConfirms) Wait() []error {
	errs := c.Confirms.Wait()
	c.waits <- errs
	return errs
}

// waitConnected waits until pub is connected (and has declared the topology).
func waitConnected(t *testing.T, pub *rabbitmq.Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	if err := pub.Ready(ctx); err != nil {
		t.Fatalf("publisher not connected after %s: %v", testenv.Patience, err)
	}
}

// startConsumer runs a lane consumer with snd; every settle is recorded.
func (e *env) startConsumer(t *testing.T, snd dispatch.Sender, hooks rabbitmq.ConsumerHooks) (*rabbitmq.Consumer, func()) {
	t.Helper()
	return e.consumer(t, rabbitmq.ConsumerConfig{Sender: snd, Concurrency: 8, Hooks: hooks})
}

// consumer runs a consumer configured by cfg on the test's vhost and
// topology (lane defaults to the test's lane); every settle is recorded.
func (e *env) consumer(t *testing.T, cfg rabbitmq.ConsumerConfig) (*rabbitmq.Consumer, func()) {
	t.Helper()
	hooks := cfg.Hooks
	after := hooks.AfterSettle
	hooks.AfterSettle = func(job heraldtype.Job, res sender.Result, action string) {
		e.mu.Lock()
		e.settled[job.MessageID] = append(e.settled[job.MessageID], action)
		e.mu.Unlock()
		select {
		case e.changed <- struct{}{}:
		default:
		}
		if after != nil {
			after(job, res, action)
		}
	}
	cfg.URL, cfg.ConfirmTimeout, cfg.Logger, cfg.Hooks = e.url, testenv.Patience, quiet, hooks
	if cfg.Topology.Prefix == "" {
		cfg.Topology = e.topo
	}
	if cfg.Lane == "" {
		cfg.Lane = lane
	}
	if cfg.Name == "" {
		cfg.Name = "test-consumer-" + string(cfg.Lane)
	}
	c := rabbitmq.NewConsumer(cfg)
	return c, testenv.Start(t, c.Run)
}

func (e *env) actions(id string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.settled[id]...)
}

// waitFor blocks until cond holds, re-checking it after every consumer
// settle (and every 50 ms for state the consumer does not announce).
func (e *env) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(90 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-e.changed:
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (e *env) delivery(t *testing.T, id string) store.Delivery {
	t.Helper()
	d, err := e.store.DeliveryGet(e.ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return d
}

func (e *env) outboxState(t *testing.T, messageID string) heraldtype.OutboxState {
	t.Helper()
	return e.view(t, messageID).OutboxState
}

// view is the notification's entry for messageID: its outbox row and delivery.
func (e *env) view(t *testing.T, messageID string) store.DeliveryView {
	t.Helper()
	nid := messageID[:len(messageID)-len(".webhook")]
	v, err := e.store.NotificationGet(e.ctx, "t1", nid)
	if err != nil {
		t.Fatal(err)
	}
	return v.Deliveries[0]
}

func TestRelayPublishesAndConsumerSendsEachOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	e.startRelay(t, relayOpts{})
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	var idsSent []string
	for range 120 {
		idsSent = append(idsSent, e.notify(t, "pay"))
	}
	for _, id := range idsSent {
		e.waitFor(t, "delivery of "+id, func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
		if n := e.sim.CallCount(id); n != 1 {
			t.Fatalf("%s called %d times", id, n)
		}
		e.waitFor(t, "PUBLISHED", func() bool { return e.outboxState(t, id) == heraldtype.OutboxPublished })
	}
	if d := e.sim.Duplicates(); len(d) > 0 {
		t.Fatalf("duplicates: %v", d)
	}
}

// With a publish window the relay fills the lane's queue to the window and
// leaves the rest in the outbox (the depth is read from the broker); a
// consumer that starts later drains the queue and the relay tops it up
// until every message was sent once. The broker counts a message a moment
// after it confirms it, so on a loaded broker the relay may read a depth
// that lags and publish a little past the window: the test holds it to
// twice the window, with the backlog ten times the window.
func TestRelayPublishWindowHoldsTheRestInTheOutbox(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	const window, n = 10, 100
	pub, _ := e.startRelay(t, relayOpts{window: window})
	var sent []string
	for range n {
		sent = append(sent, e.notify(t, "pay"))
	}
	e.waitFor(t, "the queue filled to the window", func() bool {
		d, err := pub.Backlog(e.ctx, lane)
		return err == nil && d >= window
	})
	published := func() int {
		p := 0
		for _, id := range sent {
			if s := e.outboxState(t, id); s == heraldtype.OutboxPublished || s == heraldtype.OutboxPublishing {
				p++
			}
		}
		return p
	}
	// The relay has stopped: what it published stays put with no consumer.
	first := published()
	e.waitFor(t, "the relay to stop publishing", func() bool {
		now := published()
		defer func() { first = now }()
		return now == first
	})
	if p := published(); p < window || p > 2*window {
		t.Fatalf("%d of %d rows published with no consumer, want the window of %d (at most twice it)", p, n, window)
	}
	// The depth is read again for a few seconds: a loaded broker's passive
	// declare once answered 0 right after answering 10 (a CI run, while
	// another vhost was being deleted). Nothing consumes, so a queue that
	// really held more than twice the window would hold it throughout.
	var d int
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if d, err = pub.Backlog(e.ctx, lane); err == nil && d >= window && d <= 2*window {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue holds %d (%v), want the window of %d (at most twice it)", d, err, window)
		}
	}
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	for _, id := range sent {
		e.waitFor(t, "delivery of "+id, func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
		if c := e.sim.CallCount(id); c != 1 {
			t.Fatalf("%s called %d times", id, c)
		}
	}
}

func TestRelayKilledAfterConfirmBeforeMarkRepublishesAndSecondCopyIsAckedWithoutACall(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	e := setup(t, options{clk: clk})
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	id := e.notify(t, "pay")

	killed := make(chan []store.Claimed, 1)
	_, stop := e.startRelay(t, relayOpts{hooks: dispatch.RelayHooks{BeforeMark: func(rows []store.Claimed) bool {
		select {
		case killed <- rows:
		default:
		}
		return false // dies here: confirmed, not marked
	}}})
	rows := testenv.Recv(t, killed, "the relay to reach the mark")
	stop()
	if len(rows) != 1 || rows[0].MessageID != id {
		t.Fatalf("confirmed rows %+v", rows)
	}
	if s := e.outboxState(t, id); s != heraldtype.OutboxPublishing {
		t.Fatalf("outbox %s, want PUBLISHING", s)
	}
	e.waitFor(t, "first copy sent", func() bool { return len(e.actions(id)) == 1 })

	// The lease runs out; the sweep returns the row; a new relay publishes it again.
	clk.Advance(time.Minute + time.Second)
	if n, err := e.store.OutboxReclaimExpired(e.ctx); err != nil || n != 1 {
		t.Fatalf("reclaimed %d (%v)", n, err)
	}
	e.startRelay(t, relayOpts{})
	e.waitFor(t, "second copy settled", func() bool { return len(e.actions(id)) == 2 })
	e.waitFor(t, "PUBLISHED", func() bool { return e.outboxState(t, id) == heraldtype.OutboxPublished })
	if a := e.actions(id); a[1] != "acked" {
		t.Fatalf("second copy: %v", a)
	}
	if n := e.sim.CallCount(id); n != 1 {
		t.Fatalf("provider called %d times, want 1", n)
	}
}

func TestConsumerKilledAfterCallBeforeAckIsRedeliveredWithoutASecondCall(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	var kills atomic.Int32
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{BeforeAck: func(job heraldtype.Job, res sender.Result, kill func()) {
		if kills.Add(1) == 1 {
			kill() // the process dies after the provider call and the record, before the ack
		}
	}})
	e.startRelay(t, relayOpts{})
	id := e.notify(t, "pay")
	e.waitFor(t, "redelivery settled", func() bool { return len(e.actions(id)) == 2 })
	if a := e.actions(id); a[0] != "ack_lost" || a[1] != "acked" {
		t.Fatalf("actions %v, want [ack_lost acked]", a)
	}
	if n := e.sim.CallCount(id); n != 1 {
		t.Fatalf("provider called %d times, want 1", n)
	}
	if d := e.delivery(t, id); d.State != heraldtype.DeliveryProviderAccepted || d.Attempts != 1 {
		t.Fatalf("delivery %+v", d)
	}
}

func TestBrokerConnectionsClosedMidRunRecoverWithNothingLostAndNoDuplicate(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	var calls atomic.Int32
	midway := make(chan struct{})
	e.sim.OnCall(func(context.Context, provider.Message) provider.Outcome {
		if calls.Add(1) == 40 {
			close(midway)
		}
		return provider.Outcome{}
	})
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	pub, _ := e.startRelay(t, relayOpts{})
	var all []string
	for range 150 {
		all = append(all, e.notify(t, "pay"))
	}
	testenv.Recv(t, midway, "the 40th provider call")
	testmq.CloseConnections(t, e.url) // every connection of this vhost: relay and consumer
	// Accepted while the broker was away: the relay must publish these after it reconnects.
	for range 50 {
		all = append(all, e.notify(t, "pay"))
	}
	for _, id := range all {
		e.waitFor(t, "delivery of "+id, func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
	}
	if d := e.sim.Duplicates(); len(d) > 0 {
		t.Fatalf("provider called twice for %v", d)
	}
	if got := e.sim.Total(); got != len(all) {
		t.Fatalf("%d provider calls for %d messages", got, len(all))
	}
	waitConnected(t, pub)
}

func TestConfirmTimeoutWithMessageInQueueGivesTwoCopiesAndOneCall(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	e := setup(t, options{clk: clk})
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	id := e.notify(t, "pay")
	retried := make(chan struct{}, 1)
	_, stop := e.startRelay(t, relayOpts{
		// The broker has the message and acks it; every ack is lost on the
		// way, so this relay's wait times out however fast or slow the
		// machine is. The timeout is what is under test: it may be short.
		timeout: 300 * time.Millisecond,
		confirmHooks: rabbitmq.ConfirmHooks{OnConfirm: func(messageID string, ack bool) bool {
			return messageID != id
		}},
		hooks: dispatch.RelayHooks{AfterSettle: func(published, failed int) {
			if failed > 0 {
				select {
				case retried <- struct{}{}:
				default:
				}
			}
		}},
	})
	testenv.Recv(t, retried, "the publish to time out")
	stop()
	if s := e.outboxState(t, id); s != heraldtype.OutboxPending {
		t.Fatalf("outbox %s after the timeout, want PENDING", s)
	}
	e.waitFor(t, "first copy sent", func() bool { return len(e.actions(id)) == 1 })
	clk.Advance(dispatch.Backoff(1) + time.Second) // the row's backoff passes
	// A relay whose confirms arrive (and whose timeout no loaded machine
	// reaches) publishes the row again.
	e.startRelay(t, relayOpts{})
	e.waitFor(t, "second copy settled", func() bool { return len(e.actions(id)) == 2 })
	e.waitFor(t, "PUBLISHED", func() bool { return e.outboxState(t, id) == heraldtype.OutboxPublished })
	if n := e.sim.CallCount(id); n != 1 {
		t.Fatalf("provider called %d times, want 1", n)
	}
}

func TestNotSentIsRetriedThroughTheRetryQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	var first atomic.Bool
	e.sim.OnCall(func(context.Context, provider.Message) provider.Outcome {
		if first.CompareAndSwap(false, true) {
			return provider.NotSentOutcome("CONNECTION_REFUSED", 0)
		}
		return provider.Outcome{}
	})
	e.startConsumer(t, e.sender(t), rabbitmq.ConsumerHooks{})
	e.startRelay(t, relayOpts{})
	id := e.notify(t, "pay")
	e.waitFor(t, "sent after a retry", func() bool { return e.delivery(t, id).State == heraldtype.DeliveryProviderAccepted })
	e.waitFor(t, "second copy acked", func() bool { return len(e.actions(id)) == 2 })
	if a := e.actions(id); len(a) != 2 || a[0] != "retry_queued" || a[1] != "acked" {
		t.Fatalf("actions %v", a)
	}
	if d := e.delivery(t, id); d.Attempts != 2 {
		t.Fatalf("attempts %d, want 2", d.Attempts)
	}
}

func TestFailingMessagesReachParkingWithReasonAndRequeueSendsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, options{deliveryLimit: 2})
	var poison atomic.Value
	poison.Store("")
	_, stopConsumer := e.startConsumer(t, e.sender(t, "pay"), rabbitmq.ConsumerHooks{
		BeforeAck: func(job heraldtype.Job, _ sender.Result, kill func()) {
			if job.MessageID == poison.Load().(string) {
				kill() // this message kills its consumer every time
			}
		},
	})
	e.startRelay(t, relayOpts{})
	parking := &rabbitmq.Parking{URL: e.url, Topology: e.topo, Store: e.store, Logger: quiet}

	// A kind this herald does not know: the sender parks it (UNKNOWN_KIND).
	unknown := e.notify(t, "gone")
	e.waitFor(t, "unknown kind parked", func() bool { return len(e.actions(unknown)) > 0 })
	// A body that is not a job.
	publishRaw(t, e, "garbage-1", []byte("not json"))
	e.waitFor(t, "garbage parked", func() bool { return len(e.actions("garbage-1")) > 0 })
	// A message that keeps killing its consumer: the broker's delivery
	// limit dead-letters it to parking.
	dying := ids.New("ntf", time.Now())
	poison.Store(store.MessageID(dying, heraldtype.ChannelWebhook))
	if _, err := e.store.NotificationCreate(e.ctx, store.NotificationCreateParams{
		Tenant: "t1", ID: dying, Recipient: "r1", EventID: dying, Kind: "pay", Lane: lane,
		Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
	}); err != nil {
		t.Fatal(err)
	}
	dyingID := poison.Load().(string)

	// The poison message's kills also drop the acks of messages in flight
	// beside it, so a message may be parked twice: copies are harmless
	// (a requeue moves every copy, the claim sends once). Wait for the
	// three distinct messages.
	reasons := map[string]string{}
	e.waitFor(t, "three parked messages", func() bool {
		list, err := parking.List(e.ctx, parked.Operator(""), 50)
		if err != nil {
			t.Fatal(err)
		}
		clear(reasons)
		for _, p := range list {
			reasons[p.MessageID] = p.Reason
		}
		return len(reasons) == 3
	})
	if reasons[unknown] != heraldtype.ReasonUnknownKind || reasons["garbage-1"] != rabbitmq.ReasonMalformed || reasons[dyingID] == "" {
		t.Fatalf("parked reasons %v", reasons)
	}
	t.Logf("parked: %v", reasons)
	if d := e.delivery(t, unknown); d.State != heraldtype.DeliveryParked {
		t.Fatalf("delivery %s, want PARKED", d.State)
	}
	if got, err := parking.List(e.ctx, parked.Tenant("t2"), 10); err != nil || len(got) != 0 {
		t.Fatalf("another tenant sees %d parked messages (%v)", len(got), err)
	}

	// A person fixes the cause (the kind is configured again, the poison
	// is gone) and requeues: each is sent once.
	stopConsumer()
	poison.Store("")
	e.startConsumer(t, e.sender(t, "pay", "gone"), rabbitmq.ConsumerHooks{})
	if _, err := parking.Requeue(e.ctx, parked.Tenant("t2"), unknown); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("another tenant's requeue: %v", err)
	}
	if n, err := parking.Requeue(e.ctx, parked.Tenant("t1"), unknown); err != nil || n.Total() != 1 {
		t.Fatalf("requeue: %v %v", n, err)
	}
	if n, err := parking.Requeue(e.ctx, parked.Tenant("t1"), dyingID); err != nil || n.Total() != 1 {
		t.Fatalf("requeue: %v %v", n, err)
	}
	e.waitFor(t, "requeued message sent", func() bool { return e.delivery(t, unknown).State == heraldtype.DeliveryProviderAccepted })
	e.waitFor(t, "requeued poison acked", func() bool {
		a := e.actions(dyingID)
		return len(a) > 0 && a[len(a)-1] == "acked"
	})
	if n, n2 := e.sim.CallCount(unknown), e.sim.CallCount(dyingID); n != 1 || n2 != 1 {
		t.Fatalf("provider calls: requeued %d, poison %d; want 1 each", n, n2)
	}
	if _, err := parking.Requeue(e.ctx, parked.Tenant("t1"), unknown); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("second requeue: %v, want not found", err)
	}
	left, err := parking.List(e.ctx, parked.Operator(""), 50)
	if err != nil {
		t.Fatal(err)
	}
	garbage := 0
	for _, p := range left {
		if p.MessageID != "garbage-1" {
			t.Fatalf("left parked: %+v", left)
		}
		garbage++
	}
	if garbage == 0 {
		t.Fatalf("the malformed message, never requeued, is no longer parked: %+v", left)
	}
}

func publishRaw(t *testing.T, e *env, id string, body []byte) {
	t.Helper()
	if !e.publish(t, e.topo.Exchange(), string(lane), amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Body: body}) {
		t.Fatalf("publish %s: nacked", id)
	}
}

// channel opens a plain AMQP channel on the test's vhost, with the
// topology declared; its connection closes when the test ends.
func (e *env) channel(t *testing.T) *amqp.Channel {
	t.Helper()
	ch, closeConn, err := e.declared(t, e.topo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeConn)
	return ch
}

// declared opens a connection and a channel on the test's vhost and
// declares topo on it; closeConn closes them (nil with an error).
// RabbitMQ 3.10 answers a declare that races another connection's declare
// of the same quorum queue, while that queue starts, with 404 "home node …
// is down or inaccessible" and closes the channel; a test's consumers and
// relays declare the topology as they connect, beside the test's own
// declares. Such a declare is made again on a new connection.
func (e *env) declared(t *testing.T, topo rabbitmq.Topology) (ch *amqp.Channel, closeConn func(), err error) {
	t.Helper()
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(50 * time.Millisecond) {
		ch, closeConn = e.dial(t)
		if err = topo.Declare(ch); err == nil {
			return ch, closeConn, nil
		}
		closeConn()
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.NotFound || !strings.Contains(ae.Reason, "down or inaccessible") ||
			time.Now().After(deadline) {
			return nil, nil, err
		}
	}
}

// dial opens a connection and a channel on the test's vhost; closeConn
// closes them.
func (e *env) dial(t *testing.T) (ch *amqp.Channel, closeConn func()) {
	t.Helper()
	conn, err := amqp.Dial(e.url)
	if err != nil {
		t.Fatal(err)
	}
	if ch, err = conn.Channel(); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return ch, func() { conn.Close() }
}

// publish publishes msg (mandatory) on a confirming channel and reports
// whether the broker acked it.
func (e *env) publish(t *testing.T, exchange, key string, msg amqp.Publishing) bool {
	t.Helper()
	ch, closeConn, err := e.declared(t, e.topo)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm(exchange, key, true, false, msg)
	if err != nil {
		t.Fatalf("publish %s: %v", msg.MessageId, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	ack, err := dc.WaitContext(ctx)
	if err != nil {
		t.Fatalf("publish %s: no confirm: %v", msg.MessageId, err)
	}
	return ack
}

// queueInfo is a queue as the broker lists it.
type queueInfo struct {
	Type     string
	Args     map[string]any // JSON values: numbers are float64
	Messages int
}

// queues lists the vhost's queues with rabbitmqctl.
func (e *env) queues(t *testing.T) map[string]queueInfo {
	t.Helper()
	var rows []struct {
		Name      string  `json:"name"`
		Type      string  `json:"type"`
		Arguments [][]any `json:"arguments"`
		Messages  int     `json:"messages"`
	}
	out := testmq.Ctl(t, "--formatter", "json", "list_queues", "-p", testmq.VHostOf(e.url), "name", "type", "arguments", "messages")
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("list_queues: %v\n%s", err, out)
	}
	qs := map[string]queueInfo{}
	for _, r := range rows {
		q := queueInfo{Type: r.Type, Args: map[string]any{}, Messages: r.Messages}
		for _, a := range r.Arguments { // [name, type, value]
			if len(a) != 3 {
				t.Fatalf("list_queues: argument %v of %s", a, r.Name)
			}
			name, _ := a[0].(string)
			q.Args[name] = a[2]
		}
		qs[r.Name] = q
	}
	return qs
}

// consumerInfo is a consumer as the broker lists it.
type consumerInfo struct {
	Queue    string `json:"queue_name"`
	Prefetch int    `json:"prefetch_count"`
	Active   bool   `json:"active"`
}

// consumers lists the vhost's consumers with rabbitmqctl.
func (e *env) consumers(t *testing.T) []consumerInfo {
	t.Helper()
	var cs []consumerInfo
	out := testmq.Ctl(t, "--formatter", "json", "list_consumers", "-p", testmq.VHostOf(e.url), "queue_name", "prefetch_count", "active")
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		t.Fatalf("list_consumers: %v\n%s", err, out)
	}
	return cs
}

// inspect is queue as the broker's queue.declare-ok tells it: the messages
// ready (not those delivered and not yet acked) and the consumers. The
// error is the broker's when there is no such queue.
func (e *env) inspect(t *testing.T, queue string) (amqp.Queue, error) {
	t.Helper()
	ch, closeConn := e.dial(t)
	defer closeConn()
	return ch.QueueDeclarePassive(queue, true, false, false, false, nil)
}

// readyIn counts the messages ready in queue.
func (e *env) readyIn(t *testing.T, queue string) int {
	t.Helper()
	q, err := e.inspect(t, queue)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

// awaitConsumers waits until the broker lists n consumers on each of
// queues, and returns every consumer of the vhost.
func (e *env) awaitConsumers(t *testing.T, n int, queues ...string) []consumerInfo {
	t.Helper()
	// Cheap first: the queue's own count (which leaves out consumers that
	// single active consumer keeps waiting); then the broker's list.
	for _, q := range queues {
		e.waitFor(t, "a consumer on "+q, func() bool {
			info, err := e.inspect(t, q) // an error: not declared yet
			return err == nil && info.Consumers > 0
		})
	}
	var cs []consumerInfo
	e.waitFor(t, fmt.Sprintf("%d consumers on each of %v", n, queues), func() bool {
		cs = e.consumers(t)
		for _, q := range queues {
			if k := len(slices.DeleteFunc(slices.Clone(cs), func(c consumerInfo) bool { return c.Queue != q })); k < n {
				return false
			}
		}
		return true
	})
	return cs
}

// A depth read of a queue an operator deleted fails, and the broker closes
// the channel it was read on; once the queue is declared again (its
// consumer does), the publisher reads depths again on a new channel, where
// it used to fail every read until its connection dropped, and its relay
// published without the window all that while.
func TestBacklogReadsAgainAfterAQueueWasDeleted(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: e.url, Name: "test-depth", Topology: e.topo, Logger: quiet})
	testenv.Start(t, pub.Run)
	if err := pub.Ready(e.ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := pub.Backlog(e.ctx, lane); err != nil || d != 0 {
		t.Fatalf("Backlog = %d, %v; want 0", d, err)
	}
	ch, closeConn := e.dial(t)
	defer closeConn()
	if _, err := ch.QueueDelete(e.topo.ExpressQueue(lane), false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Backlog(e.ctx, lane); err == nil {
		t.Fatal("the depth of a deleted queue was read")
	}
	if err := e.declare(t, e.topo); err != nil {
		t.Fatal(err)
	}
	if d, err := pub.Backlog(e.ctx, lane); err != nil || d != 0 {
		t.Fatalf("Backlog once the queue is back = %d, %v; want 0", d, err)
	}
}
