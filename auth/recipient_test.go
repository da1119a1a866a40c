package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
)

var (
	epoch   = time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC)
	secret1 = bytes.Repeat([]byte{1}, 32)
	secret2 = bytes.Repeat([]byte{2}, 32)
	secret3 = bytes.Repeat([]byte{3}, 32)
)

// newTokens returns tokens over keys (tenant → keys) on a fake clock at epoch.
func newTokens(t testing.TB, clk clock.Clock, keys map[string][]RecipientKey) *RecipientTokens {
	t.Helper()
	rt, err := NewRecipientTokens(RecipientTokensConfig{Keys: keys, TTL: time.Hour, MaxTTL: 24 * time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func mint(t testing.TB, rt *RecipientTokens, tenant, recipient string) string {
	t.Helper()
	m, err := rt.Mint(tenant, recipient, 0)
	if err != nil {
		t.Fatalf("mint %s/%s: %v", tenant, recipient, err)
	}
	return m.Token
}

// craft signs claims with method and key under a header with kid, the way
// a forger would.
func craft(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimsFor are the claims herald would write for tenant/recipient at epoch.
func claimsFor(tenant, recipient string) tokenClaims {
	return tokenClaims{Tenant: tenant, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: TokenIssuer, Audience: jwt.ClaimStrings{TokenAudience}, Subject: recipient,
		IssuedAt: jwt.NewNumericDate(epoch), ExpiresAt: jwt.NewNumericDate(epoch.Add(time.Hour)),
	}}
}

func TestMintThenVerify(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch.Add(123 * time.Millisecond))
	rt := newTokens(t, clk, map[string][]RecipientKey{"acme": {{ID: "k1", Secret: secret1}}})
	m, err := rt.Mint("acme", "user-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := epoch.Add(time.Hour); !m.ExpiresAt.Equal(want) {
		t.Errorf("default ttl: expires at %s, want %s (1h, whole seconds)", m.ExpiresAt, want)
	}
	got, err := rt.Verify(m.Token)
	if err != nil || got.Tenant != "acme" || got.ID != "user-1" || !got.ExpiresAt.Equal(m.ExpiresAt) {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	// The header names the key; the secret appears nowhere.
	head, _, _ := strings.Cut(m.Token, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(head)
	if !strings.Contains(string(raw), `"kid":"k1"`) || !strings.Contains(string(raw), `"alg":"HS256"`) {
		t.Errorf("header %s", raw)
	}

	clk.Advance(time.Hour - 124*time.Millisecond)
	if _, err := rt.Verify(m.Token); err != nil {
		t.Errorf("a second before exp: %v", err)
	}
	clk.Advance(time.Second)
	if _, err := rt.Verify(m.Token); !errors.Is(err, ErrTokenExpired) {
		t.Errorf("at exp: %v, want ErrTokenExpired", err)
	}
}

func TestMintTTL(t *testing.T) {
	t.Parallel()
	rt := newTokens(t, clock.NewFake(epoch), map[string][]RecipientKey{"acme": {{ID: "k1", Secret: secret1}}})
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		ok   bool
	}{
		{"ThirtyMinutes", 30 * time.Minute, true},
		{"Max", 24 * time.Hour, true},
		{"OverMax", 24*time.Hour + time.Second, false},
		{"UnderASecond", 500 * time.Millisecond, false},
		{"Negative", -time.Minute, false},
	} {
		m, err := rt.Mint("acme", "user-1", tc.ttl)
		switch {
		case tc.ok && (err != nil || !m.ExpiresAt.Equal(epoch.Add(tc.ttl))):
			t.Errorf("%s: %+v, %v", tc.name, m, err)
		case !tc.ok && !errors.Is(err, ErrTTL):
			t.Errorf("%s: %v, want ErrTTL", tc.name, err)
		}
	}
	if _, err := rt.Mint("other", "user-1", 0); !errors.Is(err, ErrNoKeys) {
		t.Errorf("tenant without keys: %v, want ErrNoKeys", err)
	}
	for _, r := range []string{"", "a\nb", strings.Repeat("r", 201)} {
		if _, err := rt.Mint("acme", r, 0); err == nil {
			t.Errorf("recipient %q minted", r)
		}
	}
}

func TestRotationKeepsOldTokensWhileTheKeyIsListed(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	before := newTokens(t, clk, map[string][]RecipientKey{"acme": {{ID: "k1", Secret: secret1}}})
	old := mint(t, before, "acme", "user-1")

	// The rotation: k2 first (it signs from now on), k1 kept after it.
	during := newTokens(t, clk, map[string][]RecipientKey{"acme": {{ID: "k2", Secret: secret2}, {ID: "k1", Secret: secret1}}})
	if _, err := during.Verify(old); err != nil {
		t.Fatalf("a k1 token while k1 is listed: %v", err)
	}
	fresh := mint(t, during, "acme", "user-1")
	if !strings.Contains(header(t, fresh), `"kid":"k2"`) {
		t.Errorf("the first key signs: header %s", header(t, fresh))
	}
	if _, err := before.Verify(fresh); err == nil {
		t.Error("a k2 token verified where only k1 is listed")
	}

	after := newTokens(t, clk, map[string][]RecipientKey{"acme": {{ID: "k2", Secret: secret2}}})
	if _, err := after.Verify(old); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("a k1 token once k1 is dropped: %v, want ErrTokenInvalid", err)
	}
	if _, err := after.Verify(fresh); err != nil {
		t.Errorf("a k2 token after the rotation: %v", err)
	}
}

func header(t testing.TB, tok string) string {
	t.Helper()
	head, _, _ := strings.Cut(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// Two tenants configured with the same key id and secret: a token of one
// never speaks for the other.
func TestTokenIsBoundToItsTenant(t *testing.T) {
	t.Parallel()
	rt := newTokens(t, clock.NewFake(epoch), map[string][]RecipientKey{
		"a": {{ID: "k1", Secret: secret1}},
		"b": {{ID: "k1", Secret: secret1}},
		"c": {{ID: "kc", Secret: secret3}},
	})
	tokA := mint(t, rt, "a", "user-1")
	if got, err := rt.Verify(tokA); err != nil || got.Tenant != "a" {
		t.Fatalf("Verify(a's token) = %+v, %v", got, err)
	}

	// a's token with its tnt claim changed to b, signature kept.
	parts := strings.Split(tokA, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	parts[1] = base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte(`"tnt":"a"`), []byte(`"tnt":"b"`), 1))
	if _, err := rt.Verify(strings.Join(parts, ".")); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("tnt rewritten to b: %v", err)
	}

	// Claims for b signed with a's derived key (what a's token carries).
	if _, err := rt.Verify(craft(t, jwt.SigningMethodHS256, DeriveKey(secret1, purposeToken, "a"), "k1", claimsFor("b", "user-1"))); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("b's claims under a's key: %v", err)
	}
	// Claims for b signed with the raw shared secret (not herald's derived key).
	if _, err := rt.Verify(craft(t, jwt.SigningMethodHS256, secret1, "k1", claimsFor("b", "user-1"))); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("signed with the configured secret itself: %v", err)
	}
	// A kid that only another tenant lists, with that tenant's key.
	if _, err := rt.Verify(craft(t, jwt.SigningMethodHS256, DeriveKey(secret3, purposeToken, "a"), "kc", claimsFor("a", "user-1"))); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("kid of tenant c on a token of a: %v", err)
	}
	// The control: herald's own construction verifies.
	if got, err := rt.Verify(craft(t, jwt.SigningMethodHS256, DeriveKey(secret1, purposeToken, "b"), "k1", claimsFor("b", "user-1"))); err != nil || got.Tenant != "b" {
		t.Errorf("b's token built as herald builds it: %+v, %v", got, err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	rt := newTokens(t, clock.NewFake(epoch), map[string][]RecipientKey{"acme": {{ID: "k1", Secret: secret1}}})
	key := DeriveKey(secret1, purposeToken, "acme")
	good := claimsFor("acme", "user-1")
	with := func(edit func(*tokenClaims)) tokenClaims {
		c := claimsFor("acme", "user-1")
		edit(&c)
		return c
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	none := craft(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "k1", good)
	valid := craft(t, jwt.SigningMethodHS256, key, "k1", good)
	for name, tok := range map[string]string{
		"AlgNone":          none,
		"AlgNoneWithSig":   none + strings.Split(valid, ".")[2],
		"HS512":            craft(t, jwt.SigningMethodHS512, key, "k1", good),
		"HS384":            craft(t, jwt.SigningMethodHS384, key, "k1", good),
		"RS256":            craft(t, jwt.SigningMethodRS256, rsaKey, "k1", good),
		"NoKid":            craft(t, jwt.SigningMethodHS256, key, "", good),
		"UnknownKid":       craft(t, jwt.SigningMethodHS256, key, "k9", good),
		"OtherSecret":      craft(t, jwt.SigningMethodHS256, DeriveKey(secret2, purposeToken, "acme"), "k1", good),
		"CursorKey":        craft(t, jwt.SigningMethodHS256, DeriveKey(secret1, "feed cursor", "acme"), "k1", good),
		"NoExp":            craft(t, jwt.SigningMethodHS256, key, "k1", with(func(c *tokenClaims) { c.ExpiresAt = nil })),
		"Expired":          craft(t, jwt.SigningMethodHS256, key, "k1", with(func(c *tokenClaims) { c.ExpiresAt = jwt.NewNumericDate(epoch) })),
		"OtherIssuer":      craft(t, jwt.SigningMethodHS256, key, "k1", with(func(c *tokenClaims) { c.Issuer = "evil" })),
		"NoIssuer":         craft(t, jwt.SigningMethodHS256, key, "k1", with(func(c *tokenClaims) { c.Issuer = "" })),
		"OtherAudience":    craft(t, jwt.SigningMethodHS256, key, "k1", with(func(c *tokenClaims) { c.Audience = jwt.ClaimStrings{"herald-api"} })),
		"NoSubject":        craft(t, jwt.SigningMethodHS256, key, "k1", with(func(c *tokenClaims) { c.Subject = "" })),
		"SubjectControl":   craft(t, jwt.SigningMethodHS256, key, "k1", with(func(c *tokenClaims) { c.Subject = "a\x00b" })),
		"NoTenant":         craft(t, jwt.SigningMethodHS256, DeriveKey(secret1, purposeToken, ""), "k1", with(func(c *tokenClaims) { c.Tenant = "" })),
		"TrailingNewline":  valid + "\n",
		"NewlineInside":    valid[:10] + "\n" + valid[10:],
		"Padded":           valid + "=",
		"FourParts":        valid + ".x",
		"Empty":            "",
		"NotAJWT":          "dev-key",
		"Huge":             valid + strings.Repeat("A", maxTokenLen),
		"SignatureFlipped": valid[:len(valid)-2] + flip(valid[len(valid)-2]) + valid[len(valid)-1:],
	} {
		got, err := rt.Verify(tok)
		want := ErrTokenInvalid
		if name == "Expired" {
			want = ErrTokenExpired
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: Verify = %+v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := rt.Verify(valid); err != nil {
		t.Errorf("the control token: %v", err)
	}
	var nilTokens *RecipientTokens
	if _, err := nilTokens.Verify(valid); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("nil tokens: %v", err)
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

func TestSignAndCheck(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	const purpose = "feed cursor"
	msg := []byte("position 42")
	v1 := newTokens(t, clk, map[string][]RecipientKey{"a": {{ID: "k1", Secret: secret1}}, "b": {{ID: "k1", Secret: secret1}}})
	mac, ok := v1.Sign("a", purpose, msg)
	if !ok || len(mac) != 32 {
		t.Fatalf("Sign = %x, %v", mac, ok)
	}
	if !v1.Check("a", purpose, msg, mac[:MinMACLen]) || !v1.Check("a", purpose, msg, mac) {
		t.Error("its own MAC, whole or truncated, does not check")
	}
	for name, ok := range map[string]bool{
		"OtherTenantSameSecret": v1.Check("b", purpose, msg, mac[:16]),
		"OtherPurpose":          v1.Check("a", "other", msg, mac[:16]),
		"TokenPurpose":          v1.Check("a", purposeToken, msg, mac[:16]),
		"OtherMessage":          v1.Check("a", purpose, []byte("position 43"), mac[:16]),
		"TooShort":              v1.Check("a", purpose, msg, mac[:MinMACLen-1]),
		"NoKeys":                v1.Check("z", purpose, msg, mac[:16]),
	} {
		if ok {
			t.Errorf("%s: checked", name)
		}
	}
	if _, ok := v1.Sign("a", purposeToken, msg); ok {
		t.Error("Sign made a MAC with the tokens' key")
	}
	rotated := newTokens(t, clk, map[string][]RecipientKey{"a": {{ID: "k2", Secret: secret2}, {ID: "k1", Secret: secret1}}})
	if !rotated.Check("a", purpose, msg, mac[:16]) {
		t.Error("a MAC of k1 does not check while k1 is listed second")
	}
	if again, _ := rotated.Sign("a", purpose, msg); bytes.Equal(again, mac) {
		t.Error("after the rotation the old key still signs")
	}
	dropped := newTokens(t, clk, map[string][]RecipientKey{"a": {{ID: "k2", Secret: secret2}}})
	if dropped.Check("a", purpose, msg, mac[:16]) {
		t.Error("a MAC of k1 checks once k1 is dropped")
	}
}

func TestNewRecipientTokensRefuses(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]RecipientTokensConfig{
		"ShortSecret": {TTL: time.Hour, MaxTTL: time.Hour, Keys: map[string][]RecipientKey{"a": {{ID: "k", Secret: secret1[:31]}}}},
		"DuplicateID": {TTL: time.Hour, MaxTTL: time.Hour, Keys: map[string][]RecipientKey{"a": {{ID: "k", Secret: secret1}, {ID: "k", Secret: secret2}}}},
		"NoID":        {TTL: time.Hour, MaxTTL: time.Hour, Keys: map[string][]RecipientKey{"a": {{Secret: secret1}}}},
		"NoKeys":      {TTL: time.Hour, MaxTTL: time.Hour, Keys: map[string][]RecipientKey{"a": nil}},
		"NoTenant":    {TTL: time.Hour, MaxTTL: time.Hour, Keys: map[string][]RecipientKey{"": {{ID: "k", Secret: secret1}}}},
		"TTLOverMax":  {TTL: 2 * time.Hour, MaxTTL: time.Hour},
		"NoTTL":       {MaxTTL: time.Hour},
	} {
		if _, err := NewRecipientTokens(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestMintedTokensVerifyAtTheLimits: the longest tenant and recipient
// herald takes, in characters JSON escapes six-fold, still make a token
// Verify reads (it bounds its input before parsing); a longer tenant is
// refused at Mint, not minted into a token nobody can use.
func TestMintedTokensVerifyAtTheLimits(t *testing.T) {
	long := strings.Repeat("<", 200)
	tooLong := strings.Repeat("\u2028", 400)
	keys := map[string][]RecipientKey{long: {{ID: "k1", Secret: secret1}}, tooLong: {{ID: "k1", Secret: secret1}}}
	rt := newTokens(t, clock.NewFake(epoch), keys)
	m, err := rt.Mint(long, strings.Repeat("\u2028", catalog.MaxRecipientLen/3), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rt.Verify(m.Token); err != nil || got.Tenant != long {
		t.Fatalf("a %d-byte token: Verify = %+v, %v", len(m.Token), got, err)
	}
	if _, err := rt.Mint(tooLong, long, 0); err == nil {
		t.Fatal("minted a token over maxTokenLen")
	}
}
