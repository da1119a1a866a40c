// Package fallback is the channel policy "first" (issue 11 item 1): a
// kind's channels form an ordered chain, and a notification is sent on the
// first channel the recipient can receive on at send time, the next one
// only after a definite failure of the one before.
//
// # The chain
//
// Intake writes one outbox row per planned send, as for every kind; a
// first kind's rows carry their step (1, 2, 3… in the kind's order; the
// inbox, which intake writes at once, is no step). The rows of step 1 are
// PENDING; the rest are WAITING, a state no claimer and no relay takes.
// A step is one channel, so usually one row; push is one row per active
// device of the recipient (heraldtype.DeviceSend), and then the step has
// failed only when every device's send has.
//
// A store may write a chain lazily (store.LazyPlan, store/fallback.go;
// both SQLite and PostgreSQL do): intake writes step 1's rows alone, and
// the later steps' rows are written by the first write that needs them,
// in its transaction (step 1's definite failure, which releases step 2 as
// it writes it).
// The read API shows them the same either way. The common path, the
// first channel taking the notification, then writes no row for the
// steps it did not need.
//
// "Can receive on at send time" is the sender's pre-checks, made when the
// step is sent: no address (or no device) for the channel is
// SUPPRESSED(DESTINATION_UNAVAILABLE), no marketing consent on it
// SUPPRESSED(CONSENT_DENIED), and both are definite failures, so the next
// step goes at once.
//
// When a send of the chain ends, the very write that records how it ended
// (store DeliveryRecord after a provider call, DeliveryDecide for a
// pre-check's decision or a cancel, a person's discard, the stale sweep's
// UNKNOWN, the dispatcher's FAILED for a row it gave up before any
// delivery) moves the chain on in the same transaction:
//
//   - a definite failure (Definite: PERMANENT_FAILURE, RETRY_EXHAUSTED,
//     SUPPRESSED for DESTINATION_UNAVAILABLE or CONSENT_DENIED; and an
//     outbox row the dispatcher ended FAILED without a delivery row: it
//     gave up before any claim, so nothing was sent) counts
//     against the next step's rows; when every row of its step has failed
//     so, the next step's rows become PENDING, due now (released), and
//     record why (After: the failure);
//   - any other end (PROVIDER_ACCEPTED, DELIVERED, UNKNOWN, STORED, a
//     suppression for any other reason: quiet hours, a duplicate event,
//     the allow-list, expiry, a cancel, a discard…) ends every later
//     WAITING row SKIPPED with reason FALLBACK_NOT_NEEDED, recording that
//     end. UNKNOWN is here on purpose: the call may have reached the
//     recipient, and a second channel would then be a duplicate;
//   - RETRY_WAIT and PARKED have not ended: the chain waits for them.
//
// The count is kept on the waiting rows themselves (one increment per
// failed send, each send ends once: every end is a conditional write), so
// two devices of one step that fail at the same moment, in two
// transactions, release the next step exactly once, in whichever commits
// second; PostgreSQL re-reads the row it waited for.
//
// # Owner and deadline (DESIGN §3)
//
// A WAITING row is owned by the sends of the step before it: their end is
// its next write, in their transaction (the dispatcher's FAILED
// included). What ends without that write (a release lost to a bug or an
// old row) leaves a WAITING row with no owner; the
// watchdog finds it (store.UnownedWaiting: a WAITING
// row whose earlier steps have all ended, the last one more than the
// sweep grace ago) and moves it on through Decide, the same rule from the
// rows' states: release or skip. Reconciliation counts the same rows. The
// expiry sweep ends the WAITING rows of a notification whose row it
// expired (SKIPPED, after EXPIRED): the fallback's due-by has passed too;
// an erasure those of what it erased (after ERASED).
// A cancel suppresses WAITING rows like PENDING ones (their outbox rows
// are then released or skipped as the chain goes, and a released one
// finds its delivery ended and sends nothing).
//
// # Event suppression
//
// The sends of one chain are one notification's, and at most one step is
// under way at a time; a later step goes only after the earlier ones
// failed definitely. An event-level rule keyed without the channel sees a
// fallback as the same notification's send, not a duplicate.
package fallback

import (
	"github.com/heraldhq/herald/heraldtype"
)

// ReasonNotNeeded is the outbox reason of a WAITING row that was skipped:
// an earlier step ended in a way that is not a definite failure.
const ReasonNotNeeded = "FALLBACK_NOT_NEEDED"

// The decisions the read API shows for a planned send of a chain.
const (
	// DecisionFirst: step 1, sent without waiting.
	DecisionFirst = "FIRST"
	// DecisionWaiting: waits for the earlier steps to end.
	DecisionWaiting = "WAITING"
	// DecisionUsed: released after a definite failure of the step before.
	DecisionUsed = "USED"
	// DecisionSkipped: not sent; an earlier step ended otherwise.
	DecisionSkipped = "SKIPPED"
)

// Definite reports whether a send that ended in state, with reason, failed
// definitely: nothing reached the recipient on that channel and nothing
// will, so the next channel may go.
func Definite(state heraldtype.DeliveryState, reason string) bool {
	switch state {
	case heraldtype.DeliveryPermanentFailure, heraldtype.DeliveryRetryExhausted:
		return true
	case heraldtype.DeliverySuppressed:
		return reason == heraldtype.ReasonDestinationUnavailable || reason == heraldtype.ReasonConsentDenied
	}
	return false
}

// Cause is how a send ended, as the step after it records it (After): the
// reason of a suppression, else the state.
func Cause(state heraldtype.DeliveryState, reason string) string {
	if state == heraldtype.DeliverySuppressed && reason != "" {
		return reason
	}
	return string(state)
}

// Send is one planned send of a chain as the store holds it.
type Send struct {
	// Step is its place in the chain, from 1.
	Step   int
	Outbox heraldtype.OutboxState
	// Delivery and Reason are its delivery row's ("" when none).
	Delivery heraldtype.DeliveryState
	Reason   string
}

// end says whether s has ended, whether that was a definite failure, and
// its Cause. A send ended by its outbox row alone failed definitely when
// the dispatcher gave it up (FAILED: no claim, so no call, was made);
// EXPIRED, SKIPPED, or DONE with no delivery row did not.
func (s Send) end() (ended, definite bool, cause string) {
	if s.Delivery != "" {
		if !s.Delivery.Terminal() {
			return false, false, ""
		}
		return true, Definite(s.Delivery, s.Reason), Cause(s.Delivery, s.Reason)
	}
	switch s.Outbox {
	case heraldtype.OutboxFailed:
		return true, true, string(s.Outbox)
	case heraldtype.OutboxExpired, heraldtype.OutboxSkipped, heraldtype.OutboxDone:
		return true, false, string(s.Outbox)
	}
	// PENDING, CLAIMED, PUBLISHING, WAITING; PUBLISHED without a delivery
	// is a copy still in the broker.
	return false, false, ""
}

// LeftUnsent reports whether a chain has ended with nothing sent: every
// send of it has ended in a definite failure, and some were skipped
// (SKIPPED, never sent). A chain skips its later steps when a send ends in
// anything but a definite failure; a later word that turns that end into
// one (a delivery report, a status look-up) leaves the chain so, and
// nothing in herald moves it again (package settle alerts it).
func LeftUnsent(sends []Send) bool {
	skipped := false
	for _, s := range sends {
		if s.Delivery == "" && s.Outbox == heraldtype.OutboxSkipped {
			skipped = true
			continue
		}
		if ended, definite, _ := s.end(); !ended || !definite {
			return false
		}
	}
	return skipped
}

// Verdict is what Decide says to do with a chain's WAITING rows.
type Verdict int

const (
	// Wait: an earlier step has not ended; its end will move the chain.
	Wait Verdict = iota
	// Release the rows of Decision.Step: PENDING, due now.
	Release
	// Skip every WAITING row: SKIPPED(FALLBACK_NOT_NEEDED).
	Skip
)

// Decision is Decide's answer.
type Decision struct {
	Verdict Verdict
	// Step is the step to release.
	Step int
	// After is the Cause of the end that decided it.
	After string
}

// Decide is the chain's rule applied to its rows as they are: the
// watchdog's repair, for a chain whose end was not followed by its write.
// It looks at the first step that waits and the steps before it: an end
// that is not a definite failure skips every waiting row; when every send
// of the step just before has failed definitely (and none before it ended
// otherwise) that step is released; anything still under way, Wait.
func Decide(sends []Send) Decision {
	k := 0
	for _, s := range sends {
		if s.Outbox == heraldtype.OutboxWaiting && (k == 0 || s.Step < k) {
			k = s.Step
		}
	}
	if k == 0 {
		return Decision{Verdict: Wait}
	}
	d := Decision{Verdict: Release, Step: k}
	for _, s := range sends {
		if s.Step >= k {
			continue
		}
		ended, definite, cause := s.end()
		switch {
		case !ended:
			d.Verdict = Wait
		case !definite:
			return Decision{Verdict: Skip, After: cause}
		case s.Step == k-1 && d.After == "":
			d.After = cause
		}
	}
	if d.Verdict == Wait {
		return Decision{Verdict: Wait}
	}
	return d
}
