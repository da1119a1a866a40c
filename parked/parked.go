// Package parked is the operator's view of parked messages (DESIGN §2): a
// message whose failure would recur (a missing template, an unknown kind, a
// body that is not a job, a message that kept killing its consumer) waits
// until a person fixes the cause and requeues it, or decides it can never
// be sent and discards it. Requeueing keeps the message id, so the
// deliveries claim still blocks a duplicate; discarding ends the delivery
// SUPPRESSED(DISCARDED) and is audited (who, when, why).
//
// Each transport keeps parked messages where it re-offers them from: with
// db, the PARKED deliveries and their finished outbox rows (DB, here); with
// rabbitmq, the parking queue (rabbitmq.Parking).
//
// Who sees what is a Scope: a tenant's API key sees only that tenant's
// messages; the operator (the CLI, which holds the configuration) sees
// every tenant's and the untenanted ones — a body that is not a job names
// no tenant, so no tenant may see it.
//
// A requeue (the delivery enters RETRY_WAIT), a refused rabbitmq requeue
// (PARKED again) and a discard (SUPPRESSED) are delivery state entries,
// counted in herald_deliveries_total like the sender's when the service's
// store is wrapped by Counted, as the server's is: the HTTP endpoints
// count. herald parked requeue and discard on the command line run in a
// process of their own and count nothing: the server's counter does not
// see their entries.
package parked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/store"
)

// Entry is one parked message (store.ParkedEntry: ids, codes and names
// only; Kind is the notification's kind, the one UNKNOWN_KIND could not
// find).
//
// Every field is present in its JSON: notification_id, kind, lane and
// channel are null when the message does not say (a body that is not a
// job, on rabbitmq); with db they are always set.
type Entry store.ParkedEntry

// MarshalJSON writes the listing's fields; the tenant is left out (a tenant
// lists only its own).
func (e Entry) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		MessageID      string    `json:"message_id"`
		NotificationID *string   `json:"notification_id"`
		Kind           *string   `json:"kind"`
		Lane           *string   `json:"lane"`
		Channel        *string   `json:"channel"`
		Reason         string    `json:"reason"`
		ParkedAt       time.Time `json:"parked_at"`
	}{e.MessageID, orNull(e.NotificationID), orNull(e.Kind), orNull(string(e.Lane)), orNull(string(e.Channel)), e.Reason, e.ParkedAt})
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Scope is whose parked messages a call sees and acts on. The zero Scope
// sees nothing.
type Scope struct {
	tenant     string
	operator   bool
	untenanted bool
}

// Tenant is a tenant's scope (an API key): its own messages only, never
// another tenant's or an untenanted one. An empty tenant sees nothing.
func Tenant(tenant string) Scope { return Scope{tenant: tenant} }

// Operator is the operator's scope: tenant's messages, or with tenant ""
// every message, untenanted ones included.
func Operator(tenant string) Scope { return Scope{tenant: tenant, operator: true} }

// Untenanted is the operator's scope over the messages that name no tenant.
func Untenanted() Scope { return Scope{operator: true, untenanted: true} }

// Sees reports whether a message of tenant ("" for none) is in s.
func (s Scope) Sees(tenant string) bool {
	switch {
	case !s.operator:
		return s.tenant != "" && tenant == s.tenant
	case s.untenanted:
		return tenant == ""
	default:
		return s.tenant == "" || tenant == s.tenant
	}
}

// storeTenant is the store's tenant filter for s ("" for every tenant),
// and false when s can see no delivery: every delivery has a tenant.
func (s Scope) storeTenant() (string, bool) {
	switch {
	case s.untenanted:
		return "", false
	case !s.operator && s.tenant == "":
		return "", false
	}
	return s.tenant, true
}

// Service lists, requeues and discards parked messages.
type Service interface {
	// List returns up to limit parked messages in s, oldest first (db) or
	// in queue order (rabbitmq).
	List(ctx context.Context, s Scope, limit int) ([]Entry, error)
	// Requeue re-offers the parked message messageID, or every parked
	// message in s when messageID is "", and returns how many, tenant by
	// tenant: with an error too, what it requeued before the error.
	Requeue(ctx context.Context, s Scope, messageID string) (Done, error)
	// Discard ends the parked message d.MessageID for good and audits it,
	// and returns its tenant's count of one. A message that is not parked
	// in s (never was, another tenant's, already discarded or requeued) is
	// ErrNotFound; an invalid d is ErrReason. With another error, a
	// count of one says the discard was recorded and only removing a
	// parked copy failed (rabbitmq): a second discard finishes it.
	Discard(ctx context.Context, s Scope, d Discard) (Done, error)
}

// Done is what a requeue or a discard did: how many messages, under each
// one's tenant ("" for a message that names none). It is what their audit
// entries are written from, one a tenant, so that a tenant sees the
// operator's actions on its own messages; a call that failed part-way
// returns what it had done, whose entries are written all the same.
type Done map[string]int

// Total is how many messages, over every tenant.
func (d Done) Total() int {
	n := 0
	for _, c := range d {
		n += c
	}
	return n
}

// Tenants returns d's tenants, sorted.
func (d Done) Tenants() []string {
	return slices.Sorted(maps.Keys(d))
}

// one is a Done of one message of tenant.
func one(tenant string) Done { return Done{tenant: 1} }

// ErrNotFound is a requeue or discard of a message id that is not parked
// (or belongs to another tenant).
var ErrNotFound = errors.New("parked: no such parked message")

// ErrCopyLeft is a discard that was recorded but left a parked copy
// (rabbitmq: the copy's ack failed). A second discard removes it, without
// a second record.
var ErrCopyLeft = errors.New("the discard is recorded, but a parked copy could not be removed; discard it again to remove it")

// ErrReason is a discard without a usable reason.
var ErrReason = errors.New("parked: a discard needs a reason")

// MaxReasonLen is the longest discard reason, in characters.
const MaxReasonLen = 500

// Discard is one person's decision that a parked message can never be
// sent.
type Discard struct {
	MessageID string
	// Reason is why, in the person's words: required, at most MaxReasonLen
	// characters. It is stored in the audit row, never logged.
	Reason string
	// Actor is who: "api:<tenant>" or "cli:<OS user>".
	Actor string
}

// Validate checks d's reason; the error wraps ErrReason and says what is
// wrong.
func (d Discard) Validate() error {
	switch n := utf8.RuneCountInString(d.Reason); {
	case strings.TrimSpace(d.Reason) == "":
		return fmt.Errorf("%w: reason is required", ErrReason)
	case !utf8.ValidString(d.Reason):
		return fmt.Errorf("%w: reason is not valid UTF-8", ErrReason)
	case n > MaxReasonLen:
		return fmt.Errorf("%w: reason is %d characters, at most %d are kept", ErrReason, n, MaxReasonLen)
	}
	return nil
}

// DB is the db transport's Service: the deliveries table's PARKED rows.
type DB struct {
	Store store.Parked
	// PageSize is how many messages one requeue statement takes. Defaults
	// to store.ParkedRequeueParams' default (1000).
	PageSize int
}

var _ Service = DB{}

// List returns parked deliveries, oldest first.
func (d DB) List(ctx context.Context, s Scope, limit int) ([]Entry, error) {
	tenant, ok := s.storeTenant()
	if !ok {
		return nil, nil
	}
	rows, err := d.Store.ParkedList(ctx, store.ParkedListParams{Tenant: tenant, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(rows))
	for i, r := range rows {
		out[i] = FromStore(r)
	}
	return out, nil
}

// Requeue turns the deliveries into due retries and their outbox rows back
// to PENDING, so a claimer offers them to the sender again. Requeueing every
// message goes page by page (a requeued row is no longer PARKED) until a
// page comes back short, and takes only what was parked before its first
// page: a message whose cause is not fixed parks again at once, and
// without that bound a requeue of more than a page would never end.
func (d DB) Requeue(ctx context.Context, s Scope, messageID string) (Done, error) {
	tenant, ok := s.storeTenant()
	if !ok {
		return nil, notFoundIf(messageID != "")
	}
	p := store.ParkedRequeueParams{Tenant: tenant, MessageID: messageID, Outbox: true, Limit: d.PageSize}
	done := Done{}
	for {
		rows, err := d.Store.ParkedRequeue(ctx, p)
		if err != nil {
			return done, err
		}
		for _, r := range rows {
			done[r.Tenant]++
		}
		if messageID != "" || len(rows) < p.LimitOrDefault() {
			break
		}
		if p.ParkedBefore.IsZero() {
			p.ParkedBefore = rows[0].ParkedAt // the store's time of the first page
		}
	}
	if messageID != "" && len(done) == 0 {
		return nil, ErrNotFound
	}
	return done, nil
}

// Discard ends the PARKED delivery SUPPRESSED(DISCARDED), only while it is
// still PARKED, settles its outbox row and writes the audit row, in one
// transaction.
func (d DB) Discard(ctx context.Context, s Scope, x Discard) (Done, error) {
	if err := x.Validate(); err != nil {
		return nil, err
	}
	tenant, ok := s.storeTenant()
	if !ok {
		return nil, ErrNotFound
	}
	res, err := d.Store.ParkedDiscard(ctx, store.ParkedDiscardParams{
		Tenant: tenant, MessageID: x.MessageID, Reason: x.Reason, Actor: x.Actor,
	})
	if err != nil {
		return nil, err
	}
	if !res.Discarded {
		return nil, ErrNotFound
	}
	return one(res.Tenant), nil // the delivery's tenant, also in the operator's scope over all
}

func notFoundIf(one bool) error {
	if one {
		return ErrNotFound
	}
	return nil
}

// FromStore converts a store row.
func FromStore(r store.ParkedEntry) Entry { return Entry(r) }
