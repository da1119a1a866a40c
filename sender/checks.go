package sender

import (
	"context"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/store"
)

// Check is one rule of the send policy (quiet hours, text limits, the
// non-production allow-list…), run in the pre-checks once the message is
// rendered and before the pace and the claim, so a rule never holds a
// claim and never spends a provider's token. Config.Checks run in order;
// the first ruling that is not Go wins.
type Check interface {
	Check(ctx context.Context, s Subject) Ruling
}

// Subject is what a rule sees of a send about to be made.
type Subject struct {
	Job heraldtype.Job
	// Category is the kind's (alert, transactional, marketing, internal).
	Category heraldtype.Lane
	// Profile is the recipient's, as read now ("" fields when there is
	// none).
	Profile store.Profile
	// Message is what the provider will be given; a rule may adjust it.
	Message *provider.Message
	// Provider names the provider that will be called.
	Provider string
}

// Ruling is a rule's word on a send. The zero Ruling lets it go on.
type Ruling struct {
	// State, with Reason, decides not to send: SUPPRESSED (a decision,
	// final) or PARKED (the same failure would recur; a person requeues).
	State  heraldtype.DeliveryState
	Reason string
	// Defer, with Reason and no State, puts the send off: nothing is
	// written, and the transport offers the job again after Defer (with
	// the db transport its outbox row waits, not claimable, until then).
	Defer time.Duration
	// Take, on a ruling that lets the send go on, is a key the claim
	// takes in its own write (event-level suppression's): the rule's
	// decision is made by the claim, as close to the call as a decision
	// not to send can be written.
	Take ClaimTake
}

// ClaimTake is a rule's part in the claim (Ruling.Take).
type ClaimTake interface {
	// Params is the event key the claim takes (store.DeliveryClaimParams.Event).
	Params() store.EventKeyTakeParams
	// Taken rules on what the claim's take found: Go, or a ruling not to
	// send (the key is another notification's).
	Taken(ctx context.Context, res store.EventKeyTakeResult) Ruling
	// Failed rules on the send when the key could not be taken
	// (store.ErrEventKeys) for Wait: Go claims without it.
	Failed(ctx context.Context, err error) Ruling
	// Wait is how long a claim whose key cannot be taken is tried again
	// before Failed rules (at most Config.StoreRetry).
	Wait() time.Duration
}

// Go reports whether v lets the send go on.
func (v Ruling) Go() bool { return v.State == "" && v.Defer <= 0 }

// Suppress, ParkFor and DeferFor are rulings.
func Suppress(reason string) Ruling {
	return Ruling{State: heraldtype.DeliverySuppressed, Reason: reason}
}
func ParkFor(reason string) Ruling { return Ruling{State: heraldtype.DeliveryParked, Reason: reason} }
func DeferFor(d time.Duration, reason string) Ruling {
	return Ruling{Defer: d, Reason: reason}
}

// Apply carries out a ruling on job without a provider call: a decision
// is recorded as the pre-checks' decisions are; a deferral answers Retry
// after its delay, writing nothing. A dispatcher's own checks (the db
// transport's Claimer.Gate) go through it, so their decisions are written
// exactly as the sender's.
func (s *Sender) Apply(ctx context.Context, job heraldtype.Job, v Ruling) Result {
	if v.State != "" {
		return s.decide(ctx, job, decision{state: v.State, reason: v.Reason})
	}
	return Result{Verdict: Retry, Reason: v.Reason, Delay: v.Defer}
}

// runChecks runs Config.Checks on a send that passed the built-in
// pre-checks; the first ruling that is not Go wins. A Go carries the
// last Take a rule asked for.
func (s *Sender) runChecks(ctx context.Context, sub Subject) Ruling {
	var take ClaimTake
	for _, c := range s.Checks {
		v := c.Check(ctx, sub)
		if !v.Go() {
			return v
		}
		if v.Take != nil {
			take = v.Take
		}
	}
	return Ruling{Take: take}
}
