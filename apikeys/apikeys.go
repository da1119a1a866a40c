package apikeys

import (
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Scope is one thing a key may do. Every route of the API needs exactly
// one (httpapi lists them).
type Scope string

const (
	// ScopeSend writes: notifications, cancels, profiles, devices,
	// recipient tokens.
	ScopeSend Scope = "send"
	// ScopeRead reads: notifications, profiles, devices, kinds, consent
	// history.
	ScopeRead Scope = "read"
	// ScopeAdmin administers the tenant: keys, audit log, parked
	// messages, erasures.
	ScopeAdmin Scope = "admin"
)

// Scopes are every scope, in order.
var Scopes = []Scope{ScopeSend, ScopeRead, ScopeAdmin}

// ParseScopes checks names and returns them as scopes, each once, in the
// order of Scopes; none is an error.
func ParseScopes(names []string) ([]Scope, error) {
	if len(names) == 0 {
		return nil, errors.New("at least one scope is required (send, read, admin)")
	}
	seen := map[Scope]bool{}
	for _, n := range names {
		s := Scope(strings.TrimSpace(n))
		if !slices.Contains(Scopes, s) {
			return nil, fmt.Errorf("unknown scope %q (send, read, admin)", n)
		}
		seen[s] = true
	}
	var out []Scope
	for _, s := range Scopes {
		if seen[s] {
			out = append(out, s)
		}
	}
	return out, nil
}

// Iterations is the PBKDF2 rounds of a new key's hash (OWASP's figure for
// PBKDF2-HMAC-SHA256). Tests lower it.
var Iterations = 600_000

const (
	prefix    = "hk_"
	idLen     = 16 // base32 characters: 80 bits
	secretLen = 43 // base64url characters of 32 bytes
	saltLen   = 16
	hashLen   = 32
	hashAlgo  = "pbkdf2-sha256"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// New makes a key: its id, the whole key to show once, and the hash to
// store.
func New() (id, key, hash string, err error) {
	raw := make([]byte, 10+32)
	if _, err := rand.Read(raw); err != nil {
		return "", "", "", fmt.Errorf("make api key: %w", err)
	}
	id = strings.ToLower(idEncoding.EncodeToString(raw[:10]))
	secret := base64.RawURLEncoding.EncodeToString(raw[10:])
	hash, err = Hash(secret, Iterations)
	if err != nil {
		return "", "", "", err
	}
	return id, prefix + id + "_" + secret, hash, nil
}

// Parse splits a presented key into its id and secret; ok is false when
// it is not shaped like a stored key (a config key, or garbage).
func Parse(key string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) != idLen+1+secretLen || rest[idLen] != '_' {
		return "", "", false
	}
	return rest[:idLen], rest[idLen+1:], true
}

// Hash is secret's stored form with a fresh salt.
func Hash(secret string, iterations int) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hash api key: %w", err)
	}
	dk, err := pbkdf2.Key(sha256.New, secret, salt, iterations, hashLen)
	if err != nil {
		return "", fmt.Errorf("hash api key: %w", err)
	}
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("%s$%d$%s$%s", hashAlgo, iterations, b64.EncodeToString(salt), b64.EncodeToString(dk)), nil
}

// Check reports whether secret matches the stored hash, in time that does
// not depend on how much of it matches.
func Check(hash, secret string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 4 || parts[0] != hashAlgo {
		return false
	}
	iter, err := strconv.Atoi(parts[1])
	if err != nil || iter < 1 || iter > 10_000_000 {
		return false
	}
	b64 := base64.RawStdEncoding
	salt, err1 := b64.DecodeString(parts[2])
	want, err2 := b64.DecodeString(parts[3])
	if err1 != nil || err2 != nil || len(want) == 0 {
		return false
	}
	got, err := pbkdf2.Key(sha256.New, secret, salt, iter, len(want))
	return err == nil && subtle.ConstantTimeCompare(got, want) == 1
}
