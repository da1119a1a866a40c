// Package cancel cancels the sends of a notification that have not gone out
// (POST /v1/notifications/{id}/cancel).
//
// Every planned send that is still waiting — PENDING, SCHEDULED, RETRY_WAIT,
// PARKED, or a fallback step's WAITING, as the read API shows it — ends
// SUPPRESSED with reason CANCELLED. A send that is SENDING (its provider call may be in flight) or
// has ended (sent, failed, suppressed, EXPIRED, FAILED) is reported as it
// is and not touched. Cancelling again changes nothing and answers the same.
//
// A send in flight is not touched, but it is not tried again either. The
// cancel first marks the notification cancelled (store.Cancels), and
// every claim of a send reads that mark: if the call in flight then fails
// for now (RETRY_WAIT), or the send is PARKED and later requeued, its
// retry's claim ends it SUPPRESSED(CANCELLED) without a call, as it does
// for a cancelled campaign's send. Its fallback chain moves on as after
// any end: the steps after it are skipped. The mark is written before the
// sends are read, so a send the cancel reports in flight always sees it,
// and a send claimed after the mark is not sent. So the mark alone keeps
// every send from going out: a cancel that fails part-way (the store went
// away after the mark, or between two decisions) returns the error having
// decided some sends or none, and a send it did not decide ends at its
// claim, SUPPRESSED(CANCELLED), the fallback steps after it SKIPPED. With
// the db transport the claimer's claim reads the mark as well
// (heraldtype.Known.Cancelled), and the sender ends such a send so before
// its rules; with the rabbitmq transport the consumer's copy carries no
// mark, so the sender's rules before the claim still run on it: one may
// end it first, SUPPRESSED for another reason, and its rate limit's token
// is spent. A decision to park it reads the mark first and ends it
// SUPPRESSED(CANCELLED) instead, so no PARKED alert asks a person about
// it. The repeat the error asks for (503) decides them all at once and
// answers what became of each.
//
// Race safety comes from the sender's own guard: a cancel is the decision
// write the sender makes when it decides not to send (store DeliveryDecide),
// an insert-or-update on the message_id's unique delivery row that succeeds
// only while no row exists or the row is waiting (RETRY_WAIT, PARKED). The
// sender's claim (DeliveryClaim) is an insert on the same unique key, or a
// conditional RETRY_WAIT → SENDING update of the same row. So a cancel and
// a claim racing for one message cannot both win: if the cancel wins, the
// claim finds SUPPRESSED and the sender acks its copy without a provider
// call; if the claim wins (its statement began before the mark committed),
// the cancel finds SENDING and reports it.
//
// Ownership stays as DESIGN §1 splits it: the cancel writes only the
// delivery row, through that guarded write, and never the dispatcher's
// outbox row. The outbox row is left to its owner: a claimer (db transport)
// or a consumer (rabbitmq) still picks the message up when it is due, finds
// the SUPPRESSED row and finishes it without a call, and the outbox row ends
// DONE (or stays PUBLISHED). With the rabbitmq transport a cancelled PARKED
// message's copy stays in the parking queue until it is requeued (the
// sender then acks it without a call) or discarded.
package cancel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// ReasonCancelled is the reason of a send a cancel suppressed.
const ReasonCancelled = heraldtype.ReasonCancelled

// ErrNotFound: no notification with that id for the tenant.
var ErrNotFound = errors.New("cancel: no such notification")

// Store is what a cancel reads and writes.
type Store interface {
	store.Notifications
	store.Cancels
	store.Deliveries
}

// Canceller cancels notifications.
type Canceller struct {
	Store Store
	// Metrics counts the sends a cancel moved to SUPPRESSED among the
	// delivery states written (herald_deliveries_total) and the request
	// (herald_cancels_total). May be nil.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Result is what a cancel found and did, read after its writes.
type Result struct {
	ID         string  `json:"id"`
	Deliveries []Entry `json:"deliveries"`
}

// Entry is one planned send after the cancel.
type Entry struct {
	MessageID string `json:"message_id"`
	Channel   string `json:"channel"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	// Cancelled: the send is SUPPRESSED(CANCELLED), by this call or an
	// earlier one.
	Cancelled bool `json:"cancelled"`
}

// Waiting reports whether a send the read API shows in state has not gone
// out and nothing is under way for it: a cancel suppresses it.
func Waiting(state string) bool {
	switch state {
	case heraldtype.ViewPending, heraldtype.ViewScheduled,
		string(heraldtype.DeliveryRetryWait), string(heraldtype.DeliveryParked),
		string(heraldtype.OutboxWaiting): // a fallback step (package fallback)
		return true
	}
	return false
}

// Cancel suppresses every waiting send of tenant's notification id and
// returns the notification's sends as they are afterwards.
func (c *Canceller) Cancel(ctx context.Context, tenant, id string) (Result, error) {
	// The mark first: a send the read below finds in flight, and any
	// send claimed after it, sees it.
	err := c.Store.NotificationCancelMark(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Result{}, ErrNotFound
	}
	if err != nil {
		return Result{}, fmt.Errorf("mark notification cancelled: %w", err)
	}
	v, err := c.Store.NotificationGet(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Result{}, ErrNotFound // removed by retention since
	}
	if err != nil {
		return Result{}, fmt.Errorf("read notification: %w", err)
	}
	cancelled := 0
	for _, dv := range v.Deliveries {
		if state, _, _ := v.EntryState(dv); !Waiting(state) {
			continue
		}
		// The sender's decision write: it takes only if no delivery row
		// exists or the row is waiting, so never over a claim or a result.
		ok, err := c.Store.DeliveryDecide(ctx, store.DeliveryDecideParams{
			MessageID: dv.MessageID, NotificationID: v.ID, Tenant: v.Tenant, Channel: dv.Channel,
			State: heraldtype.DeliverySuppressed, Reason: ReasonCancelled, Lane: v.Lane,
		})
		if err != nil {
			return Result{}, fmt.Errorf("cancel %s: %w", dv.MessageID, err)
		}
		if ok {
			cancelled++
			c.Metrics.Delivery(v.Lane, dv.Channel, heraldtype.DeliverySuppressed)
		}
	}
	c.Metrics.Cancel(cancelled)
	if cancelled > 0 {
		c.logger().LogAttrs(ctx, slog.LevelInfo, "cancel: suppressed waiting sends",
			slog.String("tenant", v.Tenant), slog.String("notification_id", v.ID), slog.Int("cancelled", cancelled))
	}
	// The answer is read after the writes, so it shows what won each race
	// and is the same for every repeat of the cancel.
	after, err := c.Store.NotificationGet(ctx, tenant, id)
	if err != nil {
		return Result{}, fmt.Errorf("read notification after cancel: %w", err)
	}
	res := Result{ID: after.ID, Deliveries: make([]Entry, 0, len(after.Deliveries))}
	for _, dv := range after.Deliveries {
		state, reason, _ := after.EntryState(dv)
		res.Deliveries = append(res.Deliveries, Entry{
			MessageID: dv.MessageID, Channel: string(dv.Channel.Base()), State: state, Reason: reason,
			Cancelled: state == string(heraldtype.DeliverySuppressed) && reason == ReasonCancelled,
		})
	}
	return res, nil
}

func (c *Canceller) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}
