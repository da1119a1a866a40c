// Package rabbitmq is herald's RabbitMQ transport: the topology herald
// declares at start, a publisher that tracks publisher confirms, the lane
// consumers that hand each message to the one sender, and the parking queue's
// list and requeue. The relay that feeds it lives in dispatch (relay.go).
//
// # Topology (all durable, all quorum queues)
//
//	exchange  herald                   direct; routing key = lane
//	queue     herald.<lane>            bound with key <lane>; the consumers read it
//	queue     herald.<lane>.express    bound with key <lane>.express; the same
//	                                   consumers read it (see "Tenants share a lane")
//	exchange  herald.retry             direct; routing key = <lane>.<delay>
//	queue     herald.retry.<lane>.<d>  x-message-ttl d, no consumer; on expiry it
//	                                   dead-letters back to herald with key <lane>
//	exchange  herald.parking           direct; routing key = parked
//	queue     herald.parked            no consumer; a person lists and requeues it
//
// Every queue that dead-letters uses x-dead-letter-strategy at-least-once
// (with x-overflow reject-publish, which RabbitMQ requires for it), so a
// message moving from one queue to the next is never dropped on the way. A
// lane queue has x-delivery-limit: a poison message that keeps killing its
// consumer is dead-lettered to the parking queue, not dropped and not looped
// forever.
//
// Single active consumer (optional, per lane queue) turns a queue into one
// consumer at a time across every herald process: a way to honour a
// provider's rate limit. It is not a duplicate guard: a consumer change, a
// redelivery after a lost ack, a republish after a lost confirm and a
// requeue from parking all make copies of a message. The deliveries claim
// (a unique insert on message_id) is the one guard.
//
// # Tenants share a lane
//
// A lane has two queues with the same arguments: herald.<lane>, and
// herald.<lane>.express for the rows of tenants' scopes without a backlog
// (the relay decides: dispatch.Relay, "Tenants share a lane"). One consumer
// reads both on one channel, each with its own prefetch, and hands them
// to the same workers; a lane queue's message holds one of Concurrency −
// Reserve lane slots from its receipt to its end, so Reserve workers are
// always left for the express queue (ConsumerConfig.Reserve). Which of
// its ready messages comes next is Go's choice between the two queues, so
// neither waits for the other to empty. The express queue's prefetch is
// the whole Prefetch: when every tenant is small, the express queue
// carries the lane alone at full width. Retries, backoffs and requeues
// from parking come back to the lane queue.
//
// # Acks are gathered
//
// The consumer acks a message once its send is over and its result
// written, but not in a frame of its own: the acker (acker.go) gathers up
// to 16 acks (at most half the lane's prefetch), at most 5 ms (1 ms until
// a second measurement the same day), and writes them as one ack with
// multiple set up to below the lowest delivery not known done, and the
// rest one by one. RabbitMQ's work for an ack is mostly per frame: 20,001
// acks went out in 7,300–7,600 frames instead of 20,001, and end to end
// (BenchmarkEndToEndRabbitMQ, alternated, four pairs on 2026-12-04) herald
// did 2,035 / 2,542 / 2,803 / 2,712 notifications/s against 2,011 / 2,234 /
// 2,279 / 2,612, RabbitMQ's CPU 147–197 µs a notification against
// 177–216. A crash before a gathered ack is written loses it, as any ack
// may be lost: the broker redelivers, and the deliveries claim stops a
// second call.
//
// # Long deferrals wait in the outbox
//
// A deferred send (quiet hours: sender.DeferFor) waits in the outbox, as
// with the db transport, not in the broker. Two layers see to it:
//
//   - The relay's gate (dispatch.RelayConfig.Gate) defers a row before it
//     is published: from 20:40 the night's marketing is put back to
//     PENDING, due at the next opening, and makes no broker copy at all.
//   - The consumer takes back what was published before the gate could
//     hold it: a message still in the lane's queue when the window closes
//     (a campaign that has not drained by 20:50), a profile whose time
//     zone changed since, a copy back from the retry queue. A sender's
//     Retry that holds nothing (no claim, nothing written by this copy)
//     and waits longer than the longest retry tier would otherwise go
//     round the retry queues until due (every 30 minutes on the default
//     tiers: some 23 copies a night) while its outbox row stays PUBLISHED
//     with no delivery row, which the watchdog re-drives every
//     watchdog_published_grace (an hour): a REDRIVEN alert and one more
//     copy each time. Instead the consumer puts the row back to PENDING,
//     due at the end of the wait (store.Deferrals, fenced by the token of
//     the relay's claim that published the message, HeaderOutboxToken),
//     and acks the copy.
//
// Either way the row is then owned as every PENDING row is: the relay
// publishes it again when it is due, the expiry sweep ends it EXPIRED at
// its due-by, and the watchdog and reconciliation count it, and a delivery
// waiting in RETRY_WAIT behind it, as owned. The relay's layer alone would
// leave the second kind cycling; the consumer's alone would publish every
// night row once and miss the 20:40 stop (the sender's own check closes
// at 20:50), which seed 000 puts in the relay.
//
// How the consumer finds the row decides what becomes of its copy, so the
// copy never closes the message's way back while nothing else holds it:
//
//	PUBLISHED, this publication    PENDING, due after the wait; ack (deferred)
//	PUBLISHING, this publication   the relay has yet to mark it (its confirm
//	                               and this copy raced): keep the copy and
//	                               look again after the publication's age,
//	                               1 s to 1 min, like the sender's recheck
//	a newer publication's row,     another owner carries the message (that
//	or PENDING                     copy, or the claim at available_at): ack
//	ended or gone; no token        keep the copy in the retry queue for the
//	header; no store configured    wait, as for any Retry
//	store unavailable              keep the copy for the dispatcher's backoff
//	                               and try again
//
// Only the sender decides whether to send: the row's next publication
// meets the sender's checks and its claim again.
//
// # Bundles
//
// The relay publishes a batch's rows several to a message (bundle.go has
// the format and the rules): the consumer sends each job on its own, acks
// the bundle once all are settled, and splits a bundle delivered again
// into a message a job, so redeliveries, retries, parking and the delivery
// limit only ever meet single jobs.
package rabbitmq

import (
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
)

// Header names herald sets on messages.
const (
	// HeaderFailureReason carries why a message was parked.
	HeaderFailureReason = "x-failure-reason"
	// HeaderTenant carries the job's tenant, so the parking queue can be
	// listed per tenant without decoding bodies.
	HeaderTenant = "x-herald-tenant"
	// HeaderBackoffs counts Backoff verdicts (store unavailable) of a message.
	HeaderBackoffs = "x-herald-backoffs"
	// HeaderParkedAt is when herald parked the message (RFC 3339).
	HeaderParkedAt = "x-herald-parked-at"
	// HeaderOutboxToken carries the fencing token of the relay's claim that
	// published the message: the publication whose outbox row a long
	// deferral puts back (consumer.go, "Long deferrals wait in the outbox").
	HeaderOutboxToken = "x-herald-outbox-token"
	// HeaderRedelivered marks a job's copy that a consumer republished
	// from a bundle the broker delivered again: the job may have met a
	// sender before, as a redelivered message's may (bundle.go).
	HeaderRedelivered = "x-herald-redelivered"
)

// Message types (amqp type property): one job, or a bundle of several.
const (
	TypeJob    = "herald.job"
	TypeBundle = "herald.jobs"
)

// ParkedKey is the routing key of the parking exchange.
const ParkedKey = "parked"

// ReasonMalformed parks a message whose body is not a job.
const ReasonMalformed = "MALFORMED_BODY"

// Topology names herald's exchanges and queues and sets their arguments.
// Declaring it is idempotent as long as the arguments do not change; a
// queue's arguments cannot be changed in place (RabbitMQ refuses with
// PRECONDITION_FAILED), so changing delivery_limit or single_active_consumer
// on a running system means draining and deleting the queue first.
type Topology struct {
	// Prefix starts every name. Defaults to "herald".
	Prefix string
	// RetryDelays are the TTLs of the retry queues. A message waits in the
	// longest one not longer than its delay (the sender sends it on again
	// if it comes back early). Defaults to DefaultRetryDelays.
	RetryDelays []time.Duration
	// DeliveryLimit dead-letters a lane message to parking after this many
	// deliveries. Defaults to 20.
	DeliveryLimit int
	// SingleActiveConsumer sets x-single-active-consumer on the lane queues.
	SingleActiveConsumer bool
}

// DefaultRetryDelays cover the sender's quick retries (1 s), its slow ones
// (10 min), a provider's Retry-After (up to an hour) and the dispatcher's
// backoff (up to 30 min).
var DefaultRetryDelays = []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute, 30 * time.Minute}

// WithDefaults fills unset fields and sorts the retry delays.
func (t Topology) WithDefaults() Topology {
	if t.Prefix == "" {
		t.Prefix = "herald"
	}
	if len(t.RetryDelays) == 0 {
		t.RetryDelays = DefaultRetryDelays
	}
	ds := slices.Clone(t.RetryDelays)
	slices.Sort(ds)
	t.RetryDelays = slices.Compact(ds)
	if t.DeliveryLimit <= 0 {
		t.DeliveryLimit = 20
	}
	return t
}

// Exchange is where the relay publishes (routing key = lane).
func (t Topology) Exchange() string { return t.Prefix }

// Queue is a lane's queue.
func (t Topology) Queue(l heraldtype.Lane) string { return t.Prefix + "." + string(l) }

// ExpressQueue is a lane's express queue: the relay publishes there the
// rows of tenants' scopes without a backlog (dispatch.ExpressQueue), so
// they do not wait behind another tenant's (or scope's) messages ready in
// the lane's queue.
func (t Topology) ExpressQueue(l heraldtype.Lane) string { return t.Queue(l) + ".express" }

// Key is the main exchange's routing key of a lane's queue (q).
func (t Topology) Key(l heraldtype.Lane, q dispatch.Queue) string {
	if q == dispatch.ExpressQueue {
		return string(l) + ".express"
	}
	return string(l)
}

// RetryExchange receives messages to offer again later.
func (t Topology) RetryExchange() string { return t.Prefix + ".retry" }

// ParkingExchange receives parked messages.
func (t Topology) ParkingExchange() string { return t.Prefix + ".parking" }

// ParkingQueue holds parked messages; nothing consumes it.
func (t Topology) ParkingQueue() string { return t.Prefix + ".parked" }

// RetryKey is the retry exchange's routing key for a lane and delay tier.
func (t Topology) RetryKey(l heraldtype.Lane, d time.Duration) string {
	return string(l) + "." + d.String()
}

// RetryQueue is the retry queue of a lane and delay tier.
func (t Topology) RetryQueue(l heraldtype.Lane, d time.Duration) string {
	return t.Prefix + ".retry." + t.RetryKey(l, d)
}

// RetryTier picks the retry queue for a delay: the longest tier not longer
// than d, or the shortest tier when d is shorter than every tier.
func (t Topology) RetryTier(d time.Duration) time.Duration {
	tier := t.RetryDelays[0]
	for _, x := range t.RetryDelays {
		if x <= d {
			tier = x
		}
	}
	return tier
}

// atLeastOnce are the arguments that make a quorum queue's dead-lettering
// at-least-once (RabbitMQ requires reject-publish overflow for it).
func atLeastOnce(args amqp.Table) amqp.Table {
	args["x-queue-type"] = "quorum"
	args["x-dead-letter-strategy"] = "at-least-once"
	args["x-overflow"] = "reject-publish"
	return args
}

// Declare declares every exchange, queue and binding on ch.
func (t Topology) Declare(ch *amqp.Channel) error {
	t = t.WithDefaults()
	for _, ex := range []string{t.Exchange(), t.RetryExchange(), t.ParkingExchange()} {
		if err := ch.ExchangeDeclare(ex, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", ex, err)
		}
	}
	if _, err := ch.QueueDeclare(t.ParkingQueue(), true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare queue %s: %w", t.ParkingQueue(), err)
	}
	if err := ch.QueueBind(t.ParkingQueue(), ParkedKey, t.ParkingExchange(), false, nil); err != nil {
		return fmt.Errorf("bind queue %s: %w", t.ParkingQueue(), err)
	}
	for _, l := range heraldtype.Lanes {
		args := atLeastOnce(amqp.Table{
			"x-delivery-limit":          int64(t.DeliveryLimit),
			"x-dead-letter-exchange":    t.ParkingExchange(),
			"x-dead-letter-routing-key": ParkedKey,
		})
		if t.SingleActiveConsumer {
			args["x-single-active-consumer"] = true
		}
		for _, q := range []struct {
			name, key string
		}{{t.Queue(l), t.Key(l, dispatch.LaneQueue)}, {t.ExpressQueue(l), t.Key(l, dispatch.ExpressQueue)}} {
			if _, err := ch.QueueDeclare(q.name, true, false, false, false, args); err != nil {
				return fmt.Errorf("declare queue %s: %w", q.name, err)
			}
			if err := ch.QueueBind(q.name, q.key, t.Exchange(), false, nil); err != nil {
				return fmt.Errorf("bind queue %s: %w", q.name, err)
			}
		}
		for _, d := range t.RetryDelays {
			rq := t.RetryQueue(l, d)
			rargs := atLeastOnce(amqp.Table{
				"x-message-ttl":             d.Milliseconds(),
				"x-dead-letter-exchange":    t.Exchange(),
				"x-dead-letter-routing-key": string(l),
			})
			if _, err := ch.QueueDeclare(rq, true, false, false, false, rargs); err != nil {
				return fmt.Errorf("declare queue %s: %w", rq, err)
			}
			if err := ch.QueueBind(rq, t.RetryKey(l, d), t.RetryExchange(), false, nil); err != nil {
				return fmt.Errorf("bind queue %s: %w", rq, err)
			}
		}
	}
	return nil
}
