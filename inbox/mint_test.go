package inbox_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/inbox"
)

func TestMint(t *testing.T) {
	t.Parallel()
	t.Run("DefaultIsAnHourAndTheTokenReadsThatRecipient", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for _, body := range []any{nil, "{}", `{"ttl_seconds":0}`} {
			res := b.do(t, http.MethodPost, "/v1/recipients/user-1/tokens", keyA, body)
			var m inbox.Minted
			res.decode(t, http.StatusCreated, &m)
			if !m.ExpiresAt.Equal(epoch.Add(time.Hour)) {
				t.Fatalf("body %v: expires_at %s, want %s", body, m.ExpiresAt, epoch.Add(time.Hour))
			}
			if cc := res.header.Get("Cache-Control"); cc != "no-store" {
				t.Fatalf("Cache-Control %q", cc)
			}
			rc, err := b.tokens.Verify(m.Token)
			if err != nil || rc.Tenant != "a" || rc.ID != "user-1" {
				t.Fatalf("the minted token verifies as %+v, %v", rc, err)
			}
		}
	})
	t.Run("TTLUpToTheMax", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for _, c := range []struct {
			body string
			ttl  time.Duration
		}{{`{"ttl_seconds":1}`, time.Second}, {`{"ttl_seconds":600}`, 10 * time.Minute}, {`{"ttl_seconds":86400}`, 24 * time.Hour}} {
			var m inbox.Minted
			b.do(t, http.MethodPost, "/v1/recipients/user-1/tokens", keyA, c.body).decode(t, http.StatusCreated, &m)
			if !m.ExpiresAt.Equal(epoch.Add(c.ttl)) {
				t.Fatalf("%s: expires_at %s, want %s", c.body, m.ExpiresAt, epoch.Add(c.ttl))
			}
		}
	})
	t.Run("TTLOutOfRangeIs422", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for _, body := range []string{`{"ttl_seconds":86401}`, `{"ttl_seconds":-1}`, `{"ttl_seconds":9223372036854775807}`} {
			if p := wantProblem(t, b.do(t, http.MethodPost, "/v1/recipients/user-1/tokens", keyA, body), http.StatusUnprocessableEntity); p.Param != "ttl_seconds" {
				t.Fatalf("%s: param %q", body, p.Param)
			}
		}
	})
	t.Run("ABodyThatIsNotATTLIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for _, body := range []string{`{"ttl":60}`, `{"ttl_seconds":"60"}`, `{"ttl_seconds":1.5}`, `not json`, `{} {}`} {
			wantProblem(t, b.do(t, http.MethodPost, "/v1/recipients/user-1/tokens", keyA, body), http.StatusBadRequest)
		}
	})
	t.Run("ARecipientThatIsNotAnIDIs422", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for _, r := range []string{"a%01b", strings.Repeat("r", 201)} {
			if p := wantProblem(t, b.do(t, http.MethodPost, "/v1/recipients/"+r+"/tokens", keyA, nil), http.StatusUnprocessableEntity); p.Param != "recipient" {
				t.Fatalf("%q: param %q", r, p.Param)
			}
		}
	})
	t.Run("ATenantWithoutKeysIs409", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		if p := wantProblem(t, b.do(t, http.MethodPost, "/v1/recipients/user-1/tokens", keyC, nil), http.StatusConflict); p.Detail != inbox.DetailNoKeys {
			t.Fatalf("detail %q", p.Detail)
		}
	})
	t.Run("OnlyAnAPIKeyMints", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		tok := b.mint(t, keyA, "user-1")
		for _, cred := range []string{"", tok, "key-x"} {
			wantProblem(t, b.do(t, http.MethodPost, "/v1/recipients/user-1/tokens", cred, nil), http.StatusUnauthorized)
		}
	})
	t.Run("TokensAreNotStoredAndEachMintIsItsOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		first := b.mint(t, keyA, "user-1")
		b.clock.Advance(time.Second)
		second := b.mint(t, keyA, "user-1")
		if first == second {
			t.Fatal("two mints a second apart gave the same token")
		}
		for _, tok := range []string{first, second} {
			if b.badge(t, tok) != 0 {
				t.Fatal("a new recipient has unread items")
			}
		}
	})
}

// Which credential where: /v1/me takes a verified recipient token only,
// everything else an API key only (DESIGN §8).
func TestCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ids := b.notify(t, keyA, "user-1", 1)
	tok := b.mint(t, keyA, "user-1")
	meRoutes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/me/feed", ""}, {http.MethodGet, "/v1/me/badge", ""},
		{http.MethodPost, "/v1/me/read", `{"all":true}`}, {http.MethodPost, "/v1/me/items/" + itemID(ids[0]) + "/archive", ""},
		{http.MethodPost, "/v1/me/receipts", `{"message_id":"x"}`},
	}
	// refused wants 401 with a Bearer challenge on every /v1/me route,
	// and the item untouched.
	refused := func(t *testing.T, cred, wantDetail string) {
		t.Helper()
		for _, r := range meRoutes {
			res := b.do(t, r.method, r.path, cred, r.body)
			p := wantProblem(t, res, http.StatusUnauthorized)
			if !strings.Contains(p.Detail, wantDetail) || !strings.HasPrefix(res.header.Get("WWW-Authenticate"), "Bearer ") {
				t.Fatalf("%s %s: detail %q (want it to say %q), challenge %q", r.method, r.path, p.Detail, wantDetail, res.header.Get("WWW-Authenticate"))
			}
		}
		if n := b.badge(t, tok); n != 1 {
			t.Fatalf("a refused request changed the badge to %d", n)
		}
	}
	t.Run("NoCredentials", func(t *testing.T) { refused(t, "", "a recipient token is required") })
	t.Run("AnAPIKeyOnMe", func(t *testing.T) { refused(t, keyA, "an API key is not accepted") })
	t.Run("Forged", func(t *testing.T) {
		// The signature's first character changed, and the claims changed
		// under the same signature.
		parts := strings.Split(tok, ".")
		sig := []byte(parts[2])
		sig[0] = map[bool]byte{true: 'B', false: 'A'}[sig[0] == 'A']
		refused(t, parts[0]+"."+parts[1]+"."+string(sig), "not valid")
		other := strings.Split(b.mint(t, keyA, "user-2"), ".")
		refused(t, parts[0]+"."+other[1]+"."+parts[2], "not valid")
	})
	t.Run("AnotherHeraldsKey", func(t *testing.T) {
		// A token for tenant a and key id k1 that another secret signed.
		forger, err := auth.NewRecipientTokens(auth.RecipientTokensConfig{
			Keys: map[string][]auth.RecipientKey{"a": {{ID: "k1", Secret: secret2}}}, TTL: time.Hour, MaxTTL: time.Hour, Clock: b.clock})
		if err != nil {
			t.Fatal(err)
		}
		m, err := forger.Mint("a", "user-1", 0)
		if err != nil {
			t.Fatal(err)
		}
		refused(t, m.Token, "not valid")
	})
	t.Run("Expired", func(t *testing.T) {
		var m inbox.Minted
		b.do(t, http.MethodPost, "/v1/recipients/user-1/tokens", keyA, `{"ttl_seconds":60}`).decode(t, http.StatusCreated, &m)
		if b.badge(t, m.Token) != 1 {
			t.Fatal("a fresh short token reads no badge")
		}
		b.clock.Advance(61 * time.Second)
		refused(t, m.Token, "expired")
	})
	t.Run("ARecipientTokenElsewhere", func(t *testing.T) {
		fresh := b.mint(t, keyA, "user-1")
		for _, r := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/notifications", ""}, {http.MethodGet, "/v1/notifications/" + ids[0], ""},
			{http.MethodPost, "/v1/notifications", `{}`}, {http.MethodPost, "/v1/notifications/" + ids[0] + "/cancel", ""},
			{http.MethodGet, "/v1/recipients/user-1/profile", ""}, {http.MethodPost, "/v1/recipients/user-1/tokens", ""},
			{http.MethodGet, "/v1/kinds", ""}, {http.MethodGet, "/v1/ops/reconcile", ""},
			{http.MethodPut, "/v1/recipients/user-1/devices/tok", `{"platform":"fcm"}`}, {http.MethodGet, "/v1/recipients/user-1/devices", ""},
		} {
			wantProblem(t, b.do(t, r.method, r.path, fresh, r.body), http.StatusUnauthorized)
		}
		// Its own route still takes it.
		if b.badge(t, fresh) != 1 {
			t.Fatal("the fresh token reads no badge")
		}
	})
}

// A tenant's token reads only its own tenant's recipient, even one with
// the same id in another tenant, and keys derived per tenant keep a's
// token from verifying as b's although both list the same secret.
func TestTenantsAreApart(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	aIDs := b.notify(t, keyA, "user-1", 2)
	bIDs := b.notify(t, keyB, "user-1", 1)
	ta, tb := b.mint(t, keyA, "user-1"), b.mint(t, keyB, "user-1")
	if got := pageIDs(b.feed(t, ta, "")); !equal(got, itemIDs(aIDs)) {
		t.Fatalf("a's feed %v, want %v", got, itemIDs(aIDs))
	}
	if got := pageIDs(b.feed(t, tb, "")); !equal(got, itemIDs(bIDs)) {
		t.Fatalf("b's feed %v, want %v", got, itemIDs(bIDs))
	}
	// b's recipient cannot archive a's item of the same recipient id.
	wantProblem(t, b.do(t, http.MethodPost, "/v1/me/items/"+itemID(aIDs[0])+"/archive", tb, nil), http.StatusNotFound)
	if b.badge(t, ta) != 2 {
		t.Fatal("b's archive touched a's item")
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
