package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Reconciler is reconciliation's side of the store (DESIGN §6, package
// reconcile): counting, from the source of truth down, what every accepted
// notification's planned sends have come to; recreating the planned sends
// of a notification that has none (nothing can have been sent for it); and
// keeping each run's report.
type Reconciler interface {
	// ReconcileCount walks every notification once, in pages of ids, each
	// page in a short read-only transaction of its own, and counts its
	// planned sends by the state the read API shows and what is wrong with
	// them (see ReconcileCounts). Each page is a few set-based statements;
	// nothing makes a round trip per row.
	ReconcileCount(ctx context.Context, p ReconcileCountParams) (ReconcileCounts, error)
	// ReconcileOutboxRedrive puts each planned send of rows (NoDelivery
	// findings) back to PENDING, due now, with reason REDRIVEN and a fresh
	// fencing token, as the watchdog re-drives a row, each only if its
	// outbox row is still DONE and its message still has no delivery row
	// (so no provider call can have been made for it), and returns the
	// message ids it moved.
	ReconcileOutboxRedrive(ctx context.Context, rows []ReconcileFinding) ([]string, error)
	// ReconcileOutboxRecreate writes an outbox row per channel of
	// p.Channels for notification p.NotificationID, due at its send_at or
	// now, in one statement conditional on the notification existing and
	// having neither an outbox row nor a delivery row, and returns how many
	// it wrote (0 when the condition no longer holds). Each row is PENDING,
	// but for a fallback chain (p.Fallback) each carries its step, as
	// intake writes a chain: step 1 PENDING, the later steps WAITING.
	ReconcileOutboxRecreate(ctx context.Context, p ReconcileOutboxRecreateParams) (int, error)
	// ReconcileRunSave keeps one run's report and deletes all but the newest
	// keep runs, in one transaction.
	ReconcileRunSave(ctx context.Context, run ReconcileRun, keep int) error
	// ReconcileRunLast returns the newest kept run, or ErrNotFound before
	// the first.
	ReconcileRunLast(ctx context.Context) (ReconcileRun, error)
}

// ReconcileCountParams tune a count.
type ReconcileCountParams struct {
	// Grace is how long after the dispatcher finished a planned send
	// (outbox DONE) it may still have no delivery row before it counts in
	// NoDelivery, and how long after its due time a PENDING
	// row may wait for a claimer before it counts in Overdue.
	Grace time.Duration
	// Sample caps the findings of each kind returned with their ids.
	// Defaults to 100.
	Sample int
	// UnknownSample caps the Unknown findings returned with their ids
	// (listed, not repaired: a report needs few). Defaults to Sample.
	UnknownSample int
	// Page is how many notifications one statement reads. Defaults to
	// 10,000.
	Page int
	// Pace, when set, runs after each page with how long its statements
	// took; it may sleep to spread the count's load on the database (no
	// transaction is open meanwhile), and its error ends the count.
	Pace func(ctx context.Context, took time.Duration) error
}

// SampleOrDefault returns p.Sample or its default.
func (p ReconcileCountParams) SampleOrDefault() int {
	if p.Sample <= 0 {
		return 100
	}
	return p.Sample
}

// UnknownSampleOrDefault returns p.UnknownSample or its default.
func (p ReconcileCountParams) UnknownSampleOrDefault() int {
	if p.UnknownSample <= 0 {
		return p.SampleOrDefault()
	}
	return p.UnknownSample
}

// PageOrDefault returns p.Page or its default.
func (p ReconcileCountParams) PageOrDefault() int {
	if p.Page <= 0 {
		return 10000
	}
	return p.Page
}

// ReconcileCounts is what ReconcileCount found: each notification as it
// stood when its page was read.
type ReconcileCounts struct {
	// Now is the store's time when the count began; the graces and
	// SCHEDULED are measured from it.
	Now time.Time
	// Accepted counts the notifications.
	Accepted int64
	// ByState counts the planned sends (outbox rows) by the state
	// NotificationView.EntryState shows for them: SCHEDULED and PENDING
	// before a delivery row exists, then the delivery's state, EXPIRED or
	// FAILED when the outbox row ended without a send.
	ByState map[string]int64
	// MissingOutbox are notifications without a single outbox row. Every
	// kind plans at least one send and intake writes a notification and its
	// outbox rows in one transaction, so this is never a passing state.
	// MessageID is empty in these findings.
	MissingOutbox ReconcileFindings
	// NoDelivery are planned sends whose outbox row the dispatcher
	// finished (DONE) more than Grace ago that still have no delivery row:
	// the sender writes one before it answers Done, so the path was closed
	// without a result and nothing owns the send any more. (A PUBLISHED row
	// without a delivery is the watchdog's to find: Watchdog,
	// UnownedPublished.)
	NoDelivery ReconcileFindings
	// Unknown are deliveries in UNKNOWN: ended, but settled only by a
	// provider's status look-up or a receipt.
	Unknown ReconcileFindings
	// Overdue counts PENDING planned sends without a delivery row whose due
	// time passed more than Grace ago: owned by a claimer (or the relay)
	// that has not got to them, a backlog rather than a loss.
	Overdue int64
}

// ReconcileFindings is a count and up to Sample of its rows, in id order.
type ReconcileFindings struct {
	Count  int64
	Sample []ReconcileFinding
}

// ReconcileFinding is one row a count found: ids and the kind, no personal
// data.
type ReconcileFinding struct {
	NotificationID string
	// MessageID and Channel are the planned send's; empty for a
	// notification finding.
	MessageID string
	Channel   heraldtype.Channel
	Tenant    string
	Kind      string
}

// AddGroup counts n planned sends whose outbox row is in outboxState and
// whose delivery row is in deliveryState ("" for none), scheduled of them
// with a send_at after Now, by the state the read API shows: the drivers
// group their rows by the two states and leave the read API's rule to
// NotificationView.EntryState, so the two cannot drift apart. An empty
// outboxState is a notification without planned sends, which adds n to
// MissingOutbox.Count instead.
func (c *ReconcileCounts) AddGroup(outboxState, deliveryState string, n, scheduled int64) {
	if outboxState == "" {
		c.MissingOutbox.Count += n
		return
	}
	if c.ByState == nil {
		c.ByState = map[string]int64{}
	}
	dv := DeliveryView{OutboxState: heraldtype.OutboxState(outboxState)}
	if deliveryState != "" {
		dv.Delivery = &Delivery{State: heraldtype.DeliveryState(deliveryState)}
	}
	later := c.Now.Add(time.Hour)
	for _, part := range []struct {
		n      int64
		sendAt *time.Time
	}{{n - scheduled, nil}, {scheduled, &later}} {
		if part.n == 0 {
			continue
		}
		state, _, _ := NotificationView{SendAt: part.sendAt, Now: c.Now}.EntryState(dv)
		c.ByState[state] += part.n
	}
}

// ReconcileOutboxRecreateParams names the planned sends to recreate.
type ReconcileOutboxRecreateParams struct {
	NotificationID string
	// Channels are the notification's kind's channels, one row each.
	Channels []heraldtype.Channel
	// Fallback: the kind's channels are a fallback chain (policy first;
	// NotificationCreateParams.Fallback).
	Fallback bool
}

// ReconcileRun is one kept reconciliation run.
type ReconcileRun struct {
	// ID orders the runs; the store assigns it.
	ID         int64
	StartedAt  time.Time
	FinishedAt time.Time
	// Report is the run's report as package reconcile wrote it (JSON),
	// returned byte for byte.
	Report json.RawMessage
}
