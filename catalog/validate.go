package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// Limits on the identifiers of a request, so message ids and keys stay small.
const (
	MaxRecipientLen = validate.MaxRecipient // the path's limit too
	MaxEventIDLen   = 200
)

// Limits on a request's times (docs/hardening.md).
const (
	// MinExpiryWindow is the least time expires_at may leave after send_at
	// (or after now, without send_at).
	MinExpiryWindow = time.Second
	// DefaultSendAtHorizon is how far ahead send_at may be unless
	// Catalog.SendAtHorizon says otherwise (config send_at_horizon).
	DefaultSendAtHorizon = 366 * 24 * time.Hour
)

func (c *Catalog) sendAtHorizon() time.Duration {
	if c.SendAtHorizon > 0 {
		return c.SendAtHorizon
	}
	return DefaultSendAtHorizon
}

// Request is a notification as a caller asks for it, through the HTTP API
// or the Go API: both check it with Validate.
type Request struct {
	// Tenant sends it: a kind kept for other tenants (Kind.For) is
	// unknown to it.
	Tenant    string
	Recipient string
	EventID   string
	Kind      string
	Params    json.RawMessage
	SendAt    *time.Time
	ExpiresAt *time.Time
	// Scope is optional (heraldtype.ValidScope).
	Scope string
}

// FieldError says which field of a request is wrong and why.
type FieldError struct {
	// Param names the field ("recipient", "params.amount"); for missing
	// params, the first of Missing.
	Param  string
	Detail string
	// Missing names every param the kind's templates need that the request
	// lacks ("amount", "card.last4"), sorted; nil for other errors.
	Missing []string
	// UnknownKind: the kind is not in the catalog (Param "kind"). Over
	// HTTP the answer points at GET /v1/kinds.
	UnknownKind bool
}

func (e *FieldError) Error() string { return e.Detail }

// Validate checks r at time now: identifiers, the kind, the due-by, and that
// every template of the kind renders with the params. It returns the kind,
// the params to store ("{}" when there are none) and the kind's inbox
// texts rendered with them, one per locale (Kind.Inbox; nil without an
// inbox channel), for intake's inbox write.
func (c *Catalog) Validate(now time.Time, r Request) (*Kind, json.RawMessage, []store.InboxText, *FieldError) {
	bad := func(param, format string, args ...any) (*Kind, json.RawMessage, []store.InboxText, *FieldError) {
		return nil, nil, nil, &FieldError{Param: param, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case r.Recipient == "":
		return bad("recipient", "recipient is required")
	case len(r.Recipient) > MaxRecipientLen || !Printable(r.Recipient):
		return bad("recipient", "recipient must be 1..%d printable characters", MaxRecipientLen)
	case r.EventID == "":
		return bad("event_id", "event_id is required")
	case len(r.EventID) > MaxEventIDLen || !Printable(r.EventID):
		return bad("event_id", "event_id must be 1..%d printable characters", MaxEventIDLen)
	case r.Kind == "":
		return bad("kind", "kind is required")
	case !heraldtype.ValidScope(r.Scope):
		return bad("scope", "scope must be at most %d ASCII letters, digits and . _ : / -", heraldtype.MaxScopeLen)
	}
	kind := c.Kind(r.Kind)
	if kind != nil && !kind.For(r.Tenant) {
		kind = nil // another tenant's: as if there were none
	}
	if kind == nil {
		return nil, nil, nil, &FieldError{Param: "kind", Detail: fmt.Sprintf("unknown kind %q", r.Kind), UnknownKind: true}
	}
	if r.SendAt != nil && r.SendAt.After(now.Add(c.sendAtHorizon())) {
		return bad("send_at", "send_at is more than %s ahead (send_at_horizon)", c.sendAtHorizon())
	}
	if r.ExpiresAt != nil {
		if !r.ExpiresAt.After(now) {
			return bad("expires_at", "expires_at is already past")
		}
		if r.SendAt != nil && !r.ExpiresAt.After(*r.SendAt) {
			return bad("expires_at", "expires_at must be after send_at")
		}
		// A due-by too close to the send could only expire, and each
		// expiry is alerted: refuse it here instead.
		start := now
		if r.SendAt != nil && r.SendAt.After(now) {
			start = *r.SendAt
		}
		if r.ExpiresAt.Sub(start) < MinExpiryWindow {
			return bad("expires_at", "expires_at must be at least %s after send_at (or now)", MinExpiryWindow)
		}
	}
	// What no store can hold (\u0000, a lone surrogate, invalid UTF-8)
	// is refused here too, for the Go API's callers: the HTTP edge refused
	// it already (400).
	if err := validate.JSON(r.Params); err != nil {
		return bad("params", "params hold text no store can keep (%v)", err)
	}
	// intake's body limit bounds them over HTTP; the Go API's and a
	// campaign's (and each recipient's merged over it) are checked here.
	if len(r.Params) > MaxParamsBytes {
		return bad("params", "params are %d bytes as JSON; at most %d are accepted", len(r.Params), MaxParamsBytes)
	}
	params, err := DecodeParams(r.Params)
	if err != nil {
		return bad("params", "%s", err.Error())
	}
	if ferr := checkShape(params, c.limits); ferr != nil {
		return nil, nil, nil, ferr
	}
	if err := kind.Check(params); err != nil {
		var missing *MissingParamsError
		if errors.As(err, &missing) {
			noun := "param"
			if len(missing.Params) > 1 {
				noun = "params"
			}
			return nil, nil, nil, &FieldError{
				Param:   "params." + missing.Params[0],
				Detail:  fmt.Sprintf("kind %q needs %s %s", r.Kind, noun, quoteList(missing.Params)),
				Missing: missing.Params,
			}
		}
		return bad("params", "kind %q cannot render with these params: %v", r.Kind, err)
	}
	// Check rendered every text already; these are kept.
	inbox, err := kind.inbox(params)
	if err != nil {
		return bad("params", "kind %q cannot render its inbox text with these params: %v", r.Kind, err)
	}
	stored := r.Params
	if t := bytes.TrimSpace(stored); len(t) == 0 || string(t) == "null" {
		stored = json.RawMessage("{}")
	}
	return kind, stored, inbox, nil
}

// Printable reports whether s is valid UTF-8 without control characters
// (validate.Printable: a path's identifiers follow the same rule).
func Printable(s string) bool { return validate.Printable(s) }
