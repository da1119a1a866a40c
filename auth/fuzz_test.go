package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
)

// FuzzRecipientToken holds Verify to two promises on any input: it never
// panics, and only a token minted with a key listed for the token's own
// tenant verifies.
//
// raw, when not empty, is verified as it is: whatever passes must be,
// byte for byte, the token Mint makes from what it says (no other
// spelling of a token verifies, and no token herald did not make).
// Otherwise a token is built from the other inputs as a forger would:
// claims for tenant and recipient, exp ttlSeconds from now, signed with
// alg and a key derived from one of three secrets for signedFor under a
// kid; it must verify exactly when herald's rules say so.
func FuzzRecipientToken(f *testing.F) {
	rt := newTokens(f, clock.NewFake(epoch), fuzzKeys)
	f.Add(mint(f, rt, "a", "user-1"), "", "", uint8(0), uint8(0), int64(0))
	f.Add(mint(f, rt, "b", "user-2"), "", "", uint8(0), uint8(0), int64(0))
	f.Add("", "a", "user-1", uint8(0), uint8(0), int64(3600)) // a, k2 → verifies
	f.Add("", "a", "user-1", uint8(1), uint8(0), int64(3600)) // a, k1 → verifies
	f.Add("", "b", "user-1", uint8(1), uint8(0), int64(3600)) // b, k1 → verifies
	f.Add("", "b", "user-1", uint8(0), uint8(0), int64(3600)) // b, k2 → unknown kid
	f.Add("", "a", "user-1", uint8(2), uint8(0), int64(3600)) // a, k0 → dropped key
	f.Add("", "b", "user-1", uint8(4), uint8(0), int64(3600)) // b's claims, k1 derived for a
	f.Add("", "a", "user-1", uint8(0), uint8(1), int64(3600)) // HS384
	f.Add("", "a", "user-1", uint8(0), uint8(3), int64(3600)) // none
	f.Add("", "a", "user-1", uint8(0), uint8(0), int64(0))    // expired
	f.Add("", "a", "", uint8(0), uint8(0), int64(60))         // no recipient
	f.Add("", "a", "\xff\xfe", uint8(0), uint8(0), int64(60)) // not UTF-8
	f.Add("eyJhbGciOiJub25lIn0.e30.", "", "", uint8(0), uint8(0), int64(0))
	f.Fuzz(func(t *testing.T, raw, tenant, recipient string, signer, alg uint8, ttlSeconds int64) {
		if raw != "" {
			fuzzRaw(t, rt, raw)
			return
		}
		// JSON carries only UTF-8: a claim with other bytes would be
		// another claim once decoded.
		tenant, recipient = strings.ToValidUTF8(tenant, ""), strings.ToValidUTF8(recipient, "")
		// signer%3: a's k2, a's k1 (b's too) or a dropped key k0;
		// signer/3%2: the key derived for the claims' tenant or for a.
		key := []RecipientKey{fuzzKeys["a"][0], fuzzKeys["a"][1], {ID: "k0", Secret: secret3}}[signer%3]
		signedFor := []string{tenant, "a"}[signer/3%2]
		methods := []jwt.SigningMethod{jwt.SigningMethodHS256, jwt.SigningMethodHS384, jwt.SigningMethodHS512, jwt.SigningMethodNone}
		method := methods[alg%4]
		ttl := time.Duration(ttlSeconds%(48*3600)) * time.Second
		c := claimsFor(tenant, recipient)
		c.ExpiresAt = jwt.NewNumericDate(epoch.Add(ttl))
		var signKey any = DeriveKey(key.Secret, purposeToken, signedFor)
		if method == jwt.SigningMethodNone {
			signKey = jwt.UnsafeAllowNoneSignatureType
		}
		tok := jwt.NewWithClaims(method, c)
		tok.Header["kid"] = key.ID
		s, err := tok.SignedString(signKey)
		if err != nil {
			t.Fatal(err)
		}

		listed := false
		for _, k := range fuzzKeys[tenant] {
			listed = listed || k.ID == key.ID && string(k.Secret) == string(key.Secret)
		}
		signed := method == jwt.SigningMethodHS256 && listed && signedFor == tenant
		valid := recipient != "" && len(recipient) <= catalog.MaxRecipientLen && catalog.Printable(recipient)
		got, err := rt.Verify(s)
		switch {
		case len(s) > maxTokenLen:
			// Bounded before anything is parsed: no token herald mints
			// comes near it (a recipient is at most MaxRecipientLen), so
			// a longer one is refused unread, expired or not.
			if !errors.Is(err, ErrTokenInvalid) {
				t.Fatalf("a token of %d bytes (over %d): Verify = %+v, %v; want ErrTokenInvalid", len(s), maxTokenLen, got, err)
			}
		case signed && valid && ttl > 0:
			if err != nil || got.Tenant != tenant || got.ID != recipient {
				t.Fatalf("a genuine token: Verify = %+v, %v", got, err)
			}
		case signed && ttl <= 0:
			// The claims are checked only once the signature holds, exp
			// among the first.
			if !errors.Is(err, ErrTokenExpired) {
				t.Fatalf("a genuine token past exp: Verify = %+v, %v; want ErrTokenExpired", got, err)
			}
		case !errors.Is(err, ErrTokenInvalid):
			t.Fatalf("a forged token (alg %s, kid %s, signed for %q, tenant %q, recipient %q): Verify = %+v, %v",
				method.Alg(), key.ID, signedFor, tenant, recipient, got, err)
		}
	})
}

var fuzzKeys = map[string][]RecipientKey{
	"a": {{ID: "k2", Secret: secret2}, {ID: "k1", Secret: secret1}},
	// b lists the same id and secret as a's k1.
	"b": {{ID: "k1", Secret: secret1}},
}

// fuzzRaw verifies raw and, if it passes, requires it to be the token Mint
// writes for what it says.
func fuzzRaw(t *testing.T, rt *RecipientTokens, raw string) {
	got, err := rt.Verify(raw)
	if err != nil {
		if !errors.Is(err, ErrTokenInvalid) && !errors.Is(err, ErrTokenExpired) {
			t.Fatalf("Verify(%q): unexpected error %v", raw, err)
		}
		return
	}
	var c tokenClaims
	tok, _, err := jwt.NewParser().ParseUnverified(raw, &c)
	if err != nil {
		t.Fatalf("verified %q, which does not parse: %v", raw, err)
	}
	kid, _ := tok.Header["kid"].(string)
	for _, k := range fuzzKeys[got.Tenant] {
		if k.ID != kid {
			continue
		}
		again, err := rt.mint(k, got.Tenant, got.ID, c.IssuedAt.Time, got.ExpiresAt)
		if err != nil || again.Token != raw {
			t.Fatalf("verified %q; herald mints %q (%v) from what it says", raw, again.Token, err)
		}
		return
	}
	t.Fatalf("verified %q, whose kid %q %s does not list", raw, kid, got.Tenant)
}
