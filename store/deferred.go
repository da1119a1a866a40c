package store

import (
	"context"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Deferrals puts a published message back into the outbox when its send
// was deferred for longer than a broker should hold it (package
// broker/rabbitmq, "Long deferrals wait in the outbox").
//
// With the db transport a deferral (sender.DeferFor: quiet hours) leaves
// the claimed outbox row PENDING with available_at at the time it may go,
// and nothing else holds the message meanwhile. With rabbitmq the row was
// PUBLISHED before the consumer's sender deferred it, and a PUBLISHED row
// with no delivery row is, after watchdog_published_grace, one the
// watchdog re-drives (UnownedPublished). OutboxDefer gives the consumer
// the db transport's shape instead: the row goes back to PENDING, due
// after the deferral, and the consumer drops its copy. The row is then
// owned as every PENDING row is (the relay's claim at available_at, or
// OutboxExpire at expires_at if that comes first), and a delivery waiting
// in RETRY_WAIT behind it is owned by it (UnownedRetryWait skips a PENDING
// outbox row).
type Deferrals interface {
	// OutboxDefer moves the outbox row of one publication (p.Fence: the
	// row and the token of the relay's claim that published it) from
	// PUBLISHED back to PENDING, due p.Delay from now by the store's
	// clock, with last_reason p.Reason, not counted as a failed attempt.
	// The write is conditional on the row still being PUBLISHED with that
	// token: a copy of an older publication, or a row the relay has not
	// marked PUBLISHED yet (PUBLISHING: the relay's lease owns it), or one
	// that moved on, is left as it is, and the result says how it was
	// found. Repeating the call (a second copy of the same publication)
	// finds the row PENDING and writes nothing.
	OutboxDefer(ctx context.Context, p OutboxDeferParams) (OutboxDeferResult, error)
}

// OutboxDeferParams puts one published row back.
type OutboxDeferParams struct {
	// Fence names the row and the token of the publication.
	Fence  Fence
	Delay  time.Duration
	Reason string
}

// OutboxDeferResult is what OutboxDefer did and found.
type OutboxDeferResult struct {
	// Deferred: the row was this publication's and PUBLISHED, and is
	// PENDING now, due after the delay.
	Deferred bool
	// State and Token are the row as found when it was not deferred;
	// State is "" when the row does not exist.
	State heraldtype.OutboxState
	Token int64
}

// Publishing reports whether the row is still PUBLISHING under the
// publication's own claim: the relay has yet to mark it (its confirm and
// the consumer's copy raced), so the copy must be kept and tried again.
func (r OutboxDeferResult) Publishing(f Fence) bool {
	return !r.Deferred && r.State == heraldtype.OutboxPublishing && r.Token == f.Token
}

// Superseded reports whether the row has an owner other than this
// publication's copies: a later claim (a newer token), or a PENDING row
// that a claim will take (the relay's lease ran out and the reclaim sweep
// returned it, or another copy of the publication deferred it already).
// The copy may then be dropped: the owner carries the message.
func (r OutboxDeferResult) Superseded(f Fence) bool {
	if r.Deferred || r.State == "" {
		return false
	}
	return r.Token > f.Token || r.State == heraldtype.OutboxPending
}
