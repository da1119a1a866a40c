// Package heraldtype holds the small vocabulary every other herald package
// shares: lanes, channels, the outbox and delivery state machines, reason
// codes and the Job a transport hands to the sender. It imports nothing of
// herald's own, so any package may import it without cycles.
package heraldtype

import (
	"encoding/json"
	"strings"
	"time"
)

// Lane is a priority class. Each lane has its own claim query (or queue) and
// its own sender concurrency, so one lane's backlog cannot delay another.
type Lane string

const (
	LaneAlert         Lane = "alert"
	LaneTransactional Lane = "transactional"
	LaneMarketing     Lane = "marketing"
	LaneInternal      Lane = "internal"
)

// Lanes lists every lane in the order claimers start.
var Lanes = []Lane{LaneAlert, LaneTransactional, LaneMarketing, LaneInternal}

// Valid reports whether l is one of the four lanes.
func (l Lane) Valid() bool {
	switch l {
	case LaneAlert, LaneTransactional, LaneMarketing, LaneInternal:
		return true
	}
	return false
}

// Channel is a way to reach a recipient.
type Channel string

const (
	ChannelPush     Channel = "push"
	ChannelSMS      Channel = "sms"
	ChannelAlimTalk Channel = "alimtalk"
	ChannelEmail    Channel = "email"
	ChannelWebhook  Channel = "webhook"

	// ChannelInbox is herald's own recipient inbox. Intake writes the item
	// in the notification's transaction and ends its planned send STORED at
	// once, so it needs no address and no provider, and no transport or
	// sender ever sees it. Kinds may list it; providers and profiles may not.
	ChannelInbox Channel = "inbox"
)

// Channels lists the channels a provider serves (every channel but the inbox).
var Channels = []Channel{ChannelPush, ChannelSMS, ChannelAlimTalk, ChannelEmail, ChannelWebhook}

// ChannelNames is Channels as a reader's list: "push, sms, …".
func ChannelNames() string {
	s := make([]string, len(Channels))
	for i, c := range Channels {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// Valid reports whether c is a channel a provider serves (ChannelInbox is
// not: see KindChannel).
func (c Channel) Valid() bool {
	for _, k := range Channels {
		if c == k {
			return true
		}
	}
	return false
}

// KindChannel reports whether a kind may list c: a provider's channel or the inbox.
func (c Channel) KindChannel() bool { return c == ChannelInbox || c.Valid() }

// NeedsAddress reports whether sending on c requires a destination from the
// recipient's profile. A webhook goes to the provider's configured URL; the
// inbox is herald's own.
func (c Channel) NeedsAddress() bool { return c != ChannelWebhook && c != ChannelInbox }

// DeviceSend is the channel of ch's send to one device. One planned send
// per channel is the rule; the push channel fans out instead, one send per
// active device of the recipient. Such a send's channel is the channel, a
// dot and the device id ("push.d1a2b3c4d5e6f7a8b"), and that is what the outbox and the
// deliveries keep in their channel column: (notification, channel) still
// names exactly one planned send and its message id is still
// notification id + "." + channel (store.MessageID). Base gives back the
// channel a provider, a template, consent and a metric label know.
func DeviceSend(ch Channel, deviceID string) Channel { return ch + "." + Channel(deviceID) }

// Base is the channel of a send: c itself, or c without its device.
func (c Channel) Base() Channel {
	if i := strings.IndexByte(string(c), '.'); i >= 0 {
		return c[:i]
	}
	return c
}

// Device is the device id of a send to one device, "" for any other send.
func (c Channel) Device() string {
	_, dev, _ := strings.Cut(string(c), ".")
	return dev
}

// ReasonUnregistered is the reason code a provider gives for a device
// token it knows to be dead (FCM UNREGISTERED, APNs 410 Unregistered); the
// device it names is deactivated with it.
const ReasonUnregistered = "UNREGISTERED"

// OutboxState is the dispatcher-owned state of an outbox row.
type OutboxState string

const (
	OutboxPending    OutboxState = "PENDING"
	OutboxClaimed    OutboxState = "CLAIMED"    // db transport: a claimer holds the lease
	OutboxPublishing OutboxState = "PUBLISHING" // rabbitmq transport: the relay holds the lease
	OutboxDone       OutboxState = "DONE"       // db transport: the sender finished with it
	OutboxPublished  OutboxState = "PUBLISHED"  // rabbitmq transport: the broker confirmed it
	OutboxSkipped    OutboxState = "SKIPPED"
	OutboxFailed     OutboxState = "FAILED"  // gave up after backoff
	OutboxExpired    OutboxState = "EXPIRED" // its expires_at passed before it was sent
	// OutboxWaiting: a later step of a fallback chain (channel policy
	// first, package fallback), taken by no claimer or relay until the
	// step before it fails definitely (then PENDING) or ends otherwise
	// (then SKIPPED).
	OutboxWaiting OutboxState = "WAITING"
)

// Terminal reports whether the dispatcher is finished with the row.
func (s OutboxState) Terminal() bool {
	switch s {
	case OutboxDone, OutboxPublished, OutboxSkipped, OutboxFailed, OutboxExpired:
		return true
	}
	return false
}

// DeliveryState is the sender-owned state of one message_id.
type DeliveryState string

const (
	DeliverySending          DeliveryState = "SENDING"    // claimed; a provider call may be in flight
	DeliveryRetryWait        DeliveryState = "RETRY_WAIT" // a definite non-send, retried at next_attempt_at
	DeliveryParked           DeliveryState = "PARKED"     // the same failure would recur; a person requeues it
	DeliveryProviderAccepted DeliveryState = "PROVIDER_ACCEPTED"
	DeliveryDelivered        DeliveryState = "DELIVERED"
	DeliveryPermanentFailure DeliveryState = "PERMANENT_FAILURE"
	DeliveryRetryExhausted   DeliveryState = "RETRY_EXHAUSTED"
	DeliveryUnknown          DeliveryState = "UNKNOWN"
	DeliverySuppressed       DeliveryState = "SUPPRESSED"
	// DeliveryStored: the inbox item (ChannelInbox) is written; herald was its
	// own provider. Recorded by intake with the item (in the notification
	// row: package store, inboxsend.go), never by a sender.
	DeliveryStored DeliveryState = "STORED"
)

// Terminal reports whether no automatic step will change the state again
// (a callback may still turn PROVIDER_ACCEPTED into DELIVERED).
func (s DeliveryState) Terminal() bool {
	switch s {
	case DeliveryProviderAccepted, DeliveryDelivered, DeliveryPermanentFailure,
		DeliveryRetryExhausted, DeliveryUnknown, DeliverySuppressed, DeliveryStored:
		return true
	}
	return false
}

// States shown by the read API before the sender has written a delivery row.
const (
	ViewScheduled = "SCHEDULED" // its send_at is ahead
	ViewPending   = "PENDING"   // waiting for a sender to claim it
)

// Reason codes. They are stable strings: dashboards, alerts and the action
// queue key on them. They never carry personal data or raw provider errors.
const (
	ReasonConsentDenied          = "CONSENT_DENIED"
	ReasonDestinationUnavailable = "DESTINATION_UNAVAILABLE"
	ReasonQuietHours             = "QUIET_HOURS"
	ReasonDuplicateEvent         = "DUPLICATE_EVENT"
	ReasonSuppressionUnavailable = "SUPPRESSION_UNAVAILABLE" // event keys could not be read; the category chose not to send
	ReasonReminderWindowMissed   = "REMINDER_WINDOW_MISSED"
	ReasonGatePaused             = "GATE_PAUSED"
	ReasonNotAllowlisted         = "NOT_ALLOWLISTED" // outside production, a destination not on the allow-list

	ReasonClaimExpired     = "CLAIM_EXPIRED"    // an outbox lease ran out
	ReasonClaimHeld        = "CLAIM_HELD"       // a recheck: another copy's claim (or a crash's) held the delivery SENDING
	ReasonStaleClaim       = "STALE_CLAIM"      // SENDING for longer than stale_claim_after
	ReasonExpired          = "EXPIRED"          // expires_at passed
	ReasonUnknownKind      = "UNKNOWN_KIND"     // the kind is no longer configured
	ReasonTemplateMissing  = "TEMPLATE_MISSING" // no template for the channel
	ReasonTemplateFailed   = "TEMPLATE_FAILED"  // the template no longer renders with these params
	ReasonNoProvider       = "NO_PROVIDER"      // no provider serves the channel
	ReasonMessageIDTooLong = "MESSAGE_ID_TOO_LONG"
	ReasonStoreUnavailable = "STORE_UNAVAILABLE"
	ReasonRequeued         = "REQUEUED"
	ReasonCancelled        = "CANCELLED" // a cancel request stopped a send that had not gone out
	ReasonDiscarded        = "DISCARDED" // a person discarded the parked message (SUPPRESSED, audited)
	ReasonStored           = "STORED"    // an inbox send: intake wrote the item and ended the send at once
	// A sealed value the send needs (params, an address, a device token)
	// did not open: its key is not in personal_data.keys (package seal).
	// PARKED: configure the key and requeue.
	ReasonPersonalDataUnreadable = "PERSONAL_DATA_UNREADABLE"

	// The text limits (package smstext): PARKED before any provider call.
	ReasonTextTooLong      = "TEXT_TOO_LONG"     // an SMS or AlimTalk fallback text over 2,000 EUC-KR bytes; a Twilio text over 1,600 characters
	ReasonEUCKRUnencodable = "EUCKR_UNENCODABLE" // an SMS or AlimTalk fallback text EUC-KR cannot encode (an emoji)
)

// MaxMessageIDLen is the longest message_id herald will claim; providers take
// it as their reference and most cap references at 100 characters.
const MaxMessageIDLen = 100

// Job is one planned send as a transport hands it to the sender: the outbox
// row joined with its notification. With the rabbitmq transport it is the
// message body, so it is plain JSON.
type Job struct {
	MessageID      string          `json:"message_id"`
	OutboxID       int64           `json:"outbox_id"`
	NotificationID string          `json:"notification_id"`
	Tenant         string          `json:"tenant"`
	Scope          string          `json:"scope,omitempty"`
	Recipient      string          `json:"recipient"`
	EventID        string          `json:"event_id"`
	Kind           string          `json:"kind"`
	Lane           Lane            `json:"lane"`
	Channel        Channel         `json:"channel"`
	Params         json.RawMessage `json:"params"`
	ExpiresAt      *time.Time      `json:"expires_at,omitempty"`
	// OffChain: the claim that published the job read that its outbox row
	// is on no fallback chain (Fence.OffChain), so the end of its send has
	// no chain to move and the store need not look for one. False when not
	// known (a message published before herald wrote it): the end then
	// looks.
	OffChain bool `json:"off_chain,omitempty"`
	// Known is what the transport learnt about the job on its way in, so
	// the sender need not read it again; nil when the transport says
	// nothing. Never part of the message body.
	Known *Known `json:"-"`
	// Outbox is the claimed outbox row the job came with (db transport);
	// nil for a job that arrived as a message. With it, the sender's result
	// write settles the row too, in the same transaction.
	Outbox *Fence `json:"-"`
}

// Fence identifies one claim of one outbox row: the row and the token its
// claim set. A write naming a stale token changes nothing. The row is named
// twice, by its id and by its (notification, channel) pair; each store
// finds it by the key it indexes.
type Fence struct {
	ID             int64
	NotificationID string
	Channel        Channel
	Token          int64
	// OffChain: the claim that set the token read that the row is on no
	// fallback chain (package fallback), so the end of its send has no
	// chain to move and its store need not look for one. False when not
	// known (a fence rebuilt from a job, a store whose claim does not say):
	// the end then looks.
	OffChain bool
	// LazyChain: the claim read that the row is a first step's send of a
	// lazy fallback chain (store/fallback.go) whose later steps had no
	// rows then. An end of its send that does not move the chain on (not
	// a definite failure) then runs no chain statement, on condition,
	// checked in the write that settles the row, that they still have
	// none. False when not known: the end then looks.
	LazyChain bool
}

// Known is what a transport learnt about a job on its way in: a store's
// claim reads it in the claim's statement; a broker knows whether it
// delivered the message before.
type Known struct {
	// Delivery: a delivery row exists for the message, or may. When false
	// the sender skips its peek (a fast path only; the claim still guards).
	Delivery bool
	// ProfileRead: Profile is the recipient's stored profile document as
	// the transport read it (nil: none), written at ProfileUpdatedAt; the
	// sender decodes it as ProfileGet would. When false the sender reads it.
	ProfileRead      bool
	Profile          []byte
	ProfileUpdatedAt time.Time
	// Cancelled: the notification was marked cancelled (a cancel
	// request, package cancel) when the transport read it. The mark is
	// permanent, so the sender ends the send SUPPRESSED(CANCELLED) at
	// once, before its rules (which might park it, defer it or spend a
	// rate-limit token on it). Only a claimer's claim (db transport)
	// reads it; false when not read (the relay's claim, a broker's copy,
	// intake's hand-over): the delivery claim reads the mark itself.
	Cancelled bool
}

// MaxScopeLen bounds a scope (ValidScope).
const MaxScopeLen = 64

// ValidScope reports whether s may name a scope: a part of a tenant its
// notifications belong to (a clinic, a brand, a shop), whose sends take
// turns with the tenant's other scopes' in a lane. The empty scope is the
// tenant's unscoped part. A scope is 1..MaxScopeLen letters, digits and
// . _ : / - (ASCII), an identifier of the tenant's and never a person's
// data: staff see scopes (DESIGN §6).
func ValidScope(s string) bool {
	if len(s) > MaxScopeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == ':', c == '/', c == '-':
		default:
			return false
		}
	}
	return true
}
