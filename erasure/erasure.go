// Package erasure erases what herald keeps about one recipient of one
// tenant (DELETE /v1/recipients/{recipient}, issue 9 item 7): the profile
// and its consent history, the devices, the inbox items, every
// notification's params, and the free text a person wrote about one of
// its messages. It keeps what accounting needs: ids, states, reason codes
// and times.
//
// # What each table keeps
//
// Every column that can hold a person's words, and what an erasure does
// with it:
//
//	profiles          the row (addresses, consent, language, time zone)     deleted
//	consent_history   the rows (each consent change: channel, old → new,    deleted, with the
//	                  when, by which tenant's key)                          profile
//	devices           the rows (push tokens, platform)                      deleted
//	inbox_items       the rows (rendered title and body)                    deleted
//	inbox_counters    unread lowered by the unread items deleted; seq kept  kept (numbers only)
//	notifications     params (the caller's template values)                 set to {}
//	                  erased_at                                             set: when
//	                  recipient, event_id, kind, lane, dedup_key, times     kept: ids
//	outbox            ids, lane, channel, state, reason code, times         kept (no text)
//	deliveries        state, reason code, provider name, times              kept (no text: a
//	                                                                        provider's answer
//	                                                                        is kept as a stable
//	                                                                        code, never its body)
//	delivery_attempts owner (a herald process), class, reason code, times   kept
//	campaign_         the recipient's row in a DRAFT or RUNNING campaign    deleted, off the
//	recipients        that has not fanned it out yet (recipient, params)    campaign's total: no
//	                                                                        notification is ever
//	                                                                        written for it
//	                  params of a row fanned out already                    set to NULL (the row
//	                                                                        stays: accounting)
//	campaigns         params (the campaign's own, the same for everyone)    kept: no one person's
//	parked_discards   reason (what a person wrote when discarding)          set to ERASED
//	                  actor, parked_reason (a code), times                  kept
//	idempotency_keys  idempotency_key (the caller's), request_hash          kept until they expire
//	                  (SHA-256 of the request), response ({"id": …})        (idempotency_ttl)
//	reconcile_runs,   counts, message ids, times                            kept
//	watchdog_checkpoints
//
// A campaign that has not reached the recipient (a draft, or a running
// fan-out whose cursor is before it) loses it: the person asked to be
// forgotten before that notification existed. On PostgreSQL the erasure
// locks those campaigns first, so a fan-out batch under way commits before
// the erasure reads the cursor, and a ranged batch that read the
// recipient before the erasure writes nothing (the total it read changed)
// and is written again without it. A page added after the erasure is a
// new request and adds the recipient again.
//
// The idempotency keys stay on purpose: a hash is not the words, and a key
// deleted early would let a client's retry of the very request create the
// notification again, after the erasure. They hold no recipient column and
// expire with idempotency_ttl (24 hours by default).
//
// Ids are the caller's: recipient, event_id and dedup_key are kept as the
// keys accounting counts by, so callers should use opaque ids there, never
// a name, an e-mail address or a phone number.
//
// # Sends
//
// A planned send still waiting (no delivery row yet, RETRY_WAIT, PARKED)
// ends SUPPRESSED with reason ERASED, in the batch that erases its
// notification, through the same guarded write as the sender's own
// decisions: a send whose claim got there first is left to it. A send in
// flight (SENDING) is not stopped: its provider call may already be at the
// provider, and its result is recorded as usual. If that result is a retry
// (RETRY_WAIT), the sender finds the notification erased before it claims
// the retry and ends it SUPPRESSED(ERASED) too (store.Erasure's
// NotificationErased): it never renders the emptied params, and never the
// old params a broker copy still carries. A send that would need an
// address finds none anyway: the profile and the devices went first.
//
// With the rabbitmq transport, copies of a message in the lane, retry and
// parking queues carry its params until they are consumed; a consumed copy
// of an erased notification is acked without a send. A copy left in the
// parking queue stays there until a person discards it (its delivery is
// already SUPPRESSED(ERASED); a requeue finds it ended).
//
// Recipient tokens are not stored (package auth), so there is none to
// delete: one minted before the erasure stays valid until it expires (an
// hour by default) and reads an empty inbox; an open stream hears the
// change (the store signals it) and shows the badge at 0.
//
// An erasure erases what exists when each batch runs. A notification
// accepted for the recipient while it runs is erased if a later batch
// reaches it, and one accepted after it is not: the tenant that goes on
// sending to an erased recipient id makes new data, which a new erasure
// erases. Likewise a profile or a device put again.
//
// # Cost and concurrency
//
// An erasure runs in bounded batches (Config.Batch notifications and inbox
// items each), each its own short transaction, until the store says
// nothing is left; a recipient with a million notifications never holds a
// lock for long (measured, TestMeasureErasure: 10,000 notifications with
// as many inbox items take 21 batches of 500, 0.7 s on SQLite, 1.8 s on
// PostgreSQL). It is synchronous: the HTTP answer (200) comes when the
// last batch committed, with what was erased. It wakes no dispatcher lane:
// the outbox rows of the sends it suppressed stay due as they were, and the
// claimer that takes one finds its delivery ended and settles it without a
// call. Erasing again is harmless: the second run finds nothing left to
// change and says so (zeros).
package erasure

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// DefaultBatch is how many notifications (and inbox items) one batch erases.
const DefaultBatch = 500

// Config wires an Eraser.
type Config struct {
	Store store.Erasure
	// Batch is how many notifications, and how many inbox items, one
	// transaction erases. Defaults to 500.
	Batch   int
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// Eraser erases recipients.
type Eraser struct {
	cfg Config
}

// New returns an Eraser.
func New(cfg Config) *Eraser {
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Eraser{cfg: cfg}
}

// Summary is what one erasure erased, over all its batches.
type Summary struct {
	// Profile: a profile row was deleted.
	Profile bool `json:"profile"`
	// Devices counts the device rows deleted.
	Devices int `json:"devices"`
	// Notifications counts the notifications whose params were erased.
	Notifications int `json:"notifications"`
	// InboxItems counts the inbox items deleted.
	InboxItems int `json:"inbox_items"`
	// Suppressed counts the waiting sends ended SUPPRESSED(ERASED).
	Suppressed int `json:"suppressed"`
	// Batches counts the transactions the erasure took.
	Batches int `json:"-"`
}

// Erase erases tenant's recipient, batch after batch, until nothing is
// left. On an error the batches committed before it stay erased, and
// erasing again goes on from the start, harmlessly; the summary then
// counts what was erased before the error.
func (e *Eraser) Erase(ctx context.Context, tenant, recipient string) (Summary, error) {
	var sum Summary
	p := store.RecipientEraseParams{Tenant: tenant, Recipient: recipient, Limit: e.cfg.Batch}
	for {
		res, err := e.cfg.Store.RecipientErase(ctx, p)
		if err != nil {
			e.cfg.Metrics.Erasure(metrics.ErasureFailed)
			e.cfg.Logger.LogAttrs(ctx, slog.LevelError, "erasure: a batch failed",
				slog.String("tenant", tenant), slog.Int("batches_done", sum.Batches), slog.Any("error", err))
			return sum, fmt.Errorf("erase recipient (batch %d): %w", sum.Batches+1, err)
		}
		sum.Batches++
		sum.Profile = sum.Profile || res.Profile
		sum.Devices += res.Devices
		sum.Notifications += res.Notifications
		sum.InboxItems += res.InboxItems
		sum.Suppressed += len(res.Suppressed)
		for _, s := range res.Suppressed {
			// A delivery state entry like any other writer's (package metrics).
			e.cfg.Metrics.Delivery(s.Lane, s.Channel, heraldtype.DeliverySuppressed)
		}
		e.cfg.Metrics.ErasureSuppressed(len(res.Suppressed))
		if res.Next == nil {
			break
		}
		p.After = res.Next
	}
	e.cfg.Metrics.Erasure(metrics.ErasureDone)
	// No recipient id in the log: the tenant and the counts only.
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "erasure: recipient erased",
		slog.String("tenant", tenant), slog.Bool("profile", sum.Profile), slog.Int("devices", sum.Devices),
		slog.Int("notifications", sum.Notifications), slog.Int("inbox_items", sum.InboxItems),
		slog.Int("suppressed", sum.Suppressed), slog.Int("batches", sum.Batches))
	return sum, nil
}
