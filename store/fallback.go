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
