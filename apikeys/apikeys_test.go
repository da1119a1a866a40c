package apikeys_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/clock"
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
	path := filepath.Join(t.TempDir(), "herald.db")
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
		for _, p := range []apikeys.CreateParams{
			{Tenant: "t1", Name: "", Scopes: []string{"send"}},
			{Tenant: "t1", Name: "x", Scopes: nil},
			{Tenant: "t1", Name: "x", Scopes: []string{"root"}},
			{Tenant: "t1", Name: "x", Scopes: []string{"send"}, ExpiresAt: b.clk.Now()},
			{Tenant: "t1", Name: "a\x00b", Scopes: []string{"send"}},
		} {
			p.Now = b.clk.Now()
			if _, _, err := apikeys.Create(b.ctx, b.store, p); !errors.Is(err, apikeys.ErrInvalid) {
				t.Errorf("Create(%+v) = %v, want ErrInvalid", p, err)
			}
		}
	})
}
