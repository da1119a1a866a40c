package rabbitmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
)

// Parking lists, requeues and discards the parking queue. It reads the
// queue with basic.get and no ack, so a listing takes nothing away: every
// message it held goes back to the queue when its channel closes.
//
// A requeue of a message whose delivery is PARKED first turns the delivery
// into a due retry (the sender's claim accepts only that), then publishes a
// copy of the message (same message id, same body) to its lane, waits for
// the confirm, and only then acks it off the parking queue. If the lane
// refuses the copy, the delivery is parked again (Store.ParkedRestore)
// before the error is returned, so no delivery reads RETRY_WAIT without a
// copy on its way; a crash between the two writes leaves RETRY_WAIT with
// the copy still parked, which the next requeue of it sends. A crash after
// the confirm and before the ack leaves a second copy, which the deliveries
// claim absorbs.
//
// A discard writes its decision first (Store.ParkedDiscard: the delivery,
// when the message names a notification, becomes SUPPRESSED(DISCARDED)
// unless another copy already owns or finished it; the audit row) and only
// then acks every copy of the message off the parking queue. A crash in
// between leaves a copy parked: a second discard removes it (and audits
// again); a requeue republishes it, and the sender finds the delivery
// SUPPRESSED and acks it without a call.
//
// While a scan holds a message (unacked), no other scan can see it, so two
// scans at once would each miss the other's messages: scans in one process
// take turns. Scans in two processes at once can still miss each other's;
// a requeue or discard that finds nothing then answers not found, and a
// retry finds it.
type Parking struct {
	scanning sync.Mutex

	URL      string
	Topology Topology
	// Store, when set, turns the requeued message's PARKED delivery into a
	// due retry first, so the sender's claim accepts it again, and parks it
	// again if the copy is refused. A discard needs it (its audit row).
	Store          store.Parked
	ConfirmTimeout time.Duration
	Logger         *slog.Logger

	// ackCopy removes a requeued or discarded copy from the parking queue
	// (a test's seam for a lost ack; nil: the delivery's own ack).
	ackCopy func(amqp.Delivery) error
}

// remove acks a parked copy, removing it from the parking queue.
func (p *Parking) remove(d amqp.Delivery) error {
	if p.ackCopy != nil {
		return p.ackCopy(d)
	}
	return d.Ack(false)
}

var _ parked.Service = (*Parking)(nil)

// List returns up to limit parked messages in scope s, in queue order.
func (p *Parking) List(ctx context.Context, s parked.Scope, limit int) ([]parked.Entry, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []parked.Entry
	err := p.scan(ctx, func(d amqp.Delivery, e parked.Entry) (bool, error) {
		if s.Sees(e.Tenant) {
			out = append(out, e)
		}
		return len(out) < limit, nil
	})
	return out, err
}

// Requeue moves parked messages in scope s back to their lanes: the one
// with messageID (every copy of it), or all when messageID is "".
func (p *Parking) Requeue(ctx context.Context, s parked.Scope, messageID string) (parked.Done, error) {
	conn, _, err := dial(ctx, p.URL, "herald-parking")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	pubCh, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	conf, err := newConfirmer(pubCh, nil, ConfirmHooks{})
	if err != nil {
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	done := parked.Done{}
	err = p.scanOn(ctx, conn, func(d amqp.Delivery, e parked.Entry) (bool, error) {
		if !s.Sees(e.Tenant) || (messageID != "" && e.MessageID != messageID) {
			return true, nil
		}
		if !e.Lane.Valid() {
			p.logger().LogAttrs(ctx, slog.LevelWarn, "rabbitmq: parked message has no lane; left parked",
				slog.String("message_id", e.MessageID), slog.String("reason", e.Reason))
			return true, nil
		}
		moved, err := p.requeue(ctx, conf, d, e)
		if moved { // on its lane, even if its parked copy's ack then failed
			done[e.Tenant]++
		}
		if err != nil {
			return false, err
		}
		p.logger().LogAttrs(ctx, slog.LevelInfo, "rabbitmq: requeued parked message",
			slog.String("message_id", e.MessageID), slog.String("lane", string(e.Lane)), slog.String("reason", e.Reason))
		return true, nil
	})
	if err == nil && messageID != "" && len(done) == 0 {
		err = parked.ErrNotFound
	}
	return done, err
}

// requeue moves one parked copy to its lane: the delivery becomes a due
// retry, the copy is published and confirmed, and only then is the parked
// copy acked. A copy the lane refuses leaves the message parked, its
// delivery PARKED again. moved reports that the copy reached its lane,
// also when the parked copy's ack failed after it (the error).
func (p *Parking) requeue(ctx context.Context, conf *confirmer, d amqp.Delivery, e parked.Entry) (moved bool, err error) {
	flipped := false
	if p.Store != nil && e.Tenant != "" {
		rows, err := p.Store.ParkedRequeue(ctx, store.ParkedRequeueParams{Tenant: e.Tenant, MessageID: e.MessageID})
		if err != nil {
			return false, fmt.Errorf("requeue delivery %s: %w", e.MessageID, err)
		}
		flipped = len(rows) > 0
	}
	msg := copyOf(d, nil)
	delete(msg.Headers, HeaderFailureReason)
	delete(msg.Headers, HeaderParkedAt)
	delete(msg.Headers, HeaderBackoffs)
	msg.Headers["x-herald-requeued-from"] = e.Reason
	timeout := p.ConfirmTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	b := newBatch(1, timeout)
	err = conf.publish(ctx, b, 0, p.Topology.WithDefaults().Exchange(), string(e.Lane), msg)
	if err == nil {
		err = b.Wait()[0]
	}
	if err != nil {
		err = fmt.Errorf("republish %s: %w", e.MessageID, err)
		if flipped {
			err = p.restore(ctx, e, err)
		}
		return false, err
	}
	if err := p.remove(d); err != nil {
		return true, fmt.Errorf("remove %s from parking: %w", e.MessageID, err)
	}
	return true, nil
}

// restore parks the delivery of a copy the lane refused again, so it does
// not read RETRY_WAIT with no copy on its way, and returns cause (joined
// with restore's own failure, if any).
func (p *Parking) restore(ctx context.Context, e parked.Entry, cause error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := p.Store.ParkedRestore(wctx, store.ParkedRestoreParams{MessageID: e.MessageID, Reason: e.Reason}); err != nil {
		p.logger().LogAttrs(ctx, slog.LevelError, "rabbitmq: requeue refused and its delivery not parked again; requeue it again",
			slog.String("message_id", e.MessageID), slog.Any("error", err))
		return errors.Join(cause, fmt.Errorf("park delivery %s again: %w", e.MessageID, err))
	}
	return cause
}

// Discard removes every parked copy of x.MessageID in scope s, after it
// has recorded the discard (the delivery, when there is one to suppress,
// and the audit row). A copy that could not be removed after the record
// answers parked.ErrCopyLeft with the discard done: the record stands,
// and a second discard removes the copy. A copy of a message whose
// discard is recorded already (that second discard, or a copy parked
// again since) is removed with no second record, and Done is empty.
func (p *Parking) Discard(ctx context.Context, s parked.Scope, x parked.Discard) (parked.Done, error) {
	if err := x.Validate(); err != nil {
		return nil, err
	}
	if p.Store == nil {
		return nil, errors.New("discard: no store to record it in")
	}
	var done parked.Done
	recorded, removed := false, 0
	err := p.scan(ctx, func(d amqp.Delivery, e parked.Entry) (bool, error) {
		if e.MessageID != x.MessageID || !s.Sees(e.Tenant) {
			return true, nil
		}
		if !recorded {
			before, err := p.Store.ParkedDiscardList(ctx, store.ParkedDiscardListParams{MessageID: e.MessageID, Limit: 1})
			if err != nil {
				return false, fmt.Errorf("read the discards of %s: %w", e.MessageID, err)
			}
			if len(before) == 0 {
				if _, err := p.Store.ParkedDiscard(ctx, store.ParkedDiscardParams{
					Broker: true, Tenant: e.Tenant, MessageID: e.MessageID, NotificationID: e.NotificationID,
					Channel: e.Channel, ParkedReason: e.Reason, Reason: x.Reason, Actor: x.Actor,
				}); err != nil {
					return false, fmt.Errorf("record discard of %s: %w", e.MessageID, err)
				}
				done = parked.Done{e.Tenant: 1}
			}
			recorded = true
		}
		if err := p.remove(d); err != nil {
			return false, fmt.Errorf("%w: remove %s from parking: %w", parked.ErrCopyLeft, e.MessageID, err)
		}
		removed++
		return true, nil
	})
	if removed > 0 {
		p.logger().LogAttrs(ctx, slog.LevelInfo, "rabbitmq: discarded parked message",
			slog.String("message_id", x.MessageID), slog.Int("copies", removed))
	}
	if err == nil && !recorded {
		err = parked.ErrNotFound
	}
	return done, err
}

func (p *Parking) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

func (p *Parking) scan(ctx context.Context, fn func(d amqp.Delivery, e parked.Entry) (bool, error)) error {
	conn, _, err := dial(ctx, p.URL, "herald-parking")
	if err != nil {
		return err
	}
	defer conn.Close()
	return p.scanOn(ctx, conn, fn)
}

// scanOn gets the messages that are in the parking queue now, one at a
// time without acking, and hands each to fn until fn says stop. Messages fn
// does not ack return to the queue when the channel closes; scanOn waits
// (up to scanSettle) until the queue shows them ready again, because a
// quorum queue takes them back asynchronously and a scan that starts
// before that would miss them.
func (p *Parking) scanOn(ctx context.Context, conn *amqp.Connection, fn func(d amqp.Delivery, e parked.Entry) (bool, error)) error {
	p.scanning.Lock()
	defer p.scanning.Unlock()
	t := p.Topology.WithDefaults()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := t.Declare(ch); err != nil {
		_ = ch.Close()
		return err
	}
	q, err := ch.QueueDeclarePassive(t.ParkingQueue(), true, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return fmt.Errorf("inspect %s: %w", t.ParkingQueue(), err)
	}
	acked := 0
	err = p.visit(ctx, ch, t, q.Messages, &acked, fn)
	if cerr := ch.Close(); cerr != nil && err == nil && !errors.Is(cerr, amqp.ErrClosed) {
		err = fmt.Errorf("close channel: %w", cerr)
	}
	p.settle(ctx, conn, t, q.Messages-acked)
	return err
}

// visit gets at most n messages (only what was there when the scan
// started: a message requeued here and parked again while the scan runs
// is not visited twice) and counts those fn acked.
func (p *Parking) visit(ctx context.Context, ch *amqp.Channel, t Topology, n int, acked *int, fn func(d amqp.Delivery, e parked.Entry) (bool, error)) error {
	for range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, ok, err := ch.Get(t.ParkingQueue(), false)
		if err != nil {
			return fmt.Errorf("read %s: %w", t.ParkingQueue(), err)
		}
		if !ok {
			return nil
		}
		d.Acknowledger = countingAcknowledger{Acknowledger: d.Acknowledger, acked: acked}
		more, err := fn(d, entryOf(d))
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// scanSettle bounds how long a scan waits for the messages it held to be
// ready again.
const scanSettle = 10 * time.Second

// settle waits until the parking queue has at least want ready messages
// (fewer can stay if another process took some meanwhile: then it gives up
// after scanSettle).
func (p *Parking) settle(ctx context.Context, conn *amqp.Connection, t Topology, want int) {
	if want <= 0 {
		return
	}
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	deadline := time.Now().Add(scanSettle)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		q, err := ch.QueueDeclarePassive(t.ParkingQueue(), true, false, false, false, nil)
		if err != nil || q.Messages >= want || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// countingAcknowledger counts the acks of a scan's deliveries.
type countingAcknowledger struct {
	amqp.Acknowledger
	acked *int
}

func (c countingAcknowledger) Ack(tag uint64, multiple bool) error {
	err := c.Acknowledger.Ack(tag, multiple)
	if err == nil {
		*c.acked++
	}
	return err
}

// entryOf describes a parked message from its headers and body.
func entryOf(d amqp.Delivery) parked.Entry {
	e := parked.Entry{MessageID: d.MessageId, ParkedAt: d.Timestamp.UTC()}
	var job heraldtype.Job
	if json.Unmarshal(d.Body, &job) == nil && job.MessageID != "" {
		e.MessageID, e.NotificationID, e.Tenant, e.Kind = job.MessageID, job.NotificationID, job.Tenant, job.Kind
		e.Lane, e.Channel = job.Lane, job.Channel
	}
	if s, ok := d.Headers[HeaderTenant].(string); ok && e.Tenant == "" {
		e.Tenant = s
	}
	if s, ok := d.Headers[HeaderParkedAt].(string); ok {
		if at, err := time.Parse(time.RFC3339Nano, s); err == nil {
			e.ParkedAt = at
		}
	}
	if s, ok := d.Headers[HeaderFailureReason].(string); ok && s != "" {
		e.Reason = s
		return e
	}
	// Dead-lettered by the broker (the delivery limit): its own reason.
	e.Reason = "DEAD_LETTERED"
	if s, ok := d.Headers["x-first-death-reason"].(string); ok && s != "" {
		e.Reason = strings.ToUpper(s)
	}
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			if at, ok := t["time"].(time.Time); ok {
				e.ParkedAt = at.UTC()
			}
		}
	}
	return e
}
