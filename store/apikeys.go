package store

import (
	"context"
	"sync/atomic"
	"time"
)

// APIKeys keeps the tenants' API keys (package apikeys has the key format,
// the KDF and the verification cache). A row holds a key's salted KDF hash,
// never the key. Every create and revoke bumps one revision counter in the
// same transaction, so a process learns that some key changed with one
// cheap read (APIKeyRevision); PostgreSQL also announces each change to
// every process on the database (NOTIFY), which bumps APIKeyChanges there.
type APIKeys interface {
	// APIKeyCreate stores k (ID, Tenant, Name, Scopes, Hash and ExpiresAt
	// set by the caller; CreatedAt is the store's now) and returns it as
	// stored.
	APIKeyCreate(ctx context.Context, k APIKey) (APIKey, error)
	// APIKeyGet returns the key of that id, revoked or expired ones too,
	// or ErrNotFound.
	APIKeyGet(ctx context.Context, id string) (APIKey, error)
	// APIKeyList returns a tenant's keys ("" every tenant's), oldest first.
	APIKeyList(ctx context.Context, tenant string) ([]APIKey, error)
	// APIKeyRevoke sets the key's RevokedAt to the store's now, unless it
	// is set already (a revoked key stays revoked at its first time), and
	// returns the row and whether this call revoked it (false: it was
	// revoked before, and nothing was written). A key of another tenant is
	// ErrNotFound; tenant "" revokes a key of any tenant (the operator's
	// CLI).
	APIKeyRevoke(ctx context.Context, tenant, id string) (APIKey, bool, error)
	// APIKeyRevision is the counter every create and revoke bumps.
	APIKeyRevision(ctx context.Context) (int64, error)
	// APIKeyChanges counts the key changes this process heard of: its own
	// writes, after they commit, and (PostgreSQL) every other process's,
	// through LISTEN/NOTIFY.
	APIKeyChanges() *APIKeyChanges
}

// APIKey is one stored API key.
type APIKey struct {
	ID     string
	Tenant string
	Name   string
	// Scopes are what the key may do (package apikeys: send, read, admin).
	Scopes []string
	// Hash is the key's secret as its KDF stored it, with the KDF's
	// parameters and salt (apikeys.Hash has the format).
	Hash string
	// CreatedBy names who created it (an admin key's id, "cli").
	CreatedBy string
	CreatedAt time.Time
	// ExpiresAt and RevokedAt are zero when there is none.
	ExpiresAt time.Time
	RevokedAt time.Time
}

// APIKeyChanges counts key changes heard by one process. The zero value is
// ready to use.
type APIKeyChanges struct{ n atomic.Uint64 }

// Changed records one more change (a driver calls it after its commit, or
// when it may have missed announcements).
func (c *APIKeyChanges) Changed() { c.n.Add(1) }

// Generation is the number of changes heard so far.
func (c *APIKeyChanges) Generation() uint64 { return c.n.Load() }
