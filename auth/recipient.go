package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
)

// Recipient tokens let an app read one recipient's inbox (/v1/me/…)
// without the tenant's API key. herald mints them (POST
// /v1/recipients/{recipient}/tokens, with the API key, from the tenant's
// backend) and verifies them; it stores none.
//
// A token is a JWT (RFC 7519) signed with HS256:
//
//	header  {"alg": "HS256", "kid": KEY_ID, "typ": "JWT"}
//	claims  {"iss": "herald", "aud": ["herald-recipient"], "sub": RECIPIENT,
//	         "tnt": TENANT, "iat": …, "exp": …}
//
// Each tenant has its own keys (config recipient_tokens.keys). The first
// signs; every listed key verifies, so a key rotates with a grace period:
// list the new key first and keep the old one after it until the tokens it
// signed have expired (max_ttl at most), then drop it. A token verifies
// only if its alg is HS256 (none, RS256, HS512… are refused), it has an
// exp still ahead, its iss and aud are herald's, and its kid names a key
// of the tenant in its own tnt claim.
//
// The HMAC key is not the configured secret itself but one derived from it
// for the tenant and the purpose (DeriveKey): a token signed for tenant A
// cannot verify as tenant B's even where both tenants were configured
// with the same secret and key id, and a MAC made for another purpose (the
// feed cursor, RecipientTokens.Sign) is never a token's signature.

// Token claims' fixed values.
const (
	TokenIssuer   = "herald"
	TokenAudience = "herald-recipient"
	// MinSecretLen is the shortest secret a key may have, in bytes.
	MinSecretLen = 32
	// maxTokenLen bounds what is parsed at all. A token herald mints for
	// a 200-byte tenant and a 200-byte recipient of characters JSON
	// escapes six-fold ('<', U+2028) is about 3.5 KiB; a usual one is
	// under 400 bytes. Mint refuses to make a longer one, so every token
	// it makes verifies.
	maxTokenLen = 4096
	// purposeToken is the purpose of the keys that sign tokens.
	purposeToken = "recipient token"
)

// Errors of Mint and Verify.
var (
	// ErrNoKeys: the tenant has no recipient token keys configured.
	ErrNoKeys = errors.New("auth: no recipient token keys for this tenant")
	// ErrTokenExpired: a genuine token whose exp has passed.
	ErrTokenExpired = errors.New("auth: the recipient token has expired")
	// ErrTokenInvalid: anything else that is not a valid token.
	ErrTokenInvalid = errors.New("auth: not a valid recipient token")
	// ErrTTL: a mint asked for a lifetime under a second or over MaxTTL.
	ErrTTL = errors.New("auth: ttl out of range")
)

// RecipientKey is one key of a tenant's recipient token keys.
type RecipientKey struct {
	// ID goes into each token's kid header. 1..64 printable characters,
	// unique within the tenant.
	ID string
	// Secret is at least MinSecretLen random bytes.
	Secret []byte
}

// RecipientTokensConfig configures NewRecipientTokens.
type RecipientTokensConfig struct {
	// Keys maps a tenant to its keys; the first signs, all verify.
	Keys map[string][]RecipientKey
	// TTL is the lifetime of a token minted without one. Required.
	TTL time.Duration
	// MaxTTL is the longest lifetime a mint may ask for. Required, ≥ TTL.
	MaxTTL time.Duration
	// Clock tells the time for iat, exp and their check. Defaults to the
	// system clock.
	Clock clock.Clock
}

// RecipientTokens mints and verifies recipient tokens. Safe for concurrent
// use; a nil *RecipientTokens has no keys (it mints nothing, verifies
// nothing).
type RecipientTokens struct {
	keys        map[string][]RecipientKey
	ttl, maxTTL time.Duration
	clock       clock.Clock
	parser      *jwt.Parser
}

// Recipient is who a verified token speaks for.
type Recipient struct {
	Tenant string
	// ID is the recipient's id in its tenant.
	ID string
	// ExpiresAt is the token's exp.
	ExpiresAt time.Time
}

// MintedToken is a token and when it expires.
type MintedToken struct {
	Token     string
	ExpiresAt time.Time
}

// NewRecipientTokens checks cfg and returns the tokens' minter and verifier.
func NewRecipientTokens(cfg RecipientTokensConfig) (*RecipientTokens, error) {
	if cfg.TTL <= 0 || cfg.MaxTTL < cfg.TTL {
		return nil, fmt.Errorf("auth: recipient tokens: ttl %s must be positive and at most max_ttl %s", cfg.TTL, cfg.MaxTTL)
	}
	t := &RecipientTokens{keys: map[string][]RecipientKey{}, ttl: cfg.TTL, maxTTL: cfg.MaxTTL, clock: cfg.Clock}
	if t.clock == nil {
		t.clock = clock.Real{}
	}
	for tenant, keys := range cfg.Keys {
		if tenant == "" || len(keys) == 0 {
			return nil, fmt.Errorf("auth: recipient tokens: tenant %q needs a name and at least one key", tenant)
		}
		seen := map[string]bool{}
		for i, k := range keys {
			switch {
			case k.ID == "" || len(k.ID) > 64 || !catalog.Printable(k.ID):
				return nil, fmt.Errorf("auth: recipient tokens: %s key %d: id must be 1..64 printable characters", tenant, i)
			case seen[k.ID]:
				return nil, fmt.Errorf("auth: recipient tokens: %s key %d: duplicate id %q", tenant, i, k.ID)
			case len(k.Secret) < MinSecretLen:
				return nil, fmt.Errorf("auth: recipient tokens: %s key %q: the secret must be at least %d bytes", tenant, k.ID, MinSecretLen)
			}
			seen[k.ID] = true
			t.keys[tenant] = append(t.keys[tenant], RecipientKey{ID: k.ID, Secret: append([]byte(nil), k.Secret...)})
		}
	}
	t.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(TokenIssuer),
		jwt.WithAudience(TokenAudience),
		jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(func() time.Time { return t.clock.Now() }),
	)
	return t, nil
}

// HasKeys reports whether tenant can have tokens.
func (t *RecipientTokens) HasKeys(tenant string) bool { return t != nil && len(t.keys[tenant]) > 0 }

// TTL is the lifetime of a token minted without one.
func (t *RecipientTokens) TTL() time.Duration { return t.ttl }

// MaxTTL is the longest lifetime a mint may ask for.
func (t *RecipientTokens) MaxTTL() time.Duration { return t.maxTTL }

// tokenClaims are a token's claims.
type tokenClaims struct {
	Tenant string `json:"tnt"`
	jwt.RegisteredClaims
}

// Validate is called by the parser after the registered claims passed.
func (c tokenClaims) Validate() error {
	if c.Tenant == "" || !catalog.Printable(c.Tenant) || c.Subject == "" ||
		len(c.Subject) > catalog.MaxRecipientLen || !catalog.Printable(c.Subject) {
		return errors.New("tnt and sub must be printable ids")
	}
	return nil
}

// Mint returns a token for recipient in tenant, valid for ttl (0: the
// default TTL). ttl under a second or beyond MaxTTL is refused (ErrTTL), as is a tenant without keys
// (ErrNoKeys). exp is whole seconds, so ExpiresAt is now + ttl rounded
// down to the second.
func (t *RecipientTokens) Mint(tenant, recipient string, ttl time.Duration) (MintedToken, error) {
	if !t.HasKeys(tenant) {
		return MintedToken{}, ErrNoKeys
	}
	if ttl == 0 {
		ttl = t.ttl
	}
	if ttl < time.Second || ttl > t.maxTTL {
		return MintedToken{}, fmt.Errorf("%w: %s is not within 1s..%s", ErrTTL, ttl, t.maxTTL)
	}
	if recipient == "" || len(recipient) > catalog.MaxRecipientLen || !catalog.Printable(recipient) {
		return MintedToken{}, fmt.Errorf("auth: recipient must be 1..%d printable characters", catalog.MaxRecipientLen)
	}
	now := t.clock.Now()
	return t.mint(t.keys[tenant][0], tenant, recipient, now, now.Add(ttl))
}

// mint signs a token with key. Verify's fuzz test re-mints what it
// accepted through here.
func (t *RecipientTokens) mint(key RecipientKey, tenant, recipient string, iat, exp time.Time) (MintedToken, error) {
	c := tokenClaims{Tenant: tenant, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: TokenIssuer, Audience: jwt.ClaimStrings{TokenAudience}, Subject: recipient,
		IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(exp),
	}}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = key.ID
	s, err := tok.SignedString(DeriveKey(key.Secret, purposeToken, tenant))
	if err != nil {
		return MintedToken{}, fmt.Errorf("auth: sign recipient token: %w", err)
	}
	if len(s) > maxTokenLen {
		return MintedToken{}, fmt.Errorf("auth: the token would be %d bytes, over %d: tenant or recipient too long", len(s), maxTokenLen)
	}
	return MintedToken{Token: s, ExpiresAt: c.ExpiresAt.Time.UTC()}, nil
}

// Verify checks a token and returns who it speaks for: ErrTokenExpired for
// a genuine token past its exp, ErrTokenInvalid for anything else that
// does not verify.
func (t *RecipientTokens) Verify(token string) (Recipient, error) {
	if t == nil || len(token) > maxTokenLen || !tokenAlphabet(token) {
		return Recipient{}, ErrTokenInvalid
	}
	var c tokenClaims
	_, err := t.parser.ParseWithClaims(token, &c, func(tok *jwt.Token) (any, error) {
		kid, _ := tok.Header["kid"].(string)
		// The tenant's own keys only: a kid another tenant lists is unknown here.
		for _, k := range t.keys[c.Tenant] {
			if k.ID == kid {
				return DeriveKey(k.Secret, purposeToken, c.Tenant), nil
			}
		}
		return nil, errors.New("unknown kid for this tenant")
	})
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		// The parser checks claims only after the signature: an expired
		// token here is a genuine one.
		return Recipient{}, ErrTokenExpired
	case err != nil:
		return Recipient{}, ErrTokenInvalid
	}
	return Recipient{Tenant: c.Tenant, ID: c.Subject, ExpiresAt: c.ExpiresAt.Time.UTC()}, nil
}

// tokenAlphabet reports whether s holds only what a JWT in compact form
// may: base64url and dots. (The base64 decoder would skip \r and \n, so
// the same token could be spelled several ways.)
func tokenAlphabet(s string) bool {
	for i := range len(s) {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// DeriveKey returns the HMAC key for purpose and tenant made from a
// configured secret: HMAC-SHA256(secret, "herald/v1 " + purpose + NUL +
// tenant).
func DeriveKey(secret []byte, purpose, tenant string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("herald/v1 " + purpose + "\x00" + tenant))
	return m.Sum(nil)
}

// MinMACLen is the shortest MAC Check accepts, in bytes.
const MinMACLen = 16

// Sign returns the HMAC-SHA256 of msg under the tenant's signing key (its
// first) derived for purpose, for things herald hands a recipient and must
// recognise later unchanged (the feed's cursors). ok is false for a tenant
// without keys. purpose must not be a token's ("recipient token").
func (t *RecipientTokens) Sign(tenant, purpose string, msg []byte) (mac []byte, ok bool) {
	if !t.HasKeys(tenant) || purpose == purposeToken {
		return nil, false
	}
	m := hmac.New(sha256.New, DeriveKey(t.keys[tenant][0].Secret, purpose, tenant))
	m.Write(msg)
	return m.Sum(nil), true
}

// Check reports whether mac, whole or truncated to at least MinMACLen
// bytes, is msg's MAC for purpose under any of the tenant's keys: a
// cursor signed before a rotation still reads while its key is listed.
func (t *RecipientTokens) Check(tenant, purpose string, msg, mac []byte) bool {
	if !t.HasKeys(tenant) || purpose == purposeToken || len(mac) < MinMACLen || len(mac) > sha256.Size {
		return false
	}
	for _, k := range t.keys[tenant] {
		m := hmac.New(sha256.New, DeriveKey(k.Secret, purpose, tenant))
		m.Write(msg)
		if hmac.Equal(m.Sum(nil)[:len(mac)], mac) {
			return true
		}
	}
	return false
}

type recipientKey struct{}

// WithRecipient returns ctx carrying a verified recipient.
func WithRecipient(ctx context.Context, r Recipient) context.Context {
	return context.WithValue(ctx, recipientKey{}, r)
}

// RecipientFrom returns the recipient whose token RequireRecipient
// verified for this request; ok is false outside /v1/me/….
func RecipientFrom(ctx context.Context) (r Recipient, ok bool) {
	r, ok = ctx.Value(recipientKey{}).(Recipient)
	return r, ok
}

// bearer returns the credentials of an Authorization header value of the
// Bearer scheme.
func bearer(header string) (string, bool) {
	// The scheme is case-insensitive (RFC 9110 §11.1): "bearer" is "Bearer".
	scheme, cred, ok := strings.Cut(header, " ")
	cred = strings.TrimSpace(cred)
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		return "", false
	}
	return cred, true
}
