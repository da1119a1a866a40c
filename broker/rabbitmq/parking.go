package rabbitmq

import (
	"context"
	"encoding/json"
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

// Parking lists and requeues the parking queue. It reads the queue with
// basic.get and no ack, so a listing takes nothing away: every message it
// held goes back to the queue when its channel closes. A requeue publishes a
// copy of the message (same message id, same body) to its lane, waits for
// the confirm, and only then acks it off the parking queue; a crash between
// the two leaves a second copy, which the deliveries claim absorbs.
//
// While a scan holds a message (unacked), no other scan can see it, so two
// scans at once would each miss the other's messages: scans in one process
// take turns. Scans in two processes at once can still miss each other's;
// a requeue that finds nothing then answers not found, and a retry finds it.
type Parking struct {
	scanning sync.Mutex

	URL      string
	Topology Topology
	// Store, when set, turns the requeued message's PARKED delivery into a
	// due retry first, so the sender's claim accepts it again.
	Store          store.Parked
	ConfirmTimeout time.Duration
	Logger         *slog.Logger
}

var _ parked.Service = (*Parking)(nil)

// List returns up to limit parked messages of tenant ("" for all), in queue order.
func (p *Parking) List(ctx context.Context, tenant string, limit int) ([]parked.Entry, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []parked.Entry
	err := p.scan(ctx, func(d amqp.Delivery, e parked.Entry) (bool, error) {
		if tenant == "" || e.Tenant == tenant {
			out = append(out, e)
		}
		return len(out) < limit, nil
	})
	return out, err
}

// Requeue moves parked messages of tenant ("" for all) back to their lanes:
// the one with messageID (every copy of it), or all when messageID is "".
func (p *Parking) Requeue(ctx context.Context, tenant, messageID string) (int, error) {
	conn, err := dial(ctx, p.URL, "herald-parking")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	pubCh, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open channel: %w", err)
	}
	conf, err := newConfirmer(pubCh, ConfirmHooks{})
	if err != nil {
		return 0, fmt.Errorf("enable publisher confirms: %w", err)
	}
	timeout := p.ConfirmTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	t := p.Topology.WithDefaults()
	n := 0
	err = p.scanOn(ctx, conn, func(d amqp.Delivery, e parked.Entry) (bool, error) {
		if (tenant != "" && e.Tenant != tenant) || (messageID != "" && e.MessageID != messageID) {
			return true, nil
		}
		if !e.Lane.Valid() {
			p.logger().LogAttrs(ctx, slog.LevelWarn, "rabbitmq: parked message has no lane; left parked",
				slog.String("message_id", e.MessageID), slog.String("reason", e.Reason))
			return true, nil
		}
		if p.Store != nil && e.Tenant != "" {
			if _, err := p.Store.ParkedRequeue(ctx, store.ParkedRequeueParams{Tenant: e.Tenant, MessageID: e.MessageID}); err != nil {
				return false, fmt.Errorf("requeue delivery %s: %w", e.MessageID, err)
			}
		}
		msg := copyOf(d, nil)
		delete(msg.Headers, HeaderFailureReason)
		delete(msg.Headers, HeaderParkedAt)
		delete(msg.Headers, HeaderBackoffs)
		msg.Headers["x-herald-requeued-from"] = e.Reason
		b := newBatch(1, timeout)
		if err := conf.publish(ctx, b, 0, t.Exchange(), string(e.Lane), msg); err != nil {
			return false, fmt.Errorf("republish %s: %w", e.MessageID, err)
		}
		if err := b.Wait()[0]; err != nil {
			return false, fmt.Errorf("republish %s: %w", e.MessageID, err)
		}
		if err := d.Ack(false); err != nil {
			return false, fmt.Errorf("remove %s from parking: %w", e.MessageID, err)
		}
		n++
		p.logger().LogAttrs(ctx, slog.LevelInfo, "rabbitmq: requeued parked message",
			slog.String("message_id", e.MessageID), slog.String("lane", string(e.Lane)), slog.String("reason", e.Reason))
		return true, nil
	})
	if err == nil && messageID != "" && n == 0 {
		err = parked.ErrNotFound
	}
	return n, err
}

func (p *Parking) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

func (p *Parking) scan(ctx context.Context, fn func(d amqp.Delivery, e parked.Entry) (bool, error)) error {
	conn, err := dial(ctx, p.URL, "herald-parking")
	if err != nil {
		return err
	}
	defer conn.Close()
	return p.scanOn(ctx, conn, fn)
}

// scanOn gets the messages that are in the parking queue now, one at a
// time without acking, and hands each to fn until fn says stop. Messages fn
// does not ack return to the queue when the channel closes.
func (p *Parking) scanOn(ctx context.Context, conn *amqp.Connection, fn func(d amqp.Delivery, e parked.Entry) (bool, error)) error {
	p.scanning.Lock()
	defer p.scanning.Unlock()
	t := p.Topology.WithDefaults()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if err := t.Declare(ch); err != nil {
		return err
	}
	q, err := ch.QueueDeclarePassive(t.ParkingQueue(), true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", t.ParkingQueue(), err)
	}
	// Only what is there now: a message requeued here and parked again
	// while the scan runs is not visited twice.
	for range q.Messages {
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
		more, err := fn(d, entryOf(d))
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// entryOf describes a parked message from its headers and body.
func entryOf(d amqp.Delivery) parked.Entry {
	e := parked.Entry{MessageID: d.MessageId, ParkedAt: d.Timestamp.UTC()}
	var job heraldtype.Job
	if json.Unmarshal(d.Body, &job) == nil && job.MessageID != "" {
		e.MessageID, e.NotificationID, e.Tenant, e.Lane, e.Channel = job.MessageID, job.NotificationID, job.Tenant, job.Lane, job.Channel
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
