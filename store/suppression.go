package store

import (
	"context"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// EventKeys keeps event-level suppression's keys (package suppression,
// DESIGN §3 step 3, seed 003 §7): one row per event key, naming the
// notification that owns it, until when its lease runs, and when and from
// whom it was last taken over. Times are the store's (the database
// server's clock for PostgreSQL).
//
// The owner holds its key while its lease lasts, and after it for as long
// as any of its sends under the key (EventKey.Covers) is in a state that
// holds (EventKeyHolding): it went out, may have, or will be tried again.
// A key whose lease ran out and whose owner holds nothing is free for the
// next notification to take over: its owner died before its claim, or
// every send it made ended without a call (a permanent refusal, an expiry).
// The owner's sends are read from the outbox and the deliveries, the
// dispatcher's and the sender's tables, never written.
type EventKeys interface {
	// EventKeyTake decides whether p.Owner may send under p.Key, and
	// records it in one step that concurrent takes of the key cannot
	// interleave with: no key → the owner takes it (EventKeyTaken); the
	// owner's own key → its lease is extended (EventKeyOwned); another's
	// key that no longer holds (see EventKeys) → taken over from it
	// (EventKeyTakenOver); another's key that holds → nothing changes
	// (EventKeyHeld). Each take gives the owner a lease until the store's
	// now + p.Lease; an extension never shortens one.
	EventKeyTake(ctx context.Context, p EventKeyTakeParams) (EventKeyTakeResult, error)
	// EventKeyPurge deletes up to p.Limit keys whose lease ended more than
	// p.Keep ago, oldest lease first, and returns how many it deleted.
	EventKeyPurge(ctx context.Context, p EventKeyPurgeParams) (int, error)
	// EventKeysTakenOver counts the keys whose last take was a takeover
	// made at since or later (the store's times), for reconciliation.
	EventKeysTakenOver(ctx context.Context, since time.Time) (int, error)
}

// EventKey is what at most one send is made for.
type EventKey struct {
	Tenant    string
	Recipient string
	EventID   string
	Kind      string
	// Channel is "" for a key that covers every channel (push then SMS for
	// one event is a duplicate), or one channel (never a device send's:
	// push, not push.<device>) for a key that covers that channel only.
	Channel heraldtype.Channel
}

// Covers reports whether a send on ch (a planned send's channel: a device
// send's included) falls under k.
func (k EventKey) Covers(ch heraldtype.Channel) bool {
	return k.Channel == "" || ch.Base() == k.Channel
}

// EventKeyHolding reports whether a send in state s keeps its
// notification's key after the lease ran out: SENDING, PROVIDER_ACCEPTED,
// DELIVERED and UNKNOWN went out or may have; RETRY_WAIT will be tried
// again. A send that ended without a call (SUPPRESSED, PERMANENT_FAILURE,
// RETRY_EXHAUSTED, PARKED) holds nothing.
func EventKeyHolding(s heraldtype.DeliveryState) bool {
	switch s {
	case heraldtype.DeliverySending, heraldtype.DeliveryRetryWait, heraldtype.DeliveryProviderAccepted,
		heraldtype.DeliveryDelivered, heraldtype.DeliveryUnknown:
		return true
	}
	return false
}

// EventKeyRows are a driver's rows of an owner's sends, each its planned
// send's channel and its delivery state (database/sql's and pgx's rows
// both).
type EventKeyRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// EventKeyHeldBy reads an owner's sends and reports whether one under k
// holds the key (EventKeyHolding). Both drivers decide through it.
func EventKeyHeldBy(k EventKey, rows EventKeyRows) (bool, error) {
	held := false
	for rows.Next() {
		var ch, state string
		if err := rows.Scan(&ch, &state); err != nil {
			return false, err
		}
		if k.Covers(heraldtype.Channel(ch)) && EventKeyHolding(heraldtype.DeliveryState(state)) {
			held = true
		}
	}
	return held, rows.Err()
}

// EventKeyTakeParams is one take.
type EventKeyTakeParams struct {
	Key EventKey
	// Owner is the notification id that means to send.
	Owner string
	// Lease is how long the owner holds the key without a send in a state
	// that holds it. Positive.
	Lease time.Duration
}

// EventKeyOutcome is what a take found and did.
type EventKeyOutcome int

// The outcomes of a take.
const (
	// EventKeyTaken: there was no key; the owner took it.
	EventKeyTaken EventKeyOutcome = iota + 1
	// EventKeyOwned: the owner held the key already (a retry of its send,
	// another of its devices, its next channel); its lease was extended.
	EventKeyOwned
	// EventKeyTakenOver: another notification's lease had run out with
	// nothing held; the owner took the key from it (Previous).
	EventKeyTakenOver
	// EventKeyHeld: another notification holds the key; nothing changed.
	EventKeyHeld
)

func (o EventKeyOutcome) String() string {
	switch o {
	case EventKeyTaken:
		return "taken"
	case EventKeyOwned:
		return "owned"
	case EventKeyTakenOver:
		return "taken_over"
	case EventKeyHeld:
		return "held"
	}
	return "outcome(?)"
}

// EventKeyTakeResult is a take's answer.
type EventKeyTakeResult struct {
	Outcome EventKeyOutcome
	// Owner is the key's owner after the take: the caller's notification
	// unless Held.
	Owner string
	// Previous is the owner a takeover took the key from.
	Previous string
	// LeaseUntil is the end of the owner's lease after the take.
	LeaseUntil time.Time
}

// EventKeyPurgeParams is one purge batch.
type EventKeyPurgeParams struct {
	// Keep is how long a key outlives its lease. Positive.
	Keep time.Duration
	// Limit caps the keys deleted. Positive.
	Limit int
}
