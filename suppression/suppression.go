// Package suppression is event-level suppression (DESIGN §3 step 3, seed
// 003 §7): at most one send per (tenant, recipient, event_id, kind), even
// when the producer sends one event as several notifications, under other
// idempotency or dedup keys. The claim on message_id (the sender's step 3)
// keeps one notification's send to one call; this keeps a second
// notification of the same event from sending at all. It does not undo a
// provider that received one call twice: that is the claim's side, and an
// UNKNOWN is never resent.
//
// # The key and its owner
//
// Each send passes Check, a sender.Check, and takes its event's key for its
// notification (store.EventKeys):
//
//   - no key: the notification takes it, with a lease (lease, 10 minutes),
//     and the send goes on;
//   - the key is its own notification's: a retry of the send, another of
//     its devices, its next channel; the lease is extended, the send goes
//     on;
//   - another notification holds it: SUPPRESSED(DUPLICATE_EVENT), final;
//   - another notification's lease ran out and it holds nothing (below):
//     the key is taken over and the send goes on. The store marks the
//     takeover (store.EventKeys.EventKeysTakenOver counts them; each
//     reconciliation report shows those since the run before it,
//     event_keys_taken_over) and the check logs it at warn level with
//     both notification ids.
//
// # How long a key is held
//
// Nothing is written after the call. The owner's own delivery rows say
// whether its key still holds once the lease has run out: while one of its
// sends under the key is SENDING, RETRY_WAIT, PROVIDER_ACCEPTED, DELIVERED
// or UNKNOWN (it went out, may have, or will be tried again), the key is
// its own whatever the lease, so an accepted send keeps its event until
// the key is purged (ttl after the lease's end: idempotency_ttl, 24 hours,
// by default). A send that ended without a call — PERMANENT_FAILURE,
// RETRY_EXHAUSTED, or SUPPRESSED after its check (an expiry found after
// the rate limit's wait) — holds nothing: once the lease ends another
// notification of the event may send, because a definite failure is not a
// send. Until then the key waits for the owner's own next step (a
// fallback channel, a requeue): the lease bounds that wait, and no write
// in the sender's result step is needed for it. An owner that dies after
// its take and before its claim (without InClaim, or on PostgreSQL) has
// its message offered again (the
// outbox lease, the broker's redelivery), finds its key and goes on; if it
// does not come back within the lease, the next notification of the event
// takes the key over (logged, and marked in the store).
//
// The leader purges keys whose lease ended ttl ago (Purger), 1,000 per
// statement, so a key lives ttl after its owner's last check; a
// notification of the event that comes after that is a new event. The
// purge goes by the key's age alone, so config validation holds ttl to at
// least stale_claim_after, the longest a send stays SENDING after its
// check: no key is purged while its owner's call may still be in flight.
//
// # The channel in the key
//
// For a kind whose channels are alternatives (policy first: the first
// channel the recipient can receive on, the next only after a definite
// failure) the key has no channel: push then SMS for one event is a
// duplicate, and only the owner's own fallback goes on. A kind with policy
// all (the default; seed 003's fraud alert goes by push and SMS at once)
// sends on each of its channels by design, so its key has the channel:
// each planned channel once per event. Push and SMS of one notification
// both go; a second notification of the event sends on no channel the
// first sent on, and on a channel the first did not send on (no address
// then, say) it may.
//
// # Right before the call
//
// The check runs in the sender's pre-checks, after every other rule of the
// send policy (allow-list, text limits, quiet hours: app's policyChecks
// puts it last), so a send that any rule stops, suppresses or defers never
// takes the key. herald runs it InClaim: the check only names the key
// (sender.Ruling.Take), and the sender's claim takes it, first, in the
// claim's own write (store.DeliveryClaimParams.Event): a key another
// notification holds claims nothing, and the sender writes
// SUPPRESSED(DUPLICATE_EVENT) in its place. So the decision is made by the
// last write before the call, with nothing between them but the claim's
// answer, and a send costs one write before its call, not two: on SQLite,
// whose single writer is the bottleneck, the end-to-end benchmark with
// every rule on went from a median 1.22 to 1.12 times the figure with
// none (docs/send-policy.md, "Channel policy"). SQLite takes the key in the claim's
// transaction; PostgreSQL just before the claim's statement, on the same
// pipeline.
//
// Without InClaim (a Store of the caller's) the check takes the key
// itself, and between it and the provider call are the pace (the
// provider's rate limit, at most 30 seconds) and the claim. Neither lets a
// second notification through: a pace that sends the job away
// (RATE_LIMITED) leaves the key to the same notification, whose next
// attempt finds it its own; an expiry found after the wait ends the send
// without a call (the key is freed at the lease's end, as above); a lost
// claim is another copy of the same message. A pace that waited makes the
// sender run the rules again before the claim: the check finds the key
// its own and extends the lease at that moment, and a rule that now
// defers the send (the wait crossed quiet hours' 20:50) leaves the key to
// this notification for the lease only. The lease (at least a minute,
// config validation) outlasts that stretch. Taking the key after the
// claim's SENDING row instead would need a SENDING row to end SUPPRESSED
// without a call, a transition the sender's table does not have (a
// SENDING row ends by its call's result or the stale sweep): so the key is
// taken by the claim before its row, or by the check before the claim.
//
// # When the keys cannot be read
//
// A take that fails is tried again for StoreWait (2 seconds): the check's
// own store call, or InClaim the claim (which fails with
// store.ErrEventKeys, writing nothing); then the kind's category decides
// (seed 003 §7, Unavailable), and a send that goes on is claimed without
// a key:
//
//	category       the send                                 why
//	alert          goes on                                  a duplicate is the lesser harm than a fraud alert not seen
//	transactional  SUPPRESSED(SUPPRESSION_UNAVAILABLE)      the inbox item, written at intake, stands in
//	               when the kind has an inbox item,
//	               else goes on                             nothing would stand in: without an inbox, blocking loses it
//	marketing      SUPPRESSED(SUPPRESSION_UNAVAILABLE)      a missed advertisement harms no one
//	internal       goes on                                  a duplicate is harmless
//
// Each such send is logged at warn level. A caller's context that ended
// (shutdown) is not the store failing: the check lets the send go on, and
// the sender, which looks at its context after the checks, gives the job
// back before any claim.
package suppression

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// ReasonUnavailable is the reason of a send skipped because the keys
// could not be read (see Unavailable).
const ReasonUnavailable = heraldtype.ReasonSuppressionUnavailable

// Store is what the check reads and writes: the seam tests wrap to make
// the keys unavailable.
type Store interface {
	EventKeyTake(ctx context.Context, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error)
}

// Kind is what the check needs to know of a kind.
type Kind struct {
	// First: the kind's channels are alternatives (policy first); its key
	// has no channel.
	First bool
	// Inbox: the kind writes an inbox item at intake, which stands in for
	// a transactional send when the keys cannot be read.
	Inbox bool
}

// Config configures the check.
type Config struct {
	// Store is where the check takes keys itself; unused with InClaim.
	Store Store
	// InClaim: the check names the key and the sender's claim takes it,
	// in the claim's own write (Ruling.Take, store.DeliveryClaimParams.
	// Event), so a send costs one write before its call, not two. The
	// sender's store is then the keys' store.
	InClaim bool
	// Lease is how long a check alone holds a key. Defaults to 10 minutes.
	Lease time.Duration
	// Kinds are the configured kinds by name; a kind not listed has
	// policy all and no inbox item.
	Kinds map[string]Kind
	// StoreWait is how long a failing store call is tried again before
	// the keys count as unavailable. Defaults to 2 seconds.
	StoreWait time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Check is the rule, as the sender runs it.
type Check struct{ cfg Config }

var _ sender.Check = (*Check)(nil)

// New returns the check.
func New(cfg Config) *Check {
	if cfg.Lease <= 0 {
		cfg.Lease = 10 * time.Minute
	}
	if cfg.StoreWait <= 0 {
		cfg.StoreWait = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Check{cfg: cfg}
}

// Key is the event key of job's send.
func (c *Check) Key(job heraldtype.Job) store.EventKey {
	k := store.EventKey{Tenant: job.Tenant, Recipient: job.Recipient, EventID: job.EventID, Kind: job.Kind}
	if !c.cfg.Kinds[job.Kind].First {
		k.Channel = job.Channel.Base()
	}
	return k
}

// Check takes the send's event key for its notification, and rules on the
// send by what it found (see the package doc); with InClaim it hands the
// key to the claim, which takes it.
func (c *Check) Check(ctx context.Context, s sender.Subject) sender.Ruling {
	t := keyTake{c: c, sub: s}
	if c.cfg.InClaim {
		return sender.Ruling{Take: t}
	}
	res, err := c.take(ctx, t.Params())
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutdown: the sender gives the job back before any claim.
		return sender.Ruling{}
	case err != nil:
		return t.Failed(ctx, err)
	}
	return t.Taken(ctx, res)
}

// keyTake is one send's key: the claim's part (sender.ClaimTake) with
// InClaim, the check's own otherwise.
type keyTake struct {
	c   *Check
	sub sender.Subject
}

func (t keyTake) Params() store.EventKeyTakeParams {
	return store.EventKeyTakeParams{Key: t.c.Key(t.sub.Job), Owner: t.sub.Job.NotificationID, Lease: t.c.cfg.Lease}
}

// Taken rules on what a take found.
func (t keyTake) Taken(ctx context.Context, res store.EventKeyTakeResult) sender.Ruling {
	job := t.sub.Job
	switch res.Outcome {
	case store.EventKeyHeld:
		return sender.Suppress(heraldtype.ReasonDuplicateEvent)
	case store.EventKeyTakenOver:
		t.c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "suppression: took over an event key whose owner's lease ran out with nothing sent",
			slog.String("message_id", job.MessageID), slog.String("tenant", job.Tenant),
			slog.String("owner", job.NotificationID), slog.String("previous_owner", res.Previous))
	}
	return sender.Ruling{}
}

// Failed rules on a send whose key could not be taken: the category
// decides (Unavailable).
func (t keyTake) Failed(ctx context.Context, err error) sender.Ruling {
	return t.c.unavailable(ctx, t.sub, err)
}

// Wait is how long a failing take is tried again: StoreWait.
func (t keyTake) Wait() time.Duration { return t.c.cfg.StoreWait }

// take runs the store's take, again while it fails, for StoreWait.
func (c *Check) take(ctx context.Context, p store.EventKeyTakeParams) (store.EventKeyTakeResult, error) {
	deadline := time.Now().Add(c.cfg.StoreWait)
	wait := 20 * time.Millisecond
	for {
		res, err := c.cfg.Store.EventKeyTake(ctx, p)
		if err == nil || errors.Is(err, store.ErrClosed) || ctx.Err() != nil {
			return res, err
		}
		left := time.Until(deadline)
		if left <= 0 || !clock.Sleep(ctx, min(wait, left)) {
			return res, err
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// Unavailable rules on a send of category whose event key could not be
// read (the table in the package doc); inbox says whether its kind wrote
// an inbox item.
func Unavailable(category heraldtype.Lane, inbox bool) sender.Ruling {
	switch {
	case category == heraldtype.LaneAlert, category == heraldtype.LaneInternal,
		category == heraldtype.LaneTransactional && !inbox:
		return sender.Ruling{}
	}
	return sender.Suppress(ReasonUnavailable)
}

func (c *Check) unavailable(ctx context.Context, s sender.Subject, err error) sender.Ruling {
	v := Unavailable(s.Category, c.cfg.Kinds[s.Job.Kind].Inbox)
	what := "suppression: event keys unavailable; sending without one"
	if !v.Go() {
		what = "suppression: event keys unavailable; not sending"
	}
	c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, what,
		slog.String("message_id", s.Job.MessageID), slog.String("tenant", s.Job.Tenant),
		slog.String("category", string(s.Category)), slog.Any("error", err))
	return v
}
