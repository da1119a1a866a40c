package rabbitmq

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// ConsumerHooks are test seams. Each may be nil.
type ConsumerHooks struct {
	// BeforeAck runs once the sender's verdict was acted on (a retry or
	// parking copy published and confirmed), right before the ack or nack.
	// kill closes the consumer's connection as a crash would at that point:
	// the ack is lost and the broker redelivers the message.
	BeforeAck func(job heraldtype.Job, res sender.Result, kill func())
	// AfterSettle runs after the ack or nack, with what was done.
	AfterSettle func(job heraldtype.Job, res sender.Result, action string)
}

// ConsumerConfig configures one lane's consumer.
type ConsumerConfig struct {
	URL string
	// Name labels the connection and the consumer tag.
	Name     string
	Lane     heraldtype.Lane
	Topology Topology
	// Sender is the one sender algorithm, the same the db transport calls.
	Sender dispatch.Sender
	// Concurrency is the sends in flight at once. Defaults to 1.
	Concurrency int
	// Prefetch is the broker's window of unacked messages. Defaults to Concurrency.
	Prefetch int
	// Reserve is the slots kept for the lane's express queue: the lane
	// queue's messages take at most Concurrency − Reserve of them at once
	// (and its prefetch is Prefetch − Reserve), so a tenant without a
	// backlog, whose rows the relay sends to the express queue, finds a
	// slot while another tenant's messages fill the rest. The express
	// queue is read whatever it is; 0 keeps no slots for it. Must be less
	// than Concurrency.
	Reserve int
	// ConfirmTimeout bounds the confirm of a retry or parking copy. Defaults to 5 seconds.
	ConfirmTimeout time.Duration
	Logger         *slog.Logger
	Metrics        *metrics.Metrics
	// Alerts receives the PARKED alert of a message the consumer parks
	// itself (a body that is not a job); the sender alerts for its own.
	// Defaults to logging them.
	Alerts alert.Sink
	Hooks  ConsumerHooks
	// Outbox takes back the outbox row of a message whose send waits
	// longer than the longest retry tier ("Long deferrals wait in the
	// outbox" in the package doc). Defaults to nil: every Retry goes to
	// the retry queue.
	Outbox store.Deferrals
}

// What a consumer did with a message, counted in herald_dispatch_total's
// result label.
const (
	ActionAcked       = "acked"        // the sender is done with it
	ActionRetryQueued = "retry_queued" // a copy waits in the retry queue
	ActionParked      = "parked"       // a copy waits in the parking queue
	ActionRequeued    = "requeued"     // given back to its queue (shutdown, a copy not confirmed)
	ActionBackoff     = "backoff"      // nothing was decided; a copy waits for the dispatcher's backoff
	ActionAckLost     = "ack_lost"     // the ack did not reach the broker; it redelivers
)

// ConsumerResults are the results a consumer counts, exported at 0 from
// the start.
var ConsumerResults = []string{ActionAcked, ActionRetryQueued, ActionDeferred, ActionParked, ActionRequeued, ActionBackoff, ActionAckLost}

// Consumer reads one lane's queue and hands every message to the sender.
// It acks a message only after the sender returned (so after the delivery's
// result is written) and after any copy it had to publish (retry, parking)
// was confirmed; acks are gathered into few frames (acker). A message
// whose ack is lost is redelivered by the broker; the sender's claim then
// finds the delivery row and no second provider call happens.
//
// Verdicts:
//
//	Done     ack
//	Retry    publish to the retry queue for Result.Delay (confirmed), ack;
//	         also a recheck: the sender found another copy's SENDING claim,
//	         or could not tell whether its result was written, and this
//	         copy may be the only one left to carry out a retry; a wait
//	         longer than the longest tier that holds nothing (a deferral)
//	         puts the outbox row back instead (ConsumerConfig.Outbox), ack
//	Park     publish to the parking queue with x-failure-reason (confirmed), ack
//	Backoff  during shutdown (before a claim): nack with requeue; otherwise
//	         publish to the retry queue for the dispatcher's backoff, ack
//
// A body that is not a job is parked (MALFORMED_BODY), never dropped.
type Consumer struct {
	cfg  ConsumerConfig
	link link
}

// NewConsumer returns a consumer; Run starts it.
func NewConsumer(cfg ConsumerConfig) *Consumer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Alerts == nil {
		cfg.Alerts = alert.Log{Logger: cfg.Logger}
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	if cfg.Prefetch < 1 {
		cfg.Prefetch = cfg.Concurrency
	}
	cfg.Reserve = min(max(cfg.Reserve, 0), cfg.Concurrency-1)
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 5 * time.Second
	}
	if cfg.Name == "" {
		cfg.Name = "herald-consumer-" + string(cfg.Lane)
	}
	cfg.Topology = cfg.Topology.WithDefaults()
	return &Consumer{cfg: cfg}
}

// Run consumes until ctx is cancelled, reconnecting by itself. On
// cancellation it stops taking messages, lets the sends in flight finish and
// settle, and closes; prefetched messages it never started go back to the
// queue with the connection.
func (c *Consumer) Run(ctx context.Context) {
	session(ctx, c.cfg.Logger, c.cfg.URL, c.cfg.Name, &c.link, c.consume)
}

// Status reports whether the consumer is connected and consuming, and if
// not, why.
func (c *Consumer) Status() Status { return c.link.get() }

func (c *Consumer) consume(ctx context.Context, conn *amqp.Connection, _ *coalescer) error {
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := c.cfg.Topology.Declare(ch); err != nil {
		return err
	}
	pubCh, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open publishing channel: %w", err)
	}
	conf, err := newConfirmer(pubCh, nil, ConfirmHooks{})
	if err != nil {
		return fmt.Errorf("enable publisher confirms: %w", err)
	}
	// Two consumers on one channel, each with its own prefetch (RabbitMQ
	// applies a non-global basic.qos to the consumers started after it).
	consume := func(queue, tag string, prefetch int) (<-chan amqp.Delivery, error) {
		if err := ch.Qos(prefetch, 0, false); err != nil {
			return nil, fmt.Errorf("set prefetch: %w", err)
		}
		d, err := ch.Consume(queue, tag, false, false, false, false, nil)
		if err != nil {
			return nil, fmt.Errorf("consume %s: %w", queue, err)
		}
		return d, nil
	}
	lane := c.cfg.Concurrency - c.cfg.Reserve
	lanePrefetch := max(1, c.cfg.Prefetch-c.cfg.Reserve)
	deliveries, err := consume(c.cfg.Topology.Queue(c.cfg.Lane), c.cfg.Name, lanePrefetch)
	if err != nil {
		return err
	}
	express, err := consume(c.cfg.Topology.ExpressQueue(c.cfg.Lane), c.expressTag(), c.cfg.Prefetch)
	if err != nil {
		return err
	}
	c.link.up()
	c.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "rabbitmq: consumer connected",
		slog.String("component", c.cfg.Name), slog.String("lane", string(c.cfg.Lane)))

	kill := func() { _ = conn.Close() }
	// Concurrency long-lived workers take the deliveries: a goroutine per
	// message would grow a fresh stack for every send. A lane queue's
	// message holds one of its lane slots from its receipt to its end, so
	// Reserve workers are always left for the express queue.
	type item struct {
		d    amqp.Delivery
		lane bool
	}
	work := make(chan item)
	slots := make(chan struct{}, lane)
	acks := newAcker(ch, lanePrefetch)
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				c.handle(ctx, acks, conf, it.d, kill)
				if it.lane {
					<-slots
				}
			}
		}()
	}
	defer func() { close(work); wg.Wait(); acks.stop() }()
	held := false // a lane slot taken for the next lane message
	for {
		var fromLane <-chan amqp.Delivery
		take := slots
		if held {
			fromLane, take = deliveries, nil
		}
		var it item
		select {
		case <-ctx.Done():
			_ = ch.Cancel(c.cfg.Name, false)
			_ = ch.Cancel(c.expressTag(), false)
			return nil
		case e := <-closed:
			return errClosed(e)
		case take <- struct{}{}:
			held = true
			continue
		case d, ok := <-fromLane:
			if !ok {
				return errClosed(nil)
			}
			held = false
			it = item{d: d, lane: true}
		case d, ok := <-express:
			if !ok {
				return errClosed(nil)
			}
			it = item{d: d}
		}
		acks.seen(it.d.DeliveryTag)
		select {
		case work <- it:
		case <-ctx.Done():
			// Not started: it goes back to its queue with the channel.
			if it.lane {
				<-slots
			}
		}
	}
}

// expressTag is the consumer tag of the express queue's consumer.
func (c *Consumer) expressTag() string { return c.cfg.Name + ".express" }

func (c *Consumer) handle(ctx context.Context, acks *acker, conf *confirmer, d amqp.Delivery, kill func()) {
	var job heraldtype.Job
	var res sender.Result
	malformed := false
	if err := json.Unmarshal(d.Body, &job); err != nil || job.MessageID == "" {
		malformed = true
		tenant, _ := d.Headers[HeaderTenant].(string)
		job = heraldtype.Job{MessageID: d.MessageId, Tenant: tenant, Lane: c.cfg.Lane}
		res = sender.Result{Verdict: sender.Park, Reason: ReasonMalformed}
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq: parking a message that is not a job",
			slog.String("message_id", d.MessageId), slog.String("lane", string(c.cfg.Lane)))
	} else {
		job.Known = known(d)
		res = c.cfg.Sender.Send(ctx, job)
	}
	// From here on shutdown does not interrupt: the result is written and
	// only the broker's side of it remains.
	wctx := context.WithoutCancel(ctx)
	action, requeue := ActionAcked, false
	var err error
	switch res.Verdict {
	case sender.Done:
	case sender.Retry:
		var keep bool
		var delay time.Duration
		var set amqp.Table
		if action, keep, delay, set = c.retryCopy(wctx, d, job, res); keep {
			err = c.republish(wctx, conf, d, c.cfg.Topology.RetryExchange(),
				c.cfg.Topology.RetryKey(c.cfg.Lane, c.cfg.Topology.RetryTier(delay)), set)
		}
	case sender.Park:
		action = ActionParked
		err = c.republish(wctx, conf, d, c.cfg.Topology.ParkingExchange(), ParkedKey, amqp.Table{
			HeaderFailureReason: res.Reason, HeaderParkedAt: time.Now().UTC().Format(time.RFC3339Nano),
		})
		if err == nil && malformed {
			// The sender alerts for what it parks; this one never reached it.
			c.cfg.Metrics.Alert(alert.Parked)
			c.cfg.Alerts.Alert(wctx, alert.Alert{Kind: alert.Parked, MessageID: job.MessageID, Tenant: job.Tenant, Reason: res.Reason})
		}
	default: // Backoff: nothing was decided.
		if ctx.Err() != nil {
			action, requeue = ActionRequeued, true
			break
		}
		n := headerInt(d.Headers, HeaderBackoffs) + 1
		delay := dispatch.Backoff(n)
		action = ActionBackoff
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq: send attempt failed, backing off",
			slog.String("message_id", job.MessageID), slog.Int("attempt", n), slog.Duration("delay", delay), slog.Any("error", res.Err))
		err = c.republish(wctx, conf, d, c.cfg.Topology.RetryExchange(),
			c.cfg.Topology.RetryKey(c.cfg.Lane, c.cfg.Topology.RetryTier(delay)), amqp.Table{HeaderBackoffs: int64(n)})
	}
	if err != nil {
		// The copy did not make it: give the message back to the queue
		// rather than lose it. (The broker's delivery limit parks a
		// message that keeps coming back.)
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq: could not publish "+action+" copy; returning message to its queue",
			slog.String("message_id", job.MessageID), slog.Any("error", err))
		action, requeue = ActionRequeued, true
	}
	if h := c.cfg.Hooks.BeforeAck; h != nil {
		h(job, res, kill)
	}
	if requeue {
		c.settled(wctx, job, res, action, acks.nack(d.DeliveryTag, true))
		return
	}
	acks.ack(d.DeliveryTag, func(err error) { c.settled(wctx, job, res, action, err) })
}

// settled counts what was done with a message once its ack or nack was
// written (err: it was not; the broker redelivers).
func (c *Consumer) settled(ctx context.Context, job heraldtype.Job, res sender.Result, action string, err error) {
	if err != nil {
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq: ack failed; the broker will redeliver",
			slog.String("message_id", job.MessageID), slog.Any("error", err))
		action = ActionAckLost
	}
	c.cfg.Metrics.Dispatch(c.cfg.Lane, action)
	if h := c.cfg.Hooks.AfterSettle; h != nil {
		h(job, res, action)
	}
}

// known is what a delivery tells the sender before it reads anything. Only a
// message that may have met a sender before is worth a peek: one the broker
// delivered before (a consumer died holding it), or one that came back
// through the retry queue or a backoff. Any other copy (a relay's re-publish
// after a lost confirm) meets the claim, which refuses it just the same.
func known(d amqp.Delivery) *heraldtype.Known {
	_, retried := d.Headers["x-death"]
	_, backedOff := d.Headers[HeaderBackoffs]
	return &heraldtype.Known{Delivery: d.Redelivered || retried || backedOff}
}

// republish publishes a copy of d (same body, same message id) and waits for
// its confirm.
func (c *Consumer) republish(ctx context.Context, conf *confirmer, d amqp.Delivery, exchange, key string, set amqp.Table) error {
	msg := copyOf(d, set)
	b := newBatch(1, c.cfg.ConfirmTimeout)
	if err := conf.publish(ctx, b, 0, exchange, key, msg); err != nil {
		return err
	}
	return b.Wait()[0]
}

// copyOf is a persistent copy of a delivered message with headers set.
func copyOf(d amqp.Delivery, set amqp.Table) amqp.Publishing {
	h := amqp.Table{}
	maps.Copy(h, d.Headers)
	maps.Copy(h, set)
	ct := d.ContentType
	if ct == "" {
		ct = "application/json"
	}
	return amqp.Publishing{
		Headers: h, ContentType: ct, DeliveryMode: amqp.Persistent, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, Body: d.Body,
	}
}

func headerInt(h amqp.Table, key string) int {
	switch v := h[key].(type) {
	case int64:
		return int(v)
	case int32:
		return int(v)
	case int:
		return v
	}
	return 0
}
