package store

import (
	"github.com/heraldhq/herald/fallback"
	"github.com/heraldhq/herald/heraldtype"
)

// A fallback chain (channel policy first, package fallback) in the store.
//
// NotificationCreateParams.Fallback makes the channels other than the
// inbox a chain: each outbox row gets its step (1, 2…, push's device rows
// sharing one), step 1 PENDING and the rest WAITING. The drivers keep, on
// each row, fallback_step (NULL off a chain), fallback_fails (the definite
// failures counted against it from the step before) and fallback_after
// (the end that released or skipped it).
//
// Two delegated writes join the dispatcher's table, as DeliveryRecord's
// settle does: the write that ends a send of a chain (DeliveryRecord,
// DeliveryDecide, DeliverySweepStale, ParkedDiscard) moves the chain on in its own
// transaction, only if it ended the send (a write that did not take moves
// nothing); so does the dispatcher's OutboxComplete to FAILED of a chain's
// row without a delivery row (it gave up before any claim: a definite
// failure, cause FAILED): a definite failure (fallback.Definite) adds one to
// fallback_fails of the next step's WAITING rows and makes them PENDING,
// due now, once it equals the number of rows of the failed step; any
// other end makes every later WAITING row SKIPPED with reason
// FALLBACK_NOT_NEEDED; a RETRY_WAIT or PARKED write moves nothing.
// OutboxExpire ends the WAITING rows of each notification whose row it
// expired (SKIPPED, after EXPIRED), RecipientErase those of what it
// erased (after ERASED); the watchdog's UNKNOWN for a stale claim
// (UnownedRedrive) moves it as the stale sweep's does. Receipts and
// reports move only a delivery that has already ended (PROVIDER_ACCEPTED,
// UNKNOWN), whose end moved the chain. A WAITING row left behind by any
// other end (a release lost) is the watchdog's (UnownedWaiting).

// # Lazy chains
//
// A driver may write a chain lazily (LazyPlan): intake writes the first
// step's rows alone, each carrying the later steps' channels, and the
// later steps' rows, WAITING, are written by the first write that needs
// them, in its transaction: the definite failure of a first step's send
// (which then releases step 2 in the same transaction), and before any
// write that would otherwise have met the WAITING rows (a cancel's
// decision on a later step, an erasure, a report or receipt that moves
// an ended first step's delivery, so the step records the end it had).
// Any other end of the first step ended the chain there, and the read API
// shows the unwritten steps SKIPPED, after that end (WithPlannedSteps), as
// the eager rows would have been skipped by it: the end of a step's only
// send writes nothing more, and a driver may write them SKIPPED (PostgreSQL
// does for a step of several sends, where two devices' ends can meet).
// The common path of a first kind, its first channel accepting, thus
// writes one row, not one per step, and ends with no chain statement.
// Who owns the unwritten steps is unchanged: the first step's sends,
// whose end writes them or ends the chain. A chain one of whose later
// steps is push is written whole: a push step is one send per device,
// decided when its rows are written, and the read API shows a waiting
// step as it will be sent.

// LazyPlan is the later steps' channels of a chain a driver may write
// lazily (a first kind with more than one step, no later step push), in
// order; nil otherwise.
func LazyPlan(p NotificationCreateParams) []heraldtype.Channel {
	if !p.Fallback {
		return nil
	}
	var later []heraldtype.Channel
	first := true
	for _, ch := range p.Channels {
		switch {
		case ch == heraldtype.ChannelInbox:
		case first:
			first = false
		case ch == heraldtype.ChannelPush:
			return nil
		default:
			later = append(later, ch)
		}
	}
	return later
}

// WithPlannedSteps returns dvs, a notification's planned sends as its
// rows hold them, with the later steps of a lazy chain that have no rows
// yet added, as the eager rows would read: WAITING while a first step's
// send is under way (or, should every one have failed definitely with
// its release lost, still: nothing was sent), else SKIPPED with reason
// FALLBACK_NOT_NEEDED after the end that ended the chain (fallback.Decide
// on the first step's sends). Unchanged when no send carries a plan or a
// later step's row exists.
func WithPlannedSteps(notificationID string, dvs []DeliveryView) []DeliveryView {
	var (
		plan  []heraldtype.Channel
		first DeliveryView
		sends []fallback.Send
	)
	for _, dv := range dvs {
		switch {
		case dv.Fallback == nil:
			continue
		case dv.Fallback.Step > 1:
			return dvs // written
		case dv.Planned != nil && plan == nil:
			plan, first = dv.Planned, dv
		}
		s := fallback.Send{Step: dv.Fallback.Step, Outbox: dv.OutboxState}
		if dv.Delivery != nil {
			s.Delivery, s.Reason = dv.Delivery.State, dv.Delivery.Reason
		}
		sends = append(sends, s)
	}
	if len(plan) == 0 {
		return dvs
	}
	d := fallback.Decide(append(sends, fallback.Send{Step: 2, Outbox: heraldtype.OutboxWaiting}))
	for i, ch := range plan {
		v := DeliveryView{MessageID: MessageID(notificationID, ch), Channel: ch, OutboxState: heraldtype.OutboxWaiting,
			AvailableAt: first.AvailableAt, OutboxUpdated: first.OutboxUpdated, Fallback: &FallbackStep{Step: i + 2}}
		if d.Verdict == fallback.Skip {
			v.OutboxState, v.OutboxReason, v.Fallback.After = heraldtype.OutboxSkipped, fallback.ReasonNotNeeded, d.After
		}
		dvs = append(dvs, v)
	}
	return dvs
}

// FallbackSteps numbers channels, a kind's channels in its order, as the
// steps of a chain (1, 2…) when chain is set; the inbox, written at
// intake, is no step (0), and off a chain every channel is 0.
func FallbackSteps(channels []heraldtype.Channel, chain bool) []int {
	steps := make([]int, len(channels))
	if !chain {
		return steps
	}
	n := 0
	for i, ch := range channels {
		if ch != heraldtype.ChannelInbox {
			n++
			steps[i] = n
		}
	}
	return steps
}

// FallbackStep is a planned send's place in its notification's fallback
// chain (DeliveryView.Fallback).
type FallbackStep struct {
	// Step is the place, from 1.
	Step int
	// After is how the step before ended, when that released or skipped
	// this one (fallback.Cause); "" otherwise.
	After string
}

// FallbackDecision is what the read API shows for the chain's send dv
// (fallback.Decision*), or "" when dv is on no chain.
func (dv DeliveryView) FallbackDecision() string {
	f := dv.Fallback
	switch {
	case f == nil:
		return ""
	case f.Step == 1:
		return fallback.DecisionFirst
	case dv.OutboxState == heraldtype.OutboxWaiting:
		return fallback.DecisionWaiting
	case dv.OutboxState == heraldtype.OutboxSkipped:
		return fallback.DecisionSkipped
	case f.After != "":
		return fallback.DecisionUsed
	}
	// Ended before its turn without a release (expired with its
	// notification): not used.
	return fallback.DecisionSkipped
}

// UnownedWaiting is a WAITING row of a fallback chain whose earlier steps
// have all ended, and which neither their writes nor the expiry moved on
// (a release lost, a send ended by a write that does not move the chain).
// Deadline: the row's available_at (when the chain could first start),
// and the last end of an earlier step must be past the grace too. The
// re-drive applies fallback.Decide to the chain as it is then.
const UnownedWaiting UnownedKind = "waiting"
