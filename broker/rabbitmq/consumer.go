package rabbitmq

import (
	"cmp"
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
	// parking copy published and confirmed), right before the ack or nack
	// (for a job of a bundle, before the bundle's, which waits for its
	// other jobs).
	// kill closes the consumer's connection as a crash would at that point:
	// the ack is lost and the broker redelivers the message.
	BeforeAck func(job heraldtype.Job, res sender.Result, kill func())
	// AfterSettle runs after the ack or nack, with what was done.
	AfterSettle func(job heraldtype.Job, res sender.Result, action string)
	// Resubscribe runs when a queue's consumer was cancelled to change its
	// prefetch (to prefetch messages), before the new one starts; kill
	// closes the connection as a crash would at that point.
	Resubscribe func(queue string, prefetch int, kill func())
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
	// Prefetch is the most jobs the consumer holds unacked, those in its
	// slots included. The broker's window counts messages, so each queue's
	// is set to the messages that hold Prefetch jobs, following the jobs
	// its messages carry ("Prefetch follows the bundles" in prefetch.go).
	// Defaults to Concurrency.
	Prefetch int
	// Bundle is the most jobs the relays put in a message (their
	// PublisherConfig.Bundle): the consumer's prefetch starts from messages
	// of that many jobs. Defaults to 1.
	Bundle int
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
	ActionSplit       = "split"        // a bundle delivered again, republished a job a message
)

// ConsumerResults are the results a consumer counts, exported at 0 from
// the start.
var ConsumerResults = []string{ActionAcked, ActionRetryQueued, ActionDeferred, ActionParked, ActionRequeued, ActionBackoff, ActionAckLost, ActionSplit}

// Consumer reads one lane's queue and hands every job to the sender (a
// bundle's one by one, bundle.go).
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
	// Two consumers on one channel, each with its own prefetch in messages,
	// which follows the jobs its messages carry (prefetch.go).
	fixed := c.cfg.Topology.SingleActiveConsumer
	lane := c.cfg.Concurrency - c.cfg.Reserve
	lanePrefetch := max(1, c.cfg.Prefetch-c.cfg.Reserve)
	laneSub := &subscription{ch: ch, name: "lane", queue: c.cfg.Topology.Queue(c.cfg.Lane), base: c.cfg.Name,
		f: newFollower(lanePrefetch, c.cfg.Bundle, fixed)}
	expressSub := &subscription{ch: ch, name: "express", queue: c.cfg.Topology.ExpressQueue(c.cfg.Lane), base: c.expressTag(),
		f: newFollower(c.cfg.Prefetch, c.cfg.Bundle, fixed)}
	for _, s := range []*subscription{laneSub, expressSub} {
		if err := s.start(); err != nil {
			return err
		}
		c.cfg.Metrics.ConsumerPrefetch(c.cfg.Lane, s.name, s.f.cur)
	}
	kill := func() { _ = conn.Close() }
	if h := c.cfg.Hooks.Resubscribe; h != nil {
		between := func(queue string, prefetch int) { h(queue, prefetch, kill) }
		laneSub.between, expressSub.between = between, between
	}
	c.link.up()
	c.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "rabbitmq: consumer connected",
		slog.String("component", c.cfg.Name), slog.String("lane", string(c.cfg.Lane)))

	// Concurrency long-lived workers take the sends: a goroutine per
	// message would grow a fresh stack for every send. A lane queue's job
	// holds one of its lane slots from its receipt to its end, so Reserve
	// workers are always left for the express queue. A bundle's jobs each
	// take a slot of their own: the rest of a lane bundle waits here
	// (pending) for slots before the lane queue is read again.
	work := make(chan item)
	slots := make(chan struct{}, lane)
	acks := newAcker(ch, laneSub.f.cur)
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				c.work(ctx, acks, conf, it, kill)
				if it.lane {
					<-slots
				}
			}
		}()
	}
	defer func() { close(work); wg.Wait(); acks.stop() }()
	// hand gives it to a worker; false if ctx ended first (it was not
	// started: its message goes back to its queue with the channel).
	hand := func(it item) bool {
		select {
		case work <- it:
			return true
		case <-ctx.Done():
			if it.lane {
				<-slots
			}
			return false
		}
	}
	var pending []item
	// observed counts a message's jobs in its queue's follower, which may
	// re-subscribe with another prefetch.
	observed := func(s *subscription, its []item) error {
		jobs := len(its)
		if its[0].split != nil {
			jobs = len(its[0].split)
		}
		resized, err := s.observe(jobs)
		if resized && err == nil {
			if s == laneSub {
				acks.setGather(gatherFor(s.f.cur))
			}
			c.cfg.Metrics.ConsumerPrefetch(c.cfg.Lane, s.name, s.f.cur)
			c.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "rabbitmq: consumer prefetch follows the bundles",
				slog.String("component", c.cfg.Name), slog.String("queue", s.queue), slog.Int("prefetch", s.f.cur),
				slog.Float64("jobs_a_message", s.f.mean))
		}
		return err
	}
	fromLane := func(d amqp.Delivery) error {
		acks.seen(d.DeliveryTag)
		its := c.items(d, true)
		pending = its[1:]
		hand(its[0])
		return observed(laneSub, its)
	}
	fromExpress := func(d amqp.Delivery) error {
		acks.seen(d.DeliveryTag)
		its := c.items(d, false)
		for _, it := range its {
			if !hand(it) {
				break
			}
		}
		return observed(expressSub, its)
	}
	held := false // a lane slot taken for the next lane job
	for {
		if held && len(pending) > 0 {
			it := pending[0]
			pending, held = pending[1:], false
			hand(it)
			continue
		}
		// A lane message is read only with a lane slot held: from the
		// queue's consumer, or from one cancelled to change its prefetch
		// until what the broker had sent it ends.
		var laneNow, laneOld <-chan amqp.Delivery
		take := slots
		if held {
			laneNow, laneOld, take = laneSub.d, laneSub.old, nil
		}
		var err error
		select {
		case <-ctx.Done():
			_ = ch.Cancel(laneSub.tag, false)
			_ = ch.Cancel(expressSub.tag, false)
			return nil
		case e := <-closed:
			return errClosed(e)
		case take <- struct{}{}:
			held = true
		case d, ok := <-laneOld:
			if !ok {
				laneSub.drained()
				continue
			}
			held = false
			err = fromLane(d)
		case d, ok := <-laneNow:
			if !ok {
				return errClosed(nil)
			}
			held = false
			err = fromLane(d)
		case d, ok := <-expressSub.old:
			if !ok {
				expressSub.drained()
				continue
			}
			err = fromExpress(d)
		case d, ok := <-expressSub.d:
			if !ok {
				return errClosed(nil)
			}
			err = fromExpress(d)
		}
		if err != nil {
			return err
		}
	}
}

// item is one send for a worker: one job of a delivered message (a
// message of one job, or one job of a bundle), or a bundle delivered
// again, to be split (split holds its jobs).
type item struct {
	d     amqp.Delivery
	lane  bool
	msg   *delivered
	split []amqp.Delivery
}

// delivered is a delivered message being sent: settled once its last job
// is (a message of one job, or every job of a bundle).
type delivered struct {
	d        amqp.Delivery
	mu       sync.Mutex
	left     int
	outcomes []outcome
}

// items are the sends a delivery makes: its one job, or each job of a
// bundle delivered for the first time, or the split of a bundle delivered
// again. A bundle whose body cannot be read is one item, parked as
// malformed.
func (c *Consumer) items(d amqp.Delivery, lane bool) []item {
	jobs := []amqp.Delivery{d}
	if d.Type == TypeBundle {
		if bundled, err := bundleJobs(d); err == nil {
			if d.Redelivered {
				return []item{{d: d, lane: lane, split: bundled}}
			}
			jobs = bundled
		}
	}
	msg := &delivered{d: d, left: len(jobs), outcomes: make([]outcome, 0, len(jobs))}
	its := make([]item, len(jobs))
	for i, j := range jobs {
		its[i] = item{d: j, lane: lane, msg: msg}
	}
	return its
}

// work carries out one item.
func (c *Consumer) work(ctx context.Context, acks *acker, conf *confirmer, it item, kill func()) {
	if it.split != nil {
		c.split(ctx, acks, conf, it.d, it.split)
		return
	}
	c.settle(ctx, acks, it.msg, c.decide(ctx, conf, it.d, kill))
}

// expressTag is the consumer tag of the express queue's consumer.
func (c *Consumer) expressTag() string { return c.cfg.Name + ".express" }

// outcome is what became of one job: the sender's result, what the
// consumer did about it (the action counted), and whether its message
// goes back to its queue.
type outcome struct {
	job     heraldtype.Job
	res     sender.Result
	action  string
	requeue bool
}

// settle records one job's outcome in its message; the last one settles
// the message: an ack, or a nack back to its queue if any job's copy could
// not be published (a bundle is then delivered again and split).
func (c *Consumer) settle(ctx context.Context, acks *acker, msg *delivered, o outcome) {
	msg.mu.Lock()
	msg.outcomes = append(msg.outcomes, o)
	msg.left--
	last := msg.left == 0
	msg.mu.Unlock()
	if !last {
		return
	}
	wctx := context.WithoutCancel(ctx)
	settled := func(err error) {
		for _, o := range msg.outcomes {
			c.settled(wctx, o, err)
		}
	}
	for _, o := range msg.outcomes {
		if o.requeue {
			settled(acks.nack(msg.d.DeliveryTag, true))
			return
		}
	}
	acks.ack(msg.d.DeliveryTag, settled)
}

// split republishes each job of a bundle the broker delivered again as a
// message of its own, marked HeaderRedelivered, to the queue the bundle
// came from, and acks the bundle once every copy is confirmed; if one is
// not, it nacks the bundle back to its queue, to be split again.
func (c *Consumer) split(ctx context.Context, acks *acker, conf *confirmer, d amqp.Delivery, jobs []amqp.Delivery) {
	wctx := context.WithoutCancel(ctx)
	b := newBatch(len(jobs), c.cfg.ConfirmTimeout)
	for i, j := range jobs {
		if err := conf.publish(wctx, b, i, d.Exchange, d.RoutingKey, copyOf(j, amqp.Table{HeaderRedelivered: true})); err != nil {
			b.set(i, err)
		}
	}
	var failed error
	for _, err := range b.Wait() {
		failed = cmp.Or(failed, err)
	}
	if failed != nil {
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq: could not split a redelivered bundle; returning it to its queue",
			slog.String("message_id", d.MessageId), slog.Int("jobs", len(jobs)), slog.Any("error", failed))
		err := acks.nack(d.DeliveryTag, true)
		c.cfg.Metrics.Dispatch(c.cfg.Lane, cmp.Or(ackLost(err), ActionRequeued))
		return
	}
	acks.ack(d.DeliveryTag, func(err error) {
		c.cfg.Metrics.Dispatch(c.cfg.Lane, cmp.Or(ackLost(err), ActionSplit))
	})
}

// ackLost is ActionAckLost if err is an ack's or nack's error, else "".
func ackLost(err error) string {
	if err != nil {
		return ActionAckLost
	}
	return ""
}

// decide hands d's job to the sender and acts on its verdict (a retry,
// parking or backoff copy published and confirmed), short of the ack.
func (c *Consumer) decide(ctx context.Context, conf *confirmer, d amqp.Delivery, kill func()) outcome {
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
	return outcome{job: job, res: res, action: action, requeue: requeue}
}

// settled counts what was done with a message once its ack or nack was
// written (err: it was not; the broker redelivers).
func (c *Consumer) settled(ctx context.Context, o outcome, err error) {
	action := o.action
	if err != nil {
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq: ack failed; the broker will redeliver",
			slog.String("message_id", o.job.MessageID), slog.Any("error", err))
		action = ActionAckLost
	}
	c.cfg.Metrics.Dispatch(c.cfg.Lane, action)
	if h := c.cfg.Hooks.AfterSettle; h != nil {
		h(o.job, o.res, action)
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
	_, split := d.Headers[HeaderRedelivered]
	return &heraldtype.Known{Delivery: d.Redelivered || retried || backedOff || split}
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
