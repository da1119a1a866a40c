// Package auth maps bearer API keys to tenants.
package auth

import (
	"context"
	"crypto/sha256"
	"strings"
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
	// The scheme is case-insensitive (RFC 9110 §11.1): "bearer" is "Bearer".
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", false
	}
	// Looking up the digest, not the key, keeps lookup time independent of
	// how much of a guessed key matches.
	tenant, ok := k.byHash[sha256.Sum256([]byte(strings.TrimSpace(token)))]
	return tenant, ok
}
