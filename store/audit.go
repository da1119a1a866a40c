package store

import (
	"context"
	"time"
)

// Audit is the append-only log of admin actions (package audit says what
// is recorded and what is not). There is no update or delete: both drivers'
// tables refuse them with a trigger, so not even a mistaken statement of
// herald's can rewrite history.
type Audit interface {
	// AuditAppend adds e; the store sets ID (increasing in commit order
	// per tenant) and At (its now) and returns the entry as stored.
	AuditAppend(ctx context.Context, e AuditEntry) (AuditEntry, error)
	// AuditList returns a page of entries, newest first.
	AuditList(ctx context.Context, p AuditListParams) ([]AuditEntry, error)
}

// AuditEntry is one admin action. It holds no personal data: a recipient
// is named by a digest (package audit), never by its id or address.
type AuditEntry struct {
	ID int64
	At time.Time
	// Tenant is the tenant acted on; "" for an operator's action that
	// names none.
	Tenant string
	// ActorKey is the acting key's id (a stored key's, or "config:…" /
	// "operator:…" for a configured one); ActorName its name.
	ActorKey  string
	ActorName string
	// Action is what was done ("key.create", "parked.requeue", …).
	Action string
	// Target is what it was done to (a key id, a message id, a recipient's
	// digest); "" when the action names none.
	Target string
	// Remote is the address the request came from; "" for the CLI.
	Remote string
	// Detail is a small JSON object with the action's figures; "{}" when
	// none.
	Detail string
}

// AuditListParams selects a page of the audit log.
type AuditListParams struct {
	// Tenant limits the page to one tenant's entries; "" lists every
	// entry (the operator's CLI).
	Tenant string
	// Before, when not zero, returns only entries with a smaller id (the
	// cursor of the page before).
	Before int64
	// Limit caps the page. Defaults to 100.
	Limit int
}

// LimitOrDefault is p.Limit, or 100.
func (p AuditListParams) LimitOrDefault() int {
	if p.Limit <= 0 {
		return 100
	}
	return p.Limit
}
