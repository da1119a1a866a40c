package provider

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// A provider's later word on a message it accepted comes two ways: it calls
// back (a delivery report, POST /v1/callbacks/{provider}) or herald asks
// (a status look-up, for an UNKNOWN delivery). Both are a Report, and the
// store applies it the same way: only PROVIDER_ACCEPTED and UNKNOWN move,
// to DELIVERED or to PERMANENT_FAILURE, once, and never back.

// ReportResult is what a report proves about one message.
type ReportResult int

const (
	// ReportPending: the provider has the message and has not finished
	// (queued, sent to the carrier, "sent"): it proves the call reached
	// the provider and nothing more. A PROVIDER_ACCEPTED delivery stays
	// so; an UNKNOWN one becomes PROVIDER_ACCEPTED (the call went out
	// after all), with the report's reason.
	ReportPending ReportResult = iota + 1
	// ReportDelivered: the provider (or the carrier behind it) delivered it.
	ReportDelivered
	// ReportFailed: the provider had it and could not deliver it, for good
	// (an undeliverable number, a blocked AlimTalk with no fallback).
	ReportFailed
	// ReportNotFound: a status look-up found no record of the message.
	// Some providers keep records only for days, some record a call only
	// once processed, so it proves nothing either way: the delivery stays
	// UNKNOWN for a person, with the reason.
	ReportNotFound
)

func (r ReportResult) String() string {
	switch r {
	case ReportPending:
		return "pending"
	case ReportDelivered:
		return "delivered"
	case ReportFailed:
		return "failed"
	case ReportNotFound:
		return "not_found"
	}
	return "report(?)"
}

// Report is a provider's word on one message.
type Report struct {
	// MessageID is herald's message id, as the provider echoes it (a
	// vendor's refkey, a query parameter of the callback URL herald gave).
	MessageID string
	// ProviderRef is the provider's own id for the message, when the
	// report has it.
	ProviderRef string
	Result      ReportResult
	// Reason is a stable, low-cardinality code: the provider's status or
	// result code with a prefix naming it (TWILIO_30003, BIZPPURIO_7001),
	// never free text from the provider.
	Reason string
	// At is when the provider says the result happened; zero when it does
	// not say.
	At time.Time
	// DeadDestination, with ReportFailed only: the destination itself is
	// gone (a number out of service, an unregistered device).
	DeadDestination bool
}

// StatusQuery names one message for a status look-up.
type StatusQuery struct {
	MessageID string
	// ProviderRef is what the provider answered when it accepted the call
	// (Outcome.ProviderRef); empty when the call's answer was lost, which
	// is exactly when an UNKNOWN needs the look-up: a provider that can
	// only be asked by its own reference cannot settle such a delivery.
	ProviderRef string
	// SentAt is when the call was made (providers that look up by date
	// need it).
	SentAt time.Time
}

// StatusChecker is a provider with a status look-up by message id or by
// its own reference. An error means the look-up itself failed (not
// reachable, refused, a rate limit): the delivery stays as it is for a
// later round. An answer the checker cannot read is an error too, never a
// guess.
type StatusChecker interface {
	Status(ctx context.Context, q StatusQuery) (Report, error)
}

// CallbackReceiver is a provider that sends delivery reports to
// POST /v1/callbacks/{provider name}.
type CallbackReceiver interface {
	// ParseCallback checks that r (whose body has been read into body)
	// came from the provider and returns the reports it carries. A
	// request that fails the check returns an error wrapping
	// ErrBadSignature, which is answered 401 and changes nothing; one
	// that passes but cannot be read wraps ErrBadCallback (400).
	ParseCallback(r *http.Request, body []byte) ([]Report, error)
}

// AccountReceiver is a CallbackReceiver whose provider sends every report
// of an account to one URL, whichever entry of the config sent the
// message: Bizppurio registers one report URL per account, and herald
// runs an account as one provider entry per channel. Entries with the
// same CallbackAccount (not "") take each other's reports: a report taken
// at one entry's POST /v1/callbacks/{name} settles a message that any of
// them sent, and still no message of another account.
type AccountReceiver interface {
	CallbackReceiver
	// CallbackAccount names the account the provider's reports come from,
	// equal only for the same account of the same vendor (the vendor, its
	// API, the account's id); "" shares with no other entry. Never a
	// secret: it may be compared and logged.
	CallbackAccount() string
}

// CallbackResponder is a CallbackReceiver that must answer its provider
// in a set shape (a vendor that retries a report until it reads a given
// body). Without it a processed callback is answered 204.
type CallbackResponder interface {
	CallbackReply(w http.ResponseWriter)
}

// ErrNoReference is a StatusChecker's answer to a query it cannot ask:
// the provider is asked only by its own reference, and the call's answer
// carried none (it was lost: the usual UNKNOWN). Asking again will not
// help; the delivery is left for a person.
var ErrNoReference = errors.New("status look-up: the provider is asked only by its own reference, and none was answered")

// Errors of ParseCallback.
var (
	ErrBadSignature = errors.New("callback: signature check failed")
	ErrBadCallback  = errors.New("callback: unreadable report")
)
