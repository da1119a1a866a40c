package store

import (
	"context"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Watchdog is the watchdog's side of the store (package watchdog, DESIGN
// §3 "Nothing waits without an owner and a deadline"): the rows that wait
// past their deadline with nothing left that will move them on.
//
// Finding is a read, apart from the write that moves a row on, so
// reconciliation counts what has no owner with the very same query
// (UnownedFind from the zero position, page after page, never calling
// UnownedRedrive). Each page is driven by a partial index on what its kind
// looks for and examines at most Limit rows, so its cost does not grow
// with the size of the tables.
type Watchdog interface {
	// UnownedFind examines up to p.Limit rows of p.Kind in the kind's order
	// (UnownedPosition) after p.After whose deadline, by the store's clock,
	// passed more than p.Grace ago, and returns those of them that have no
	// owner, with where the next page starts.
	UnownedFind(ctx context.Context, p UnownedFindParams) (UnownedPage, error)
	// UnownedRedrive moves each row on through the normal path, each only
	// if it is still as UnownedFind found it, and returns those it moved:
	//
	//   - retry_wait, published, lease: the outbox row goes back to PENDING,
	//     due now, with reason REDRIVEN and a fresh fencing token, not
	//     counted as a failed dispatch attempt, so the claimers or the relay
	//     offer it again and the sender's delivery claim decides (a due
	//     RETRY_WAIT is claimed; a delivery already ended is finished
	//     without a provider call). The write is conditional on the outbox
	//     row's state and token as found, and for retry_wait on the
	//     delivery still waiting with the next attempt time found, for
	//     published on the message still having no delivery row.
	//   - sending: the delivery becomes UNKNOWN (STALE_CLAIM), exactly the
	//     stale sweep's write, conditional on it still being SENDING with
	//     the claim time found; it is never sent again.
	UnownedRedrive(ctx context.Context, rows []Unowned) ([]Unowned, error)
	// UnownedCheckpoint returns the position saved for kind, or the zero
	// position when none was saved.
	UnownedCheckpoint(ctx context.Context, kind UnownedKind) (UnownedPosition, error)
	// UnownedCheckpointSave saves pos as kind's position.
	UnownedCheckpointSave(ctx context.Context, kind UnownedKind, pos UnownedPosition) error
}

// UnownedKind is what a row without an owner waits in.
type UnownedKind string

// The kinds of rows without an owner, each with its deadline (the time its
// order starts with) and the owner it lacks.
const (
	// UnownedRetryWait is a delivery in RETRY_WAIT whose next attempt time
	// passed, and whose outbox row is neither PENDING, CLAIMED nor
	// PUBLISHING (so no claimer or relay will offer it: DONE, FAILED,
	// EXPIRED, or PUBLISHED with the broker's copy evidently lost) and has
	// not changed since the deadline either. Deadline: next_attempt_at.
	UnownedRetryWait UnownedKind = "retry_wait"
	// UnownedPublished is an outbox row PUBLISHED with no delivery row: the
	// sender writes one for every copy it handles, so no copy is left.
	// Deadline: the time it was published (its updated_at).
	UnownedPublished UnownedKind = "published"
	// UnownedSending is a delivery SENDING whose claim the stale sweep
	// should have turned UNKNOWN. Deadline: claimed_at.
	UnownedSending UnownedKind = "sending"
	// UnownedLease is an outbox row CLAIMED or PUBLISHING whose lease ran
	// out and that the reclaim sweep has not returned to PENDING.
	// Deadline: claimed_until.
	UnownedLease UnownedKind = "lease"
)

// UnownedKinds is every kind, in the order the watchdog visits them.
var UnownedKinds = []UnownedKind{UnownedRetryWait, UnownedPublished, UnownedSending, UnownedLease, UnownedWaiting}

// ReasonRedriven is the outbox reason of a row the watchdog re-drove.
const ReasonRedriven = "REDRIVEN"

// UnownedFindParams selects one page of a kind.
type UnownedFindParams struct {
	Kind UnownedKind
	// Grace is how long past its deadline a row must be, by the store's
	// clock, to be examined.
	Grace time.Duration
	// After is the position the page starts after; the zero position
	// starts at the beginning.
	After UnownedPosition
	// Limit caps the rows examined (owned or not). Defaults to 1000.
	Limit int
}

// LimitOrDefault returns p.Limit or its default.
func (p UnownedFindParams) LimitOrDefault() int {
	if p.Limit <= 0 {
		return 1000
	}
	return p.Limit
}

// UnownedPosition is a place in a kind's order: the deadline, then the
// message id, which is unique, so a page boundary never skips or repeats
// a row.
type UnownedPosition struct {
	At        time.Time
	MessageID string
}

// UnownedPage is one page of UnownedFind.
type UnownedPage struct {
	// Rows are the examined rows without an owner, in the kind's order.
	Rows []Unowned
	// Examined is how many rows the page looked at, owned or not.
	Examined int
	// Next is the position of the last row examined (p.After when none
	// was): the next page starts after it.
	Next UnownedPosition
	// Done: the page examined every row of the kind up to the cutoff (it
	// examined fewer than the limit).
	Done bool
}

// Add adds one row of a driver's find to the page: u if it has no owner;
// its position as the next page's start if it is the last row examined;
// examined is the find's count of rows examined.
func (p *UnownedPage) Add(u Unowned, owned, last bool, examined int) {
	p.Examined = examined
	if last {
		p.Next = u.Position()
	}
	if !owned {
		p.Rows = append(p.Rows, u)
	}
}

// Unowned is one row found waiting past its deadline with no owner. It
// carries ids and states only, no personal data.
type Unowned struct {
	Kind           UnownedKind
	MessageID      string
	NotificationID string
	Tenant         string
	// Lane is the outbox row's lane ("" when it has none).
	Lane    heraldtype.Lane
	Channel heraldtype.Channel
	// At is the row's deadline (see the kinds).
	At time.Time
	// OutboxState and Token are the outbox row as found; for sending, ""
	// and 0.
	OutboxState heraldtype.OutboxState
	Token       int64
}

// Position is the row's place in its kind's order.
func (u Unowned) Position() UnownedPosition {
	return UnownedPosition{At: u.At, MessageID: u.MessageID}
}
