// Package store defines what herald keeps and how it may change it. Two
// drivers implement Store: store/sqlite (the embedded default) and
// store/postgres (production). store/storetest is the conformance suite both
// run, so a behaviour tested once holds for every driver.
//
// Ownership follows DESIGN §1: the dispatcher alone writes outbox rows
// (Outbox*), the sender alone writes deliveries (Delivery*). One delegated
// exception: a db-transport claimer may hand the sender its claim's fence
// with the job (Job.Outbox), and DeliveryRecord then settles that outbox row
// in the same write as the result, exactly as the claimer would have (DONE,
// or PENDING after the retry delay), instead of the claimer's second write;
// and OutboxExpire ends the delivery that waits on the row it expires.
// Every outbox write after a claim is fenced: it names the row's token and
// succeeds only while that token still holds an unexpired lease, so a
// claimer that stalled past its lease writes nothing. Every delivery write after a claim is
// conditional on the row still being SENDING, so a result is never written
// over another.
//
// Times that decide ownership (leases, due times, staleness) come from the
// store's clock, read when the statement runs: the database server's for
// PostgreSQL, so clock skew between herald processes cannot hand one row to
// two owners, and its clock_timestamp(), not its transaction's start, which
// a statement queued in a batch may have long passed.
//
// # The rule
//
// Nothing waits without an owner and a deadline (DESIGN §3): every state
// that has not ended has a write that moves it on and a column that
// bounds the wait. The store's half (package sender has the sender's):
//
//   - outbox PENDING: OutboxClaim, by a claimer or the relay, once
//     available_at has passed (send_at, a retry time, a backoff); or
//     OutboxExpire at expires_at, if that comes first (no claim takes a row
//     past it).
//   - outbox CLAIMED, PUBLISHING: the holder's fenced write (OutboxComplete,
//     OutboxRetry, OutboxMarkPublished, DeliveryRecord with the fence) while
//     claimed_until is ahead, which OutboxExtend moves on while a send is in
//     flight. Once claimed_until has passed, OutboxReclaimExpired returns
//     the row to PENDING and the holder's writes are refused.
//   - outbox PUBLISHED: the outbox's part is done; the broker's copy is the
//     owner until a consumer acks it after the sender wrote the delivery.
//     Bound: updated_at (the publication), when no delivery row follows.
//   - outbox WAITING (a fallback chain's later step): the end of the
//     step before, whose write releases (PENDING) or skips it (fallback.go).
//     Bound: none of its own; once every earlier step has ended, the
//     watchdog (UnownedWaiting).
//   - delivery SENDING: the claimant's DeliveryRecord, conditional on
//     SENDING at its attempt. Bound: claimed_at + stale_claim_after, when
//     DeliverySweepStale makes it UNKNOWN (never sent again).
//   - delivery RETRY_WAIT: the DeliveryClaim of the copy the transport
//     offers again once next_attempt_at has passed (db: the outbox row,
//     PENDING with available_at at that time; rabbitmq: the retry queue's
//     copy), or a DeliveryDecide before it (a cancel; a pre-check, which
//     suppresses a copy past expires_at). Bound: next_attempt_at; with the
//     db transport OutboxExpire ends it SUPPRESSED(EXPIRED) at expires_at
//     when that comes first.
//   - delivery PARKED: a person, alerted when it was parked: ParkedRequeue
//     (RETRY_WAIT, due now), ParkedDiscard or a cancel (SUPPRESSED). No
//     column bounds it; the outbox expiry leaves it to that person.
//
// A row found past its bound with nothing left to move it is the
// watchdog's (Watchdog): it re-drives it through the same writes.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// ErrNotFound is returned when a row does not exist (or belongs to another tenant).
var ErrNotFound = errors.New("store: not found")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("store: closed")

// ErrEventKeys is wrapped by a DeliveryClaim whose event key
// (DeliveryClaimParams.Event) could not be taken: nothing was claimed,
// and the caller may rule on the send without the key (package
// suppression's table) and claim again without it.
var ErrEventKeys = errors.New("store: event keys unavailable")

// Store is everything herald keeps.
type Store interface {
	Notifications
	// Cancels marks a notification cancelled, for its sends' retries.
	Cancels
	Outbox
	Deliveries
	// Watchdog finds rows waiting past their deadline with no owner.
	Watchdog
	Profiles
	// ConsentHistory keeps every consent change of a profile (consent.go).
	ConsentHistory
	Parked
	NotificationListing
	Attempts
	Reconciler
	// Receipts settles a push DELIVERED on the app's receipt (receipts.go).
	Receipts
	// Reports applies a provider's delivery reports and status look-ups
	// (reports.go).
	Reports
	Inbox
	// InboxWatch carries "this recipient's inbox changed" signals
	// (inboxsignal.go).
	InboxWatch
	// InboxHeads reads many inboxes' badges and newest items at once, for
	// the live streams (inboxheads.go).
	InboxHeads
	Erasure
	Devices
	// RateBuckets keeps the providers' shared rate limits (ratelimit.go).
	RateBuckets
	// EventKeys keeps event-level suppression's keys (suppression.go).
	EventKeys
	// Deferrals puts a deferred broker message back into the outbox
	// (deferred.go).
	Deferrals
	// APIKeys keeps the tenants' API keys, hashed (apikeys.go).
	APIKeys
	// Audit is the append-only log of admin actions (audit.go).
	Audit
	// Wakeups carries "a row became due on this lane" signals, from this
	// process and (PostgreSQL) from every other process on the database.
	Wakeups() *Wakeups
	// Ping checks that the store can be written.
	Ping(ctx context.Context) error
	Close() error
}

// Notifications is the intake side and the read side of notification rows.
type Notifications interface {
	// NotificationCreate writes the idempotency key, the notification and its
	// outbox rows in one transaction, or reports why it wrote nothing.
	NotificationCreate(ctx context.Context, p NotificationCreateParams) (NotificationCreateResult, error)
	// NotificationGet returns a tenant's notification with one entry per planned send.
	NotificationGet(ctx context.Context, tenant, id string) (NotificationView, error)
	// IdempotencyKeysSweep deletes expired idempotency keys.
	IdempotencyKeysSweep(ctx context.Context) (int, error)
}

// Cancels is what a cancel writes beside its decisions (package cancel).
type Cancels interface {
	// NotificationCancelMark marks a tenant's notification cancelled, once:
	// a later cancel keeps the first one's time. From then on no send of
	// it is claimed: a claim (DeliveryClaim) finds the mark and ends the
	// send SUPPRESSED(CANCELLED) without a call, moving its fallback
	// chain on as DeliveryDecide does. That holds
	// for a first claim (a cancel that failed after its mark, or a send
	// claimed between the cancel's read and its decision) and for a retry
	// (a send in flight at the cancel, SENDING, which the cancel leaves
	// alone, whose call then failed for now; a PARKED send requeued
	// later), as it does for a cancelled campaign's retry. No such
	// notification for the tenant: ErrNotFound.
	NotificationCancelMark(ctx context.Context, tenant, id string) error
	// NotificationCancelled reads the notification's cancel mark (false
	// for none, and for no such notification).
	NotificationCancelled(ctx context.Context, notificationID string) (bool, error)
}

// Outbox is the dispatcher's table.
type Outbox interface {
	// OutboxClaim leases up to Limit due PENDING rows of a lane and returns them
	// joined with their notifications. The rows are shared between the
	// lane's tenants and, inside each, between its scopes: a row's turn is
	// its tenant's rows in flight plus its place in its tenant, where the
	// tenant's scopes take turns by their own rows in flight; the lowest
	// turns win, ties going round (After, Scopes). Each tenant's and each
	// scope's rows are taken oldest first.
	OutboxClaim(ctx context.Context, p OutboxClaimParams) ([]Claimed, error)
	// OutboxComplete moves a claimed row to a terminal state (DONE, FAILED…), fenced.
	OutboxComplete(ctx context.Context, f Fence, state heraldtype.OutboxState, reason string) (bool, error)
	// OutboxRetry returns a claimed row to PENDING, due after Delay, fenced.
	OutboxRetry(ctx context.Context, p OutboxRetryParams) (bool, error)
	// OutboxMarkPublished marks rows the relay claimed (PUBLISHING) as
	// PUBLISHED once the broker confirmed them, each fenced; it returns how
	// many took.
	OutboxMarkPublished(ctx context.Context, fences []Fence) (int, error)
	// OutboxExtend moves the lease of each row still held by its fence (the
	// token matches and the lease has not run out, like every fenced write)
	// to the store's now + lease, never earlier than it was, and returns how
	// many took. A claimer calls it while a row's send is still in flight,
	// so its lease covers the whole send path; a fence it no longer holds
	// is left alone (that row is someone else's, or the sweep's). It never
	// waits for another transaction's lock on a row: such a row is being
	// settled or reclaimed at that moment, is skipped and not counted, and
	// the next call extends it if that write rolled back (on PostgreSQL a
	// wait deadlocked with a batch of results; SQLite has one writer).
	OutboxExtend(ctx context.Context, fences []Fence, lease time.Duration) (int, error)
	// OutboxReclaimExpired returns rows whose lease ran out to PENDING (CLAIM_EXPIRED).
	OutboxReclaimExpired(ctx context.Context) (int, error)
	// OutboxExpire marks PENDING rows whose expires_at passed EXPIRED and
	// returns them. In the same transaction it ends each one's delivery
	// that waits in RETRY_WAIT (db transport: the row was PENDING until the
	// retry time, and nothing would claim it again): SUPPRESSED with reason
	// EXPIRED, conditional on RETRY_WAIT like every delivery write
	// (Expired.DeliveryEnded). A PARKED delivery is left to its person, who
	// was alerted and can still discard it; a SENDING one to the stale sweep.
	// It takes at most limit rows, the earliest due-by first, so one call
	// is one bounded transaction (on SQLite the single writer's): a caller
	// that gets limit rows calls again for the rest.
	OutboxExpire(ctx context.Context, limit int) ([]Expired, error)
	// OutboxBacklog counts PENDING rows that are due, per lane.
	OutboxBacklog(ctx context.Context) (map[heraldtype.Lane]int, error)
}

// Deliveries is the sender's table: one row per message_id.
type Deliveries interface {
	// DeliveryGet returns the delivery of messageID, or ErrNotFound.
	DeliveryGet(ctx context.Context, messageID string) (Delivery, error)
	// DeliveryClaim inserts a SENDING row for the message (or turns a due
	// RETRY_WAIT row into SENDING). Only the caller that gets Claimed may
	// call the provider. A send whose notification is marked cancelled
	// (Cancels) is not claimed: the claim ends it SUPPRESSED(CANCELLED)
	// instead (Cancelled) and takes no event key (on PostgreSQL, a mark
	// that commits while a key another notification holds is being
	// contested, a rare moment, leaves the key to the cancelled one for
	// its lease). With p.Event it takes that event key first, by
	// EventKeys.EventKeyTake's rule: a key another notification holds
	// claims nothing (Claimed false, no Current, Event.Outcome
	// EventKeyHeld); a take that fails fails the claim with ErrEventKeys.
	// SQLite takes the key in the claim's own transaction; PostgreSQL
	// takes it just before, as a take before the claim always did (a take
	// whose claim then fails leaves the key to its owner for the lease).
	DeliveryClaim(ctx context.Context, p DeliveryClaimParams) (DeliveryClaimResult, error)
	// DeliveryRecord writes the outcome of a claimed attempt, conditional on
	// the row still being SENDING at that attempt, with its attempt log row
	// (written even when the outcome is not, once per attempt: a record
	// made again after a lost answer adds no second row); with p.Outbox,
	// and only if the outcome was recorded, it settles that claimed outbox
	// row too, fenced, in the same transaction.
	DeliveryRecord(ctx context.Context, p DeliveryRecordParams) (RecordResult, error)
	// DeliveryDecide records a decision not to send now (SUPPRESSED, PARKED)
	// for a message that has no row yet or is waiting: RETRY_WAIT, or
	// PARKED when the decision is SUPPRESSED (a cancel, a discard). It
	// never writes PARKED over PARKED: a second copy that parks the message
	// again gets false and leaves the row as it is. It reports whether the
	// decision was written.
	DeliveryDecide(ctx context.Context, p DeliveryDecideParams) (bool, error)
	// DeliverySweepStale turns SENDING rows claimed more than olderThan ago
	// into UNKNOWN and returns them, each exactly once: a row it returns
	// entered UNKNOWN by this call.
	DeliverySweepStale(ctx context.Context, olderThan time.Duration) ([]StaleClaim, error)
}

// NotificationListing is the support view: a tenant's notifications, newest
// first, keyset-paged ("what did we send to this customer?").
type NotificationListing interface {
	// NotificationList returns up to p.Limit of p.Tenant's notifications that
	// match p, ordered by (CreatedAt, ID) descending, each with its planned
	// sends as NotificationGet shows them; every view has the same Now.
	NotificationList(ctx context.Context, p NotificationListParams) ([]NotificationView, error)
}

// Attempts is the read side of the attempt log, the sender's one row per
// provider call (written by DeliveryRecord).
type Attempts interface {
	// AttemptList returns the logged attempts of the given messages, in
	// message order and, per message, by attempt number.
	AttemptList(ctx context.Context, messageIDs []string) ([]Attempt, error)
}

// Profiles are recipients' contact points and consent, read at send time.
type Profiles interface {
	ProfileGet(ctx context.Context, tenant, recipient string) (Profile, error)
	ProfilePut(ctx context.Context, p Profile) error
}

// Devices are a recipient's push devices (DESIGN §8, issue 9 item 6): the
// push channel sends to each active one (heraldtype.DeviceSend), and the
// sender reads the device again at send time. A device is named by
// DeviceID, derived from its token, so registering a token again finds the
// same row.
type Devices interface {
	// DevicePut registers d (by DeviceID of its token), or updates the
	// row of that token: platform, active again (a deactivated token that
	// is registered again is live again). It reports whether the row is new.
	// Every write moves UpdatedAt forward, by the store's smallest step
	// when the clock has not (DeviceDeactivateParams.UpdatedAt compares it).
	// With d.TokenDigest, in the same transaction, it deletes the rows of
	// that token under the tenant's other recipients and reports how many:
	// a token is an app install's, now logged in as d.Recipient, and
	// another recipient's pushes must not reach it.
	DevicePut(ctx context.Context, d Device) (created bool, moved int, err error)
	// DeviceDelete deletes a device; false when there was none.
	DeviceDelete(ctx context.Context, tenant, recipient, deviceID string) (bool, error)
	// DevicesList returns a recipient's devices, active or not, by device id.
	DevicesList(ctx context.Context, tenant, recipient string) ([]Device, error)
	// DeviceGet returns one device, or ErrNotFound.
	DeviceGet(ctx context.Context, tenant, recipient, deviceID string) (Device, error)
	// DeviceDeactivate marks an active device inactive with a reason code
	// (a provider said its token is dead); false when it is gone, inactive
	// already, or written since p.UpdatedAt.
	DeviceDeactivate(ctx context.Context, p DeviceDeactivateParams) (bool, error)
}

// DeviceDeactivateParams names the device DeviceDeactivate ends and why.
type DeviceDeactivateParams struct {
	Tenant, Recipient, DeviceID string
	// Reason is the provider's reason code.
	Reason string
	// UpdatedAt is the device's UpdatedAt as read before the provider
	// call that called it dead. A device written since (its token
	// registered again while the call was in flight) is left active: the
	// answer was about the token as it stood before. Zero: whatever its
	// UpdatedAt.
	UpdatedAt time.Time
}

// Platform is the push service a device token belongs to.
type Platform string

const (
	PlatformFCM  Platform = "fcm"
	PlatformAPNs Platform = "apns"
	PlatformWeb  Platform = "web"
)

// Valid reports whether p is one of the platforms.
func (p Platform) Valid() bool {
	return p == PlatformFCM || p == PlatformAPNs || p == PlatformWeb
}

// Device is one push device of a recipient.
type Device struct {
	Tenant    string
	Recipient string
	// DeviceID is DeviceID(Tenant, Recipient, Token).
	DeviceID string
	Token    string
	// TokenDigest is TokenDigest(Tenant, the plain token), set by whoever
	// registers it: the token is then this recipient's alone (DevicePut).
	// Empty: not compared (not read back by the list reads).
	TokenDigest string
	Platform    Platform
	Active      bool
	// CreatedAt is the first registration, UpdatedAt the last write.
	CreatedAt time.Time
	UpdatedAt time.Time
	// DeactivatedAt and DeactivatedReason say when and why the device
	// stopped being active; nil and "" while it is active.
	DeactivatedAt     *time.Time
	DeactivatedReason string
}

// DeviceID names the device of token for one recipient of one tenant: "d"
// and the first 16 hex digits of the SHA-256 of the three (each
// length-prefixed, so no two triples hash the same input). It is short and
// stable, fits a message id (notification id + ".push." + device id), and
// says nothing of the token.
func DeviceID(tenant, recipient, token string) string {
	h := sha256.New()
	for _, s := range []string{tenant, recipient, token} {
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		h.Write([]byte(s))
	}
	return "d" + hex.EncodeToString(h.Sum(nil)[:8])
}

// TokenDigest names a push token within its tenant, whoever it is
// registered for: a token is an app install's, and DevicePut takes it
// from the tenant's other recipients by it. The token may be stored
// sealed, so it is the digest that is compared.
func TokenDigest(tenant, token string) string {
	h := sha256.New()
	for _, s := range []string{"device-token", tenant, token} {
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// NotificationCreateParams is one accepted request.
type NotificationCreateParams struct {
	Tenant string
	// IdempotencyKey and RequestHash come from the HTTP request; empty for
	// the Go API, which deduplicates by DedupKey instead.
	IdempotencyKey string
	RequestHash    string
	IdempotencyTTL time.Duration
	// Response is the 202 body stored with the key and replayed.
	Response []byte
	// DedupKey, when set, makes the business event unique per tenant:
	// creating it again adds nothing.
	DedupKey string

	ID        string
	Recipient string
	EventID   string
	Kind      string
	Lane      heraldtype.Lane
	// Scope is the tenant's part the notification belongs to (a clinic, a
	// brand; "" none, heraldtype.ValidScope): its outbox rows take turns
	// with the other scopes' of the tenant (OutboxClaim).
	Scope     string
	Params    json.RawMessage
	SendAt    *time.Time
	ExpiresAt *time.Time
	Channels  []heraldtype.Channel
	// Inbox is the inbox item's text when Channels lists ChannelInbox (and
	// only then): the same transaction writes the item, bumps the
	// recipient's counter, and records the inbox send, ended STORED at once,
	// in the notification row (InboxAt, inboxsend.go): no outbox or delivery
	// row.
	Inbox []InboxText
	// Fallback makes the channels but the inbox a fallback chain, in their
	// order (channel policy first; fallback.go): the first one's rows
	// PENDING, the others' WAITING.
	Fallback bool
	// Claim, when set and the request Handable, asks the store to write
	// its one outbox row already claimed by Claim.Owner for Claim.Lease,
	// as OutboxClaim would have, and return it in the result (Claimed):
	// intake hands a row due now straight to its own process's claimer,
	// which held a free slot for it, and the row is spared a claim's
	// statement and its write (package dispatch, "Rows handed over at
	// intake"). A store may write the row PENDING instead (Claimed nil).
	// With Claim.Publishing the row is written PUBLISHING, as the relay's
	// claim (OutboxClaimParams.Publishing) would have: the rabbitmq
	// transport's relay publishes it.
	Claim *CreateClaim
}

// CreateClaim is the lease a create writes its row under
// (NotificationCreateParams.Claim).
type CreateClaim struct {
	Owner string
	Lease time.Duration
	// Publishing writes the row PUBLISHING (a relay's) instead of CLAIMED
	// (a claimer's).
	Publishing bool
}

// State is the outbox state a row written under c is in.
func (c CreateClaim) State() heraldtype.OutboxState {
	return OutboxClaimParams{Publishing: c.Publishing}.State()
}

// Handable reports whether p plans exactly one outbox row, due at once:
// one channel besides the inbox, not push (a row per device), on no
// fallback chain, with no send_at. Only such a request's row is written
// claimed (Claim).
func (p NotificationCreateParams) Handable() bool {
	_, ok := p.handedChannel()
	return ok && !p.Fallback && p.SendAt == nil
}

// handedChannel is p's one channel besides the inbox, if it has exactly
// one and that is not push.
func (p NotificationCreateParams) handedChannel() (ch heraldtype.Channel, ok bool) {
	for _, c := range p.Channels {
		switch {
		case c == heraldtype.ChannelInbox:
		case c == heraldtype.ChannelPush || ok:
			return "", false
		default:
			ch, ok = c, true
		}
	}
	return ch, ok
}

// Handed is the row a create wrote claimed for a Handable p (Claim),
// with its job and fence as OutboxClaim returns them: outbox row id and
// claim token, on no chain, with no delivery row yet, expiresAt p's as
// the store keeps it, known the recipient's profile the store read with
// it.
func (p NotificationCreateParams) Handed(id, token int64, expiresAt *time.Time, known *heraldtype.Known) *Claimed {
	ch, _ := p.handedChannel()
	params := p.Params
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	return &Claimed{
		Job: heraldtype.Job{
			MessageID: MessageID(p.ID, ch), OutboxID: id, NotificationID: p.ID, Tenant: p.Tenant, Scope: p.Scope,
			Recipient: p.Recipient, EventID: p.EventID, Kind: p.Kind, Lane: p.Lane, Channel: ch, Params: params,
			ExpiresAt: expiresAt, Known: known,
		},
		Fence: Fence{ID: id, Token: token, NotificationID: p.ID, Channel: ch, OffChain: true},
	}
}

// CreateOutcome says what NotificationCreate did.
type CreateOutcome int

const (
	// Created: the notification and its outbox rows were written.
	Created CreateOutcome = iota + 1
	// Replayed: the key was seen with the same request; Response is the first answer.
	Replayed
	// Conflict: the key was seen with a different request; nothing written.
	Conflict
	// Deduplicated: the DedupKey exists; nothing written, ID is the existing one.
	Deduplicated
)

// NotificationCreateResult is the answer to NotificationCreate.
type NotificationCreateResult struct {
	Outcome  CreateOutcome
	ID       string
	Response []byte
	// Claimed is the outbox row written claimed (NotificationCreateParams.Claim),
	// with its fence and job as OutboxClaim returns them; nil when none was.
	Claimed *Claimed
}

// MessageID is the message id of a notification's send on one channel. It is
// derived from the outbox row alone, so every copy, republish and requeue of
// the row carries the same one. A push to one device has the device in its
// channel (heraldtype.DeviceSend), so its id is <id>.push.<device id>:
// 53 characters with herald's notification ids, within MaxMessageIDLen.
func MessageID(notificationID string, ch heraldtype.Channel) string {
	return notificationID + "." + string(ch)
}

// NotificationView is a notification as the read API shows it.
type NotificationView struct {
	ID         string
	Tenant     string
	Recipient  string
	EventID    string
	Kind       string
	Lane       heraldtype.Lane
	Scope      string
	CreatedAt  time.Time
	SendAt     *time.Time
	ExpiresAt  *time.Time
	Deliveries []DeliveryView
	// Now is the store's time when it read the view, to tell SCHEDULED from PENDING.
	Now time.Time
}

// DeliveryView is one planned send: the outbox row and, once the sender has
// written one, its delivery row.
type DeliveryView struct {
	MessageID     string
	Channel       heraldtype.Channel
	OutboxState   heraldtype.OutboxState
	OutboxReason  string
	AvailableAt   time.Time
	OutboxUpdated time.Time
	// Delivery is nil until the sender writes a row.
	Delivery *Delivery
	// Fallback is the send's place in its fallback chain; nil off a chain.
	Fallback *FallbackStep
	// Planned is, on a first step's send of a lazy chain, the channels of
	// the later steps in order (LazyPlan); the driver reads it for
	// WithPlannedSteps, which shows them until their rows exist.
	Planned []heraldtype.Channel
}

// Fence identifies one claim of one outbox row.
type Fence = heraldtype.Fence

// OutboxClaimParams selects and leases due rows.
type OutboxClaimParams struct {
	Lane  heraldtype.Lane
	Owner string
	Limit int
	Lease time.Duration
	// Publishing claims for the rabbitmq relay (state PUBLISHING) instead of
	// a db-transport claimer (state CLAIMED). Both are fenced alike.
	Publishing bool
	// Profiles, with Publishing, reads each job's recipient profile too
	// (Job.Known, ProfileRead), for the relay's gate; a claimer's claim
	// always does.
	Profiles bool
	// Skip names a tenant whose rows this claim leaves PENDING ("" none):
	// a claimer's tenant that already holds its share of the lane's slots
	// (dispatch.ClaimerConfig.Reserve), so the claim fills the slots it
	// keeps free with the other tenants' rows only.
	Skip string
	// SkipScope narrows Skip to one scope of its tenant (nil: all of it):
	// a claimer's scope that holds nearly all of the tenant's share of the
	// slots, so that part of the slots kept free takes the tenant's other
	// scopes' rows too. SkipCap, with SkipScope, is how many of those
	// rows the claim may take (0: no cap); the other tenants' rows are not
	// capped by it.
	SkipScope *string
	SkipCap   int
	// After is the tenant the caller's claim before served last ("" none).
	// Rows whose turns tie go round the tenants in byte order, starting
	// with the first tenant after After: a loop that passes the tenant it
	// served last (package dispatch) makes claims of one row take the
	// tenants in turn. Broken by age instead, a tie went to the tenant
	// with the older backlog, and where claims take one row each with
	// nothing in flight (a relay's window topped up one row at a time, a
	// claimer of one slot) every turn tied and a small tenant's row waited
	// behind all of a big tenant's.
	After string
	// Scopes maps a tenant to the scope the caller's claims served last in
	// it (absent: none). Inside a tenant, rows whose turns tie go round its
	// scopes as After makes them go round the tenants, starting with the
	// first scope after the tenant's entry: with one memory for the whole
	// loop, a tenant served between other tenants' turns would start its
	// round again each time, and its first scope's backlog would take
	// every one of its turns.
	Scopes map[string]string
}

// SkipCapped is how many of Skip's tenant's other scopes' rows the claim
// may take: SkipCap when it applies (with SkipScope), 0 for no cap.
func (p OutboxClaimParams) SkipCapped() int {
	if p.SkipScope == nil || p.SkipCap <= 0 {
		return 0
	}
	return p.SkipCap
}

// State is the state a claim with these params puts rows in.
func (p OutboxClaimParams) State() heraldtype.OutboxState {
	if p.Publishing {
		return heraldtype.OutboxPublishing
	}
	return heraldtype.OutboxClaimed
}

// Claimed is a leased outbox row with its job.
type Claimed struct {
	heraldtype.Job
	Fence Fence
	// Attempts counts the dispatcher's earlier failed attempts on the row.
	Attempts int
	// AvailableAt is when the row fell due (read by a held claim,
	// OutboxHolder, for its HeldPast; zero otherwise).
	AvailableAt time.Time
}

// OutboxHolder is an outbox whose relay claims can be held in a
// transaction until the broker has confirmed them (PostgreSQL; SQLite's
// one writer cannot hold a transaction open beside the others). A held
// claim writes each row PUBLISHED at once, its one row version, instead of
// PUBLISHING and then PUBLISHED: every other transaction still sees the
// rows PENDING with their old token until the claim commits, and a claim
// that rolls back, or whose process or connection dies, leaves them
// PENDING, due at once, for the next claim. Writes fenced by the new token
// (a consumer putting a row back, store.Deferrals) wait for the commit.
type OutboxHolder interface {
	// OutboxClaimHold claims as OutboxClaim does with Publishing, in a
	// transaction it leaves open (no rows: nothing held, and a nil Hold).
	// Each Past entry is a tenant's scope whose rows this relay already
	// holds: the claim starts past Past's row in it, as the rows up to it
	// are held (skipping them one by one costs what the held claim
	// saves). A row that falls due behind it is found by a claim without
	// Past.
	OutboxClaimHold(ctx context.Context, p OutboxClaimParams, past []HeldPast) ([]Claimed, Hold, error)
}

// HeldPast is the last row (by due time and id) a relay holds in a
// tenant's scope (OutboxHolder).
type HeldPast struct {
	Tenant, Scope string
	AvailableAt   time.Time
	ID            int64
}

// Hold is an open held claim (OutboxHolder).
type Hold interface {
	// Commit ends the claim: its rows are PUBLISHED, but for those named
	// in unpublished (not confirmed by the broker), which are left
	// PUBLISHING under the claim's owner and lease, as a claim that did
	// not hold leaves its rows, for the relay's fenced writes (retry,
	// fail) to follow, and those in putBack (not published: the relay's
	// gate deferred them), PENDING again as OutboxRetry leaves a row (Failed
	// is ignored: a put back is no failed attempt). An error leaves it
	// unknown whether the commit took (a lost connection): the rows are
	// then either committed or PENDING again.
	Commit(ctx context.Context, unpublished []Fence, putBack []OutboxRetryParams) error
	// Rollback ends the claim with nothing written: the rows are PENDING
	// again with their old token.
	Rollback(ctx context.Context)
}

// OutboxRetryParams puts a claimed row back.
type OutboxRetryParams struct {
	Fence  Fence
	Delay  time.Duration
	Reason string
	// Failed counts the attempt toward the dispatcher's backoff (an error
	// before any delivery decision). A retry the sender scheduled
	// (RETRY_WAIT) does not count.
	Failed bool
}

// Expired is an outbox row that passed its expires_at unsent.
type Expired struct {
	ID        int64
	MessageID string
	Tenant    string
	Lane      heraldtype.Lane
	Channel   heraldtype.Channel
	// DeliveryEnded: the message's delivery was waiting in RETRY_WAIT, and
	// the same write ended it SUPPRESSED(EXPIRED): it entered that state by
	// this call.
	DeliveryEnded bool
}

// StaleSweepOwner is the owner of the attempt the stale sweep logs for
// each claim it turns UNKNOWN: a call that may have gone out (a crash
// between the claim and the result leaves no other trace), logged class
// unknown, reason STALE_CLAIM, from the claim to the sweep. A sender's own
// late result for that attempt finds it logged and adds nothing.
const StaleSweepOwner = "stale-sweep"

// StaleClaim is a SENDING claim that the stale sweep turned UNKNOWN.
type StaleClaim struct {
	MessageID string
	Tenant    string
	// Lane is the notification's lane ("" when its notification row is
	// missing), Channel the delivery's.
	Lane    heraldtype.Lane
	Channel heraldtype.Channel
}

// Delivery is the sender's row for one message_id.
type Delivery struct {
	MessageID      string
	NotificationID string
	Tenant         string
	Channel        heraldtype.Channel
	Provider       string
	State          heraldtype.DeliveryState
	Reason         string
	Attempts       int
	ClaimedAt      *time.Time
	NextAttemptAt  *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// DeliveryClaimParams claims a message_id.
type DeliveryClaimParams struct {
	MessageID      string
	NotificationID string
	Tenant         string
	Channel        heraldtype.Channel
	Provider       string
	Owner          string
	// Event, when set, is the send's event key, taken with the claim
	// (package suppression): one write before the call, not two.
	Event *EventKeyTakeParams
}

// DeliveryClaimResult says whether the caller won the claim.
type DeliveryClaimResult struct {
	Claimed bool
	// Attempt is the number of this provider call (1 for the first).
	Attempt int
	// Current is the row that blocked the claim when Claimed is false, or
	// the one the claim itself ended (Cancelled); nil when the event key
	// blocked it.
	Current *Delivery
	// Cancelled: the claim itself ended Current SUPPRESSED(CANCELLED), a
	// send whose notification was cancelled or a retry whose campaign was
	// (store.Cancels); the caller counts that end.
	Cancelled bool
	// Event is what the take of the params' Event found (zero without
	// one).
	Event EventKeyTakeResult
}

// DeliveryRecordParams is the result of one claimed attempt.
type DeliveryRecordParams struct {
	MessageID string
	Attempt   int
	State     heraldtype.DeliveryState
	Reason    string
	// RetryDelay sets next_attempt_at when State is RETRY_WAIT.
	RetryDelay time.Duration
	// ProviderRef is the provider's own id for the message when it answered
	// one (Outcome.ProviderRef): a status look-up by that id needs it.
	ProviderRef string

	// The attempt log row.
	Owner     string
	Class     string
	StartedAt time.Time
	Duration  time.Duration

	// OffChain, for a result without Outbox, says the job's row is on no
	// fallback chain (heraldtype.Job.OffChain): the write moves no chain
	// and need not look for one. False when not known.
	OffChain bool
	// Lane is the notification's, when known (DeliveryDecideParams.Lane).
	Lane heraldtype.Lane

	// Outbox, when set, is the claimed outbox row the job came from. The
	// same write then settles it, fenced, if the result itself was
	// recorded: back to PENDING after RetryDelay for RETRY_WAIT, otherwise
	// DONE with Reason. One statement instead of the transport's second.
	Outbox *Fence
}

// OnNoChain says the send is on no fallback chain, as the job told it
// (OffChain, a job that came as a message) or the claim read it
// (Outbox.OffChain): its end has no chain to move.
func (p DeliveryRecordParams) OnNoChain() bool {
	return p.OffChain || p.Outbox != nil && p.Outbox.OffChain
}

// RecordResult is what DeliveryRecord wrote.
type RecordResult struct {
	// Recorded: the row was SENDING at that attempt and now holds the result.
	Recorded bool
	// OutboxSettled: Outbox was set, and its row was settled by the same write.
	OutboxSettled bool
}

// DeliveryDecideParams records a decision not to send now.
type DeliveryDecideParams struct {
	MessageID      string
	NotificationID string
	Tenant         string
	Channel        heraldtype.Channel
	State          heraldtype.DeliveryState // SUPPRESSED or PARKED
	Reason         string
	// Lane is the notification's, when known: PostgreSQL runs a marketing
	// lane's writes after the rest of their pipeline batch, so a
	// campaign's lock waits never hold another lane's statements.
	Lane heraldtype.Lane
}

// DecodeProfile turns a stored profile document into a Profile. Every
// driver stores json.Marshal(Profile) and reads it back through this.
func DecodeProfile(tenant, recipient string, data []byte, updated time.Time) (Profile, error) {
	var p Profile
	if err := json.Unmarshal(data, &p); err != nil {
		return Profile{}, fmt.Errorf("decode profile: %w", err)
	}
	p.Tenant, p.Recipient, p.UpdatedAt = tenant, recipient, updated.UTC()
	return p, nil
}

// Profile is what herald knows of a recipient, read at send time.
type Profile struct {
	Tenant    string `json:"-"`
	Recipient string `json:"-"`
	// Addresses holds a destination per channel (phone, device token, e-mail).
	Addresses map[heraldtype.Channel]string `json:"addresses,omitempty"`
	// Consent records marketing consent per channel; absent means no consent.
	Consent   map[heraldtype.Channel]bool `json:"consent,omitempty"`
	Language  string                      `json:"language,omitempty"`
	TimeZone  string                      `json:"time_zone,omitempty"`
	UpdatedAt time.Time                   `json:"-"`
}

// NotificationListParams selects a page of a tenant's notifications. Empty
// strings and nil match everything.
type NotificationListParams struct {
	Tenant    string
	Recipient string
	Kind      string
	// State keeps notifications with at least one planned send that
	// NotificationView.EntryState shows in that state.
	State string
	// Since keeps notifications created at or after it.
	Since *time.Time
	// Before keeps notifications strictly older than the position, in the
	// list's order: the keyset of the next page.
	Before *ListPosition
	// Limit caps the notifications returned; at least 1.
	Limit int
}

// ListPosition is a place in the list's order: created_at by the store's
// clock, then the id, which is unique, so rows created at the same instant
// keep one order and a page boundary never skips or repeats one.
type ListPosition struct {
	CreatedAt time.Time
	ID        string
}

// Position returns the notification's place in the list's order.
func (v NotificationView) Position() ListPosition {
	return ListPosition{CreatedAt: v.CreatedAt, ID: v.ID}
}

// EntryState is the state the read API shows for one planned send of v,
// merging the dispatcher's outbox row and the sender's delivery row:
//
//  1. a terminal delivery state (with its reason);
//  2. an outbox row that ended without a send: EXPIRED or FAILED, or a
//     fallback step that waits (WAITING) or was not needed (SKIPPED);
//  3. a waiting delivery state: SENDING, RETRY_WAIT, PARKED;
//  4. before the sender has written anything, SCHEDULED while send_at is
//     after v.Now, PENDING after.
//
// The drivers compute the same in SQL for NotificationListParams.State; the
// conformance suite holds the two equal.
func (v NotificationView) EntryState(dv DeliveryView) (state, reason string, updated time.Time) {
	d := dv.Delivery
	switch {
	case d != nil && d.State.Terminal():
		return string(d.State), d.Reason, d.UpdatedAt
	case dv.OutboxState == heraldtype.OutboxExpired || dv.OutboxState == heraldtype.OutboxFailed ||
		dv.OutboxState == heraldtype.OutboxWaiting || dv.OutboxState == heraldtype.OutboxSkipped:
		return string(dv.OutboxState), dv.OutboxReason, dv.OutboxUpdated
	case d != nil:
		return string(d.State), d.Reason, d.UpdatedAt
	case v.SendAt != nil && v.SendAt.After(v.Now):
		return heraldtype.ViewScheduled, "", dv.OutboxUpdated
	default:
		return heraldtype.ViewPending, "", dv.OutboxUpdated
	}
}

// Attempt is one logged provider call. It holds no provider body: the
// outcome class and a reason code only.
type Attempt struct {
	MessageID string
	// Attempt is the delivery's attempt number (1 for the first call).
	Attempt   int
	StartedAt time.Time
	// Class is the provider outcome class (accepted, not_sent, permanent, unknown).
	Class    string
	Reason   string
	Duration time.Duration
}

// Inbox is the recipient inbox (DESIGN §4): the items intake writes with
// their notifications (NotificationCreateParams.Inbox), their read state,
// and one counter row per recipient holding the last seq and the unread
// count.
//
// seq numbers one recipient's items 1, 2, 3…: intake takes the next one by
// bumping the recipient's counter row in the transaction that inserts the
// item, so that row's lock orders one recipient's inserts, and seq order is
// commit order with no gap a reader can see: a cursor or a Last-Event-ID
// over seq never skips an item that commits late.
//
// unread counts the items with neither read_at nor archived_at. Every write
// that changes that set takes the counter row's lock first and changes
// unread in the same transaction by exactly the rows it changed, so the
// counter stays exact under any concurrency; InboxRecount recomputes it
// from the items, for a counter broken by hand or by a bug.
type Inbox interface {
	// InboxFeed returns a page of a recipient's items, newest first, with
	// the badge read in the same snapshot.
	InboxFeed(ctx context.Context, p InboxFeedParams) (InboxPage, error)
	// InboxItemsAfter returns up to limit of a recipient's items with seq >
	// afterSeq, oldest first, archived ones included (a stream's replay).
	InboxItemsAfter(ctx context.Context, tenant, recipient string, afterSeq int64, limit int) ([]InboxItem, error)
	// InboxBadge reads the recipient's counter row (zero when there is none).
	InboxBadge(ctx context.Context, tenant, recipient string) (InboxBadge, error)
	// InboxMarkRead sets read_at on the recipient's own unread items named
	// by p (others' ids and unknown ids are ignored; items read already
	// keep their read_at) and returns the badge after it.
	InboxMarkRead(ctx context.Context, p InboxMarkReadParams) (InboxBadge, error)
	// InboxArchive sets archived_at on one of the recipient's items (kept
	// if set already). It reports whether the recipient has that item.
	InboxArchive(ctx context.Context, tenant, recipient, messageID string) (bool, error)
	// InboxRecount recomputes counters from the items, in batches of
	// p.Batch counter rows, each batch its own transaction, and reports
	// the rows it found wrong (and set right).
	InboxRecount(ctx context.Context, p InboxRecountParams) (InboxRecountResult, error)
	// InboxPurge deletes up to p.Limit items created before p.Before, oldest
	// first, and takes the unread ones off their counters in the same
	// transaction. It returns how many it deleted; fewer than p.Limit means
	// none is left.
	InboxPurge(ctx context.Context, p InboxPurgeParams) (int, error)
}

// InboxText is one rendering of an inbox item: the text for one locale of
// the kind's inbox template. Locale is the lower-case tag ("ko", "en-gb",
// "default"), or "" when the template has no locales (the only text then).
// Of several, the store keeps the one locale.Pick chooses for the
// recipient's profile language, read in the create's transaction.
type InboxText struct {
	Locale string
	Title  string
	Body   string
}

// InboxItem is one item of a recipient's inbox. MessageID (the
// notification's id + ".inbox") is its public id.
type InboxItem struct {
	Seq            int64
	MessageID      string
	NotificationID string
	Kind           string
	Title          string
	Body           string
	CreatedAt      time.Time
	ReadAt         *time.Time
	ArchivedAt     *time.Time
}

// InboxFeedParams selects a page of a recipient's feed.
type InboxFeedParams struct {
	Tenant    string
	Recipient string
	// Before keeps items with seq < Before; 0 starts at the newest.
	Before int64
	// Limit caps the items; at least 1.
	Limit int
	// Archived includes archived items (excluded by default).
	Archived bool
}

// InboxPage is one page of a feed.
type InboxPage struct {
	Items []InboxItem
	// Next is the Before of the next page, 0 when this page is the last.
	Next  int64
	Badge InboxBadge
}

// InboxBadge is a recipient's counter row.
type InboxBadge struct {
	// Unread counts items neither read nor archived.
	Unread int64
	// Seq is the seq of the recipient's newest item (0: none yet).
	Seq int64
}

// InboxMarkReadParams names the items to mark read: IDs (message ids), or
// All, every unread item up to UpToSeq (0: every one).
type InboxMarkReadParams struct {
	Tenant    string
	Recipient string
	IDs       []string
	All       bool
	UpToSeq   int64
}

// InboxRecountParams selects the counters to recompute: one recipient
// (Tenant and Recipient), one tenant's (Tenant), or every one (neither).
type InboxRecountParams struct {
	Tenant    string
	Recipient string
	// Batch is how many counter rows one transaction recomputes. Defaults to 1,000.
	Batch int
}

// InboxRecountResult is what a recount found.
type InboxRecountResult struct {
	// Checked counts the counter rows recomputed.
	Checked int
	// Drifted lists the rows that were wrong, as they were and as they are
	// now, in (tenant, recipient) order; at most MaxInboxDrifts of them
	// (Repaired counts them all).
	Drifted  []InboxDrift
	Repaired int
}

// MaxInboxDrifts bounds InboxRecountResult.Drifted.
const MaxInboxDrifts = 100

// InboxDrift is one counter row a recount set right.
type InboxDrift struct {
	Tenant    string
	Recipient string
	// Was is the row before the recount, Now after it.
	Was, Now InboxBadge
}

// InboxPurgeParams selects items to purge: created before Before, of
// Tenant ("" for every tenant but those in Except).
type InboxPurgeParams struct {
	Tenant string
	Except []string
	Before time.Time
	// Limit caps the items deleted by one call; at least 1.
	Limit int
}
