// Package auth authenticates herald's callers: a tenant's backend by its
// API key (Keys, bearer keys mapped to tenants), an app by a recipient
// token (RecipientTokens: a short-lived JWT herald mints for one recipient
// of one tenant, recipient.go).
//
// # Which credential where
//
// /v1/me/… takes a recipient token only, everything else an API key (or,
// under /v1/ops/…, an operator key) only; each refuses the other with 401.
// RequireRecipient is the /v1/me/… side; an API-key route needs nothing
// more than Keys.Lookup, which knows no token.
//
// A handler behind RequireRecipient reads who is asking with
// RequiredRecipient(w, r) (RecipientFrom(r.Context()), answering 401 when
// the route lacks the middleware): the verified tenant and recipient. It never
// takes either from the path, the query or the body. auth.Tenant(ctx) is
// empty there: it is the API key's tenant.
package auth

import (
	"context"
	"crypto/sha256"
)

type tenantKey struct{}

// WithTenant returns ctx carrying the tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// Tenant returns the tenant in ctx, or "".
func Tenant(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// Keys maps API keys to tenants, by the keys' SHA-256 digests.
type Keys struct {
	byHash map[[32]byte]string
}

// NewKeys builds the map from key → tenant.
func NewKeys(m map[string]string) *Keys {
	k := &Keys{byHash: make(map[[32]byte]string, len(m))}
	for key, tenant := range m {
		k.byHash[sha256.Sum256([]byte(key))] = tenant
	}
	return k
}

// Lookup returns the tenant of an Authorization header value.
func (k *Keys) Lookup(header string) (string, bool) {
	token, ok := bearer(header)
	if !ok || k == nil {
		return "", false
	}
	// Looking up the digest, not the key, keeps lookup time independent of
	// how much of a guessed key matches.
	tenant, ok := k.byHash[sha256.Sum256([]byte(token))]
	return tenant, ok
}

// Bearer returns the credential of an Authorization header value
// "Bearer <credential>" (the scheme in any case).
func Bearer(header string) (string, bool) { return bearer(header) }
