package apikeys_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

func init() { apikeys.Iterations = 1000 } // the tests' keys; production's is apikeys.Iterations

func TestKeyShapeAndHash(t *testing.T) {
	t.Parallel()
	id, key, hash, err := apikeys.New()
	if err != nil {
		t.Fatal(err)
	}
	gotID, secret, ok := apikeys.Parse(key)
	if !ok || gotID != id || !strings.HasPrefix(key, "hk_"+id+"_") {
		t.Fatalf("Parse(%q) = %q, %v; want id %q", key, gotID, ok, id)
	}
	if strings.Contains(hash, secret) || !strings.HasPrefix(hash, "pbkdf2-sha256$1000$") {
		t.Fatalf("hash %q: want the KDF's form without the secret", hash)
	}
	if !apikeys.Check(hash, secret) {
		t.Error("Check(hash, secret) = false")
	}
	if apikeys.Check(hash, secret[:len(secret)-1]+"x") {
		t.Error("Check accepts another secret")
	}
	other, _ := apikeys.Hash(secret, 1000)
	if other == hash {
		t.Error("two hashes of one secret are equal: no salt")
	}
	for _, bad := range []string{"", "hk_", "dev-key", "hk_" + id + "-" + secret, key + "x"} {
		if _, _, ok := apikeys.Parse(bad); ok {
			t.Errorf("Parse(%q) ok", bad)
		}
	}
}

// countingStore counts key reads: a cached key is not read again.
type countingStore struct {
	store.Store
	gets atomic.Int64
	// onGet, when set, runs before each key read.
	onGet func()
}

func (c *countingStore) APIKeyGet(ctx context.Context, id string) (store.APIKey, error) {
	c.gets.Add(1)
	if c.onGet != nil {
		c.onGet()
	}
	return c.Store.APIKeyGet(ctx, id)
}

// stuckStore's key reads never answer, until their context ends.
type stuckStore struct{ store.APIKeys }

func (stuckStore) APIKeyGet(ctx context.Context, id string) (store.APIKey, error) {
	<-ctx.Done()
	return store.APIKey{}, ctx.Err()
}

type bundle struct {
	ctx   context.Context
	clk   *clock.Fake
	path  string
	store *countingStore
	v     *apikeys.Verifier
}

func setup(t testing.TB) bundle {
	t.Helper()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	path := testsqlite.Path(t)
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cs := &countingStore{Store: st}
	v := apikeys.NewVerifier(apikeys.Config{Store: cs, Clock: clk, Recheck: time.Second,
		Static: []apikeys.StaticKey{{Key: "dev-key", Tenant: "dev"}, {Key: "ro", Tenant: "dev", Name: "reader", Scopes: []apikeys.Scope{apikeys.ScopeRead}}}})
	return bundle{ctx: context.Background(), clk: clk, path: path, store: cs, v: v}
}

func (b bundle) create(t testing.TB, p apikeys.CreateParams) (store.APIKey, string) {
	t.Helper()
	if p.Tenant == "" {
		p.Tenant = "t1"
	}
	if p.Name == "" {
		p.Name = "crm"
	}
	if p.Scopes == nil {
		p.Scopes = []string{"send"}
	}
	p.Now = b.clk.Now()
	row, key, err := apikeys.Create(b.ctx, b.store, p)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return row, key
}

func TestVerifier(t *testing.T) {
	t.Parallel()
	t.Run("ConfigKeysHaveEveryScopeUnlessListed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p, err := b.v.Verify(b.ctx, "dev-key")
		if err != nil || p.Tenant != "dev" || len(p.Scopes) != 3 || strings.Contains(p.KeyID, "dev-key") {
			t.Fatalf("Verify(dev-key) = %+v, %v; want tenant dev, every scope, an id that is not the key", p, err)
		}
		p, err = b.v.Verify(b.ctx, "ro")
		if err != nil || p.Has(apikeys.ScopeSend) || !p.Has(apikeys.ScopeRead) || p.Name != "reader" {
			t.Fatalf("Verify(ro) = %+v, %v; want read only", p, err)
		}
		if _, err := b.v.Verify(b.ctx, "nope"); !errors.Is(err, apikeys.ErrUnknown) {
			t.Fatalf("Verify(nope) = %v, want ErrUnknown", err)
		}
	})
	t.Run("StoredKeyIsReadOnceThenCached", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		row, key := b.create(t, apikeys.CreateParams{Scopes: []string{"read", "send"}})
		for range 5 {
			p, err := b.v.Verify(b.ctx, key)
			if err != nil || p.KeyID != row.ID || p.Tenant != "t1" || !p.Has(apikeys.ScopeSend) || p.Has(apikeys.ScopeAdmin) {
				t.Fatalf("Verify = %+v, %v", p, err)
			}
		}
		if n := b.store.gets.Load(); n != 1 {
			t.Errorf("the key was read %d times for 5 requests, want once", n)
		}
		id, secret, _ := apikeys.Parse(key)
		wrong := "hk_" + id + "_" + strings.Repeat("A", len(secret))
		if _, err := b.v.Verify(b.ctx, wrong); !errors.Is(err, apikeys.ErrUnknown) {
			t.Errorf("a wrong secret: %v, want ErrUnknown", err)
		}
	})
	t.Run("WrongSecretsThrottleTheirIDNotOthers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, used := b.create(t, apikeys.CreateParams{})
		_, fresh := b.create(t, apikeys.CreateParams{Name: "fresh"})
		if _, err := b.v.Verify(b.ctx, used); err != nil {
			t.Fatal(err)
		}
		id, secret, _ := apikeys.Parse(used)
		guess := func(i int) string { return "hk_" + id + "_" + fmt.Sprintf("%0*d", len(secret), i) }
		for i := range apikeys.MaxFailures {
			if _, err := b.v.Verify(b.ctx, guess(i)); !errors.Is(err, apikeys.ErrUnknown) {
				t.Fatalf("guess %d: %v, want ErrUnknown", i, err)
			}
		}
		runs := b.v.KDFRuns()
		var throttled *apikeys.ThrottledError
		if _, err := b.v.Verify(b.ctx, guess(99)); !errors.As(err, &throttled) || !throttled.Until.Equal(b.clk.Now().Add(apikeys.FailureWindow)) {
			t.Fatalf("guess past the limit: %v, want throttled until %s", err, b.clk.Now().Add(apikeys.FailureWindow))
		}
		if b.v.KDFRuns() != runs {
			t.Fatal("a throttled guess ran the KDF")
		}
		// The key verified before is cached and keeps working; another
		// id's first check runs as ever.
		if _, err := b.v.Verify(b.ctx, used); err != nil {
			t.Fatalf("the cached key while its id is throttled: %v", err)
		}
		if _, err := b.v.Verify(b.ctx, fresh); err != nil {
			t.Fatalf("another key's first check: %v", err)
		}
		b.clk.Advance(apikeys.FailureWindow)
		if _, err := b.v.Verify(b.ctx, guess(100)); !errors.Is(err, apikeys.ErrUnknown) {
			t.Fatalf("a guess once the window ended: %v, want ErrUnknown (checked again)", err)
		}
	})
	t.Run("GuessesQueuedBehindTheLimitRunNoKDF", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, key := b.create(t, apikeys.CreateParams{})
		id, secret, _ := apikeys.Parse(key)
		const n = 60
		errs := make(chan error, n)
		for i := range n {
			go func() {
				_, err := b.v.Verify(b.ctx, "hk_"+id+"_"+fmt.Sprintf("%0*d", len(secret), i))
				errs <- err
			}()
		}
		unknown, throttled := 0, 0
		for range n {
			var te *apikeys.ThrottledError
			switch err := <-errs; {
			case errors.Is(err, apikeys.ErrUnknown):
				unknown++
			case errors.As(err, &te):
				throttled++
			default:
				t.Fatalf("a guess: %v", err)
			}
		}
		if unknown != apikeys.MaxFailures || throttled != n-apikeys.MaxFailures || b.v.KDFRuns() != apikeys.MaxFailures {
			t.Fatalf("%d guesses at once: %d unknown, %d throttled, %d KDF runs; want %d, %d, %d",
				n, unknown, throttled, b.v.KDFRuns(), apikeys.MaxFailures, n-apikeys.MaxFailures, apikeys.MaxFailures)
		}
	})
	t.Run("AChangeRereadsTheRowButRunsNoKDF", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		row, key := b.create(t, apikeys.CreateParams{Scopes: []string{"send"}})
		if _, err := b.v.Verify(b.ctx, key); err != nil {
			t.Fatal(err)
		}
		b.create(t, apikeys.CreateParams{Name: "another"}) // any change ages the cache
		if _, err := b.v.Verify(b.ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.store.APIKeyRevoke(b.ctx, "t1", row.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.v.Verify(b.ctx, key); !errors.Is(err, apikeys.ErrRevoked) {
			t.Fatalf("after the revoke: %v, want ErrRevoked", err)
		}
		if gets, runs := b.store.gets.Load(), b.v.KDFRuns(); gets != 3 || runs != 1 {
			t.Errorf("3 verifications across 2 changes read the row %d times and ran the KDF %d times; want 3 and 1", gets, runs)
		}
	})
	t.Run("AClientThatHangsUpDoesNotFailTheCheckOthersWaitOn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, key := b.create(t, apikeys.CreateParams{})
		ctx, hangUp := context.WithCancel(b.ctx)
		b.store.onGet = hangUp // the first client leaves while its check runs
		if _, err := b.v.Verify(ctx, key); err != nil {
			t.Fatalf("the check whose client left: %v; want it finished (requests that joined it take its answer)", err)
		}
		b.store.onGet = nil
		if _, err := b.v.Verify(b.ctx, key); err != nil || b.store.gets.Load() != 1 {
			t.Fatalf("the next request: %v after %d reads; want the cached answer", err, b.store.gets.Load())
		}
	})
	t.Run("AStoreThatNeverAnswersEndsTheCheckAtItsTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, key := b.create(t, apikeys.CreateParams{})
		v := apikeys.NewVerifier(apikeys.Config{Store: stuckStore{b.store}, Clock: b.clk, StoreTimeout: 20 * time.Millisecond})
		errs := make(chan error, 2)
		for range 2 { // the check and a request that joins it
			go func() { _, err := v.Verify(b.ctx, key); errs <- err }()
		}
		for range 2 {
			select {
			case err := <-errs:
				if err == nil || errors.Is(err, apikeys.ErrUnknown) {
					t.Fatalf("Verify against a store that never answers = %v; want the store's error (503)", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Verify still waits on a store that never answers")
			}
		}
	})
	t.Run("RevokeInThisProcessTakesEffectAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		row, key := b.create(t, apikeys.CreateParams{})
		if _, err := b.v.Verify(b.ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.store.APIKeyRevoke(b.ctx, "t1", row.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.v.Verify(b.ctx, key); !errors.Is(err, apikeys.ErrRevoked) {
			t.Fatalf("Verify after the revoke = %v, want ErrRevoked", err)
		}
	})
	t.Run("RevokeInAnotherProcessTakesEffectWithinRecheck", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		row, key := b.create(t, apikeys.CreateParams{})
		if _, err := b.v.Verify(b.ctx, key); err != nil {
			t.Fatal(err)
		}
		// Another process on the same file: its revoke is not announced
		// to this one.
		other, err := sqlite.Open(b.ctx, b.path, sqlite.Options{Clock: b.clk})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if _, _, err := other.APIKeyRevoke(b.ctx, "t1", row.ID); err != nil {
			t.Fatal(err)
		}
		b.clk.Advance(999 * time.Millisecond)
		if _, err := b.v.Verify(b.ctx, key); err != nil {
			t.Fatalf("within the recheck the cached key still serves: %v", err)
		}
		b.clk.Advance(time.Millisecond)
		if _, err := b.v.Verify(b.ctx, key); !errors.Is(err, apikeys.ErrRevoked) {
			t.Fatalf("Verify once the recheck passed = %v, want ErrRevoked", err)
		}
	})
	t.Run("ExpiredKeyIsRefusedEvenCached", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, key := b.create(t, apikeys.CreateParams{ExpiresAt: b.clk.Now().Add(time.Hour)})
		if _, err := b.v.Verify(b.ctx, key); err != nil {
			t.Fatal(err)
		}
		b.clk.Advance(time.Hour)
		if _, err := b.v.Verify(b.ctx, key); !errors.Is(err, apikeys.ErrExpired) {
			t.Fatalf("Verify at the expiry = %v, want ErrExpired", err)
		}
	})
	t.Run("CreateChecksItsParams", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Each names its field, the problem's param over HTTP.
		for field, p := range map[string]apikeys.CreateParams{
			"name":       {Tenant: "t1", Name: "", Scopes: []string{"send"}},
			"scopes":     {Tenant: "t1", Name: "x", Scopes: []string{"root"}},
			"expires_at": {Tenant: "t1", Name: "x", Scopes: []string{"send"}, ExpiresAt: b.clk.Now()},
			"tenant":     {Tenant: "", Name: "x", Scopes: []string{"send"}},
		} {
			p.Now = b.clk.Now()
			if _, _, err := apikeys.Create(b.ctx, b.store, p); !errors.Is(err, apikeys.ErrInvalid) || apikeys.InvalidField(err) != field {
				t.Errorf("Create(%+v) = %v (field %q), want ErrInvalid naming %s", p, err, apikeys.InvalidField(err), field)
			}
		}
		for _, p := range []apikeys.CreateParams{
			{Tenant: "t1", Name: "x", Scopes: nil},
			{Tenant: "t1", Name: "a\x00b", Scopes: []string{"send"}},
		} {
			p.Now = b.clk.Now()
			if _, _, err := apikeys.Create(b.ctx, b.store, p); !errors.Is(err, apikeys.ErrInvalid) {
				t.Errorf("Create(%+v) = %v, want ErrInvalid", p, err)
			}
		}
	})
}

// TestGuardAnswersThrottledAndBusy: an id throttled after wrong secrets is
// 429 with Retry-After until its window ends; no KDF slot in time is 503
// naming the load, not the store.
func TestGuardAnswersThrottledAndBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := apikeys.NewVerifier(apikeys.Config{Store: b.store, Clock: b.clk, StoreTimeout: 50 * time.Millisecond})
	guard := v.Guard(func(*http.Request) (apikeys.Scope, bool) { return apikeys.ScopeSend, true }, slog.New(slog.DiscardHandler), nil)
	srv := httptest.NewServer(guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })))
	t.Cleanup(srv.Close)
	call := func(key string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := testenv.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	_, key := b.create(t, apikeys.CreateParams{})
	release := v.HoldKDF()
	resp, body := call(key)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(body, "too many API keys are being checked at once") {
		t.Fatalf("a check with no KDF slot: %s %v %s", resp.Status, resp.Header, body)
	}
	release()
	if resp, body := call(key); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the key once a slot is free: %s %s", resp.Status, body)
	}
	id, secret, _ := apikeys.Parse(key)
	for i := range apikeys.MaxFailures {
		if resp, _ := call("hk_" + id + "_" + fmt.Sprintf("%0*d", len(secret), i)); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %s", i, resp.Status)
		}
	}
	b.clk.Advance(15 * time.Second)
	resp, body = call("hk_" + id + "_" + strings.Repeat("x", len(secret)))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "45" ||
		!strings.Contains(body, "wrong secrets within 1m0s: it is checked again in 45 s") {
		t.Fatalf("a guess past the limit: %s %v %s", resp.Status, resp.Header, body)
	}
	if resp, body := call(key); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the verified key while its id is throttled: %s %s", resp.Status, body)
	}
}
