// Package provider is the boundary between herald and the services that reach
// people (APNs, FCM, SMS gateways, AlimTalk, e-mail, webhooks). An adapter
// answers every call with exactly one of four classes; the sender switches on
// the class and never guesses from error text.
//
// The classes follow DESIGN §2:
//
//	Accepted   the provider answered 2xx                     → PROVIDER_ACCEPTED
//	NotSent    definitely not sent (no request reached it,   → release the claim, retry
//	           or it refused with 401/403/429)
//	Permanent  refused for good (400/404/410/413/422)        → PERMANENT_FAILURE
//	           (DeadDestination: the device token itself is  → and its device is
//	           dead)                                            deactivated
//	Unknown    it may or may not have gone out (timeout after → UNKNOWN, never resent
//	           the request was written, reset mid-response,
//	           5xx, anything else)
package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// Class is what an adapter knows about a call's effect.
type Class int

const (
	Accepted Class = iota + 1
	NotSent
	Permanent
	Unknown
)

func (c Class) String() string {
	switch c {
	case Accepted:
		return "accepted"
	case NotSent:
		return "not_sent"
	case Permanent:
		return "permanent"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Outcome is the classified answer to one call.
type Outcome struct {
	Class Class
	// Reason is a stable, low-cardinality code (HTTP_503, TIMEOUT,
	// CONNECTION_REFUSED…). Never a raw provider message.
	Reason string
	// RetryAfter is the provider's own hint for NotSent (429 Retry-After),
	// within 0..MaxRetryAfter.
	RetryAfter time.Duration
	// ProviderRef is the provider's id for the message, when it returns one.
	ProviderRef string
	// RateLimited, with the NotSent class only: the provider refused the
	// call for its rate (HTTP 429, FCM QUOTA_EXCEEDED, Twilio 20429, a
	// vendor's call limit). The sender then slows that provider's shared
	// bucket for every process (package ratelimit).
	RateLimited bool
	// DeadDestination, with the Permanent class only: the provider said
	// the destination itself is dead for good, not just this message (FCM
	// UNREGISTERED, APNs 410 Unregistered, a webhook receiver's 410). The
	// sender deactivates the device a per-device push went to; for any
	// other send it is a permanent failure like another.
	DeadDestination bool
	// Suppressed, with the NotSent class only: the adapter's own guard
	// refused the call before anything left herald, on a rule of the send
	// policy (the non-production allow-list, NOT_ALLOWLISTED as Reason).
	// The sender records SUPPRESSED with Reason, final, and counts no
	// provider call.
	Suppressed bool
}

// MaxRetryAfter caps a provider's Retry-After hint: a provider that asks
// for a longer wait gets this one, and the retry schedule goes on from there.
const MaxRetryAfter = time.Hour

// Outcome constructors keep adapters terse.
func AcceptedOutcome(ref string) Outcome { return Outcome{Class: Accepted, ProviderRef: ref} }
func NotSentOutcome(reason string, retryAfter time.Duration) Outcome {
	return Outcome{Class: NotSent, Reason: reason, RetryAfter: retryAfter}
}
func PermanentOutcome(reason string) Outcome { return Outcome{Class: Permanent, Reason: reason} }
func UnknownOutcome(reason string) Outcome   { return Outcome{Class: Unknown, Reason: reason} }

// RateLimitedOutcome is a refusal for the provider's rate: not sent, with
// the provider's wait when it gave one (Outcome.RateLimited).
func RateLimitedOutcome(reason string, retryAfter time.Duration) Outcome {
	return Outcome{Class: NotSent, Reason: reason, RetryAfter: retryAfter, RateLimited: true}
}

// DeadDestinationOutcome is a permanent refusal because the destination is
// dead (Outcome.DeadDestination).
func DeadDestinationOutcome(reason string) Outcome {
	return Outcome{Class: Permanent, Reason: reason, DeadDestination: true}
}

// SuppressedOutcome is a call the adapter's guard refused for a rule of
// the send policy (Outcome.Suppressed).
func SuppressedOutcome(reason string) Outcome {
	return Outcome{Class: NotSent, Reason: reason, Suppressed: true}
}

// Message is what an adapter sends. MessageID is the provider reference on
// every copy, so a provider look-up can reconcile an UNKNOWN.
type Message struct {
	MessageID string             `json:"message_id"`
	Tenant    string             `json:"-"`
	Recipient string             `json:"recipient"`
	Kind      string             `json:"kind"`
	Channel   heraldtype.Channel `json:"channel"`
	// Address is the destination from the recipient's profile (phone number,
	// device token, e-mail address); empty for channels that need none.
	Address string `json:"-"`
	Title   string `json:"title"`
	Body    string `json:"body"`
	// SMSKind is the carrier message the Body goes as, chosen by its length
	// in EUC-KR bytes (package smstext): for the sms channel the message
	// itself, for alimtalk the fallback text the vendor resends. Set by
	// the text-limit rule; empty when nothing measured it (an adapter that
	// needs it measures the Body itself).
	SMSKind SMSKind `json:"-"`
}

// SMSKind is a Korean carrier's message type.
type SMSKind string

const (
	// SMSShort is a short SMS: at most 90 EUC-KR bytes.
	SMSShort SMSKind = "sms"
	// SMSLong is an LMS: at most 2,000 EUC-KR bytes, with a subject.
	SMSLong SMSKind = "lms"
)

// Provider sends one message.
type Provider interface {
	Send(ctx context.Context, m Message) Outcome
}

// Registry maps channels to the provider serving them, built explicitly at
// start. A push device's platform may have a provider of its own (FCM for
// fcm devices, APNs for apns ones): ForPlatform.
type Registry struct {
	byChannel  map[heraldtype.Channel]Named
	byPlatform map[platformKey]Named
	// firstOfPlatform is the first platform provider of a channel, its
	// provider where no entry serves the whole channel.
	firstOfPlatform map[heraldtype.Channel]Named
}

type platformKey struct {
	ch       heraldtype.Channel
	platform string
}

// Named is a provider and its configured name.
type Named struct {
	Name string
	Provider
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byChannel: map[heraldtype.Channel]Named{}, byPlatform: map[platformKey]Named{},
		firstOfPlatform: map[heraldtype.Channel]Named{}}
}

// Register makes p serve ch. The first provider registered for a channel
// wins (the configuration refuses a second: config.Config's check).
func (r *Registry) Register(ch heraldtype.Channel, name string, p Provider) {
	if _, ok := r.byChannel[ch]; !ok {
		r.byChannel[ch] = Named{Name: name, Provider: p}
	}
}

// RegisterPlatform makes p serve ch's devices of platform (push: "fcm",
// "apns"). Where no provider serves the whole channel (Register), the
// first platform provider registered stands for it in For: what needs a
// provider whatever the device (the allow-list) and the devices of a
// platform without one of its own.
func (r *Registry) RegisterPlatform(ch heraldtype.Channel, platform, name string, p Provider) {
	k := platformKey{ch, platform}
	if _, ok := r.byPlatform[k]; !ok {
		r.byPlatform[k] = Named{Name: name, Provider: p}
	}
	if _, ok := r.firstOfPlatform[ch]; !ok {
		r.firstOfPlatform[ch] = Named{Name: name, Provider: p}
	}
}

// ForPlatform returns the provider of ch's devices of platform, else the
// channel's (For).
func (r *Registry) ForPlatform(ch heraldtype.Channel, platform string) (Named, bool) {
	if n, ok := r.byPlatform[platformKey{ch, platform}]; ok {
		return n, true
	}
	return r.For(ch)
}

// For returns the provider serving ch.
func (r *Registry) For(ch heraldtype.Channel) (Named, bool) {
	if n, ok := r.byChannel[ch]; ok {
		return n, true
	}
	n, ok := r.firstOfPlatform[ch]
	return n, ok
}
