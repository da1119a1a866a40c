package apikeys

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/store"
)

// Errors of Verify. Any other error is the store's (answer 503).
var (
	ErrUnknown = errors.New("apikeys: unknown key")
	ErrRevoked = errors.New("apikeys: key revoked")
	ErrExpired = errors.New("apikeys: key expired")
	// ErrBusy: no KDF slot came free within StoreTimeout (answer 503):
	// too many keys are being checked at once, the store is fine.
	ErrBusy = errors.New("apikeys: too many key checks at once")
)

// ThrottledError: the key's id had MaxFailures wrong secrets presented
// within FailureWindow, so no KDF runs for it until Until (answer 429).
// A key verified before, and so cached, is not affected.
type ThrottledError struct{ Until time.Time }

func (e *ThrottledError) Error() string {
	return "apikeys: too many wrong secrets for this key's id until " + e.Until.UTC().Format(time.RFC3339)
}

// The failed checks a key id may have in a window before its checks stop
// (ThrottledError): enough for a client rolled out with a stale secret to
// see its 401s, few enough that guesses at a known id cannot keep the KDF
// slots from every other tenant's first request.
const (
	MaxFailures   = 5
	FailureWindow = time.Minute
)

// Principal is who a verified key speaks for and what it may do.
type Principal struct {
	// KeyID is the stored key's id, or "config:<8 hex digits of its
	// digest>" for a config key (never the key).
	KeyID  string
	Name   string
	Tenant string
	Scopes []Scope
}

// Has reports whether p holds scope s.
func (p Principal) Has(s Scope) bool { return slices.Contains(p.Scopes, s) }

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// From returns the principal in ctx.
func From(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// StaticKey is a config-file key.
type StaticKey struct {
	Key, Tenant, Name string
	// Scopes defaults to every scope.
	Scopes []Scope
}

// StaticID is the KeyID of a config key: a digest's prefix, not the key.
func StaticID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "config:" + hex.EncodeToString(sum[:4])
}

// DefaultRecheck is how often the verifier reads the store's revision.
const DefaultRecheck = time.Second

// DefaultStoreTimeout bounds one verification's read of the store: it
// runs detached from the request that started it (others wait on its
// answer), so without a bound a store that never answers would hold every
// later request for the key until each hangs up.
const DefaultStoreTimeout = 5 * time.Second

// KDFConcurrency caps the KDF runs in flight in one process.
var KDFConcurrency = max(1, runtime.GOMAXPROCS(0)/2)

// Config builds a Verifier.
type Config struct {
	// Store holds the stored keys; nil accepts config keys only.
	Store store.APIKeys
	// Static are the config-file keys.
	Static []StaticKey
	// Lookup, when set, is asked after Static for a key that is not
	// shaped like a stored one (tests wire auth.Keys through it).
	Lookup func(key string) (Principal, bool)
	// Recheck bounds how stale the cache may be when no change was heard
	// (SQLite across processes; a lost NOTIFY). Defaults to
	// DefaultRecheck.
	Recheck time.Duration
	// StoreTimeout bounds a verification's store read (and its wait for
	// a KDF slot). Defaults to DefaultStoreTimeout.
	StoreTimeout time.Duration
	Clock        clock.Clock
}

// Verifier verifies presented keys, caching each verified one.
type Verifier struct {
	store   store.APIKeys
	static  map[[32]byte]Principal
	lookup  func(key string) (Principal, bool)
	recheck time.Duration
	timeout time.Duration
	clock   clock.Clock
	kdf     chan struct{}
	kdfRuns atomic.Int64

	failMu   sync.Mutex
	failures map[string]failures // by key id; only ids of stored keys

	mu       sync.Mutex
	cache    map[[32]byte]cached
	flights  map[[32]byte]*flight
	gen      uint64    // the generation the cache was filled in
	heard    uint64    // the store's change count when gen was set
	rev      int64     // the revision read last
	polledAt time.Time // zero: poll at the next request
}

// failures are the wrong secrets one key id had in the window from start.
type failures struct {
	start time.Time
	n     int
}

// over reports whether f's window has ended at now (or the clock went
// back past its start).
func (f failures) over(now time.Time) bool {
	return !now.Before(f.start.Add(FailureWindow)) || now.Before(f.start)
}

type cached struct {
	p       Principal
	expires time.Time
	// gen is the generation the entry was last read in; hash is the row's
	// hash the secret matched, so a stale entry is read again without the
	// KDF (the hash of an id never changes).
	gen  uint64
	hash string
}

// NewVerifier returns a verifier of cfg's keys.
func NewVerifier(cfg Config) *Verifier {
	v := &Verifier{store: cfg.Store, static: map[[32]byte]Principal{}, lookup: cfg.Lookup, recheck: cfg.Recheck, timeout: cfg.StoreTimeout, clock: cfg.Clock,
		kdf: make(chan struct{}, KDFConcurrency), cache: map[[32]byte]cached{}, flights: map[[32]byte]*flight{},
		failures: map[string]failures{}}
	if v.recheck <= 0 {
		v.recheck = DefaultRecheck
	}
	if v.timeout <= 0 {
		v.timeout = DefaultStoreTimeout
	}
	if v.clock == nil {
		v.clock = clock.Real{}
	}
	for _, k := range cfg.Static {
		p := Principal{KeyID: StaticID(k.Key), Name: k.Name, Tenant: k.Tenant, Scopes: k.Scopes}
		if p.Name == "" {
			p.Name = "config"
		}
		if len(p.Scopes) == 0 {
			p.Scopes = Scopes
		}
		v.static[sha256.Sum256([]byte(k.Key))] = p
	}
	return v
}

// Verify returns the principal of a presented key.
func (v *Verifier) Verify(ctx context.Context, key string) (Principal, error) {
	digest := sha256.Sum256([]byte(key))
	if p, ok := v.static[digest]; ok {
		return p, nil
	}
	id, secret, ok := Parse(key)
	if !ok && v.lookup != nil {
		if p, ok := v.lookup(key); ok {
			return p, nil
		}
	}
	if !ok || v.store == nil {
		return Principal{}, ErrUnknown
	}
	now := v.clock.Now()
	if err := v.fresh(ctx, now); err != nil {
		return Principal{}, err
	}
	v.mu.Lock()
	c, hit := v.cache[digest]
	gen := v.gen
	if !hit || c.gen != gen {
		// One verification per key at a time: the requests that come
		// while it runs (a client's first burst) wait for its answer
		// instead of each running the KDF.
		if f, ok := v.flights[digest]; ok && f.gen == gen {
			v.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return Principal{}, fmt.Errorf("verify api key: %w", ctx.Err())
			}
			return f.p, f.err
		}
		f := &flight{gen: gen, done: make(chan struct{})}
		v.flights[digest] = f
		v.mu.Unlock()
		var proven string
		if hit {
			proven = c.hash
		}
		// Others may wait on this answer: the client that asked first
		// hanging up must not make it a refusal for them; the timeout
		// is what ends the flight when the store does not answer.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.timeout)
		f.p, f.err = v.verify(fctx, digest, id, secret, proven, now, gen)
		cancel()
		v.mu.Lock()
		if v.flights[digest] == f {
			delete(v.flights, digest)
		}
		v.mu.Unlock()
		close(f.done)
		return f.p, f.err
	}
	v.mu.Unlock()
	if !c.expires.IsZero() && !now.Before(c.expires) {
		return Principal{}, ErrExpired
	}
	return c.p, nil
}

// flight is one verification in progress, for the requests that present
// the same key meanwhile.
type flight struct {
	gen  uint64
	done chan struct{}
	p    Principal
	err  error
}

// verify reads the key's row and checks the secret against its hash (not
// again when it matched proven, the hash a stale entry holds), and caches
// the principal unless a change was heard meanwhile.
func (v *Verifier) verify(ctx context.Context, digest [32]byte, id, secret, proven string, now time.Time, gen uint64) (Principal, error) {
	row, err := v.store.APIKeyGet(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		v.forget(digest)
		return Principal{}, ErrUnknown
	case err != nil:
		return Principal{}, fmt.Errorf("verify api key: %w", err)
	}
	if proven == "" || row.Hash != proven {
		ok, err := v.check(ctx, id, row.Hash, secret)
		if err != nil {
			return Principal{}, err
		}
		if !ok {
			v.forget(digest)
			return Principal{}, ErrUnknown
		}
	}
	switch {
	case !row.RevokedAt.IsZero():
		v.forget(digest)
		return Principal{}, ErrRevoked
	case !row.ExpiresAt.IsZero() && !now.Before(row.ExpiresAt):
		return Principal{}, ErrExpired
	}
	scopes := make([]Scope, len(row.Scopes))
	for i, s := range row.Scopes {
		scopes[i] = Scope(s)
	}
	p := Principal{KeyID: row.ID, Name: row.Name, Tenant: row.Tenant, Scopes: scopes}
	v.mu.Lock()
	// A change heard while the row was read may be this key's revocation:
	// then the entry is not kept (the next request reads the row again).
	if v.gen == gen {
		v.cache[digest] = cached{p: p, expires: row.ExpiresAt, gen: gen, hash: row.Hash}
	}
	v.mu.Unlock()
	return p, nil
}

// forget drops a key's entry.
func (v *Verifier) forget(digest [32]byte) {
	v.mu.Lock()
	delete(v.cache, digest)
	v.mu.Unlock()
}

// check runs the KDF for key id's secret, at most KDFConcurrency at once,
// unless the id is throttled (ThrottledError), asked again once a slot is
// free: the guesses queued behind the one that tripped the limit run no
// KDF. No slot within ctx is ErrBusy.
func (v *Verifier) check(ctx context.Context, id, hash, secret string) (bool, error) {
	if err := v.throttled(id); err != nil {
		return false, err
	}
	select {
	case v.kdf <- struct{}{}:
	case <-ctx.Done():
		return false, fmt.Errorf("verify api key: %w (%w)", ErrBusy, ctx.Err())
	}
	defer func() { <-v.kdf }()
	if err := v.throttled(id); err != nil {
		return false, err
	}
	v.kdfRuns.Add(1)
	if Check(hash, secret) {
		return true, nil
	}
	now := v.clock.Now()
	v.failMu.Lock()
	f := v.failures[id]
	if f.n == 0 || f.over(now) {
		f = failures{start: now}
	}
	f.n++
	v.failures[id] = f
	v.failMu.Unlock()
	return false, nil
}

// throttled returns a ThrottledError while id has MaxFailures failures
// in its window, and forgets a window that has ended.
func (v *Verifier) throttled(id string) error {
	now := v.clock.Now()
	v.failMu.Lock()
	defer v.failMu.Unlock()
	f, ok := v.failures[id]
	if !ok {
		return nil
	}
	if f.over(now) {
		delete(v.failures, id)
		return nil
	}
	if f.n >= MaxFailures {
		return &ThrottledError{Until: f.start.Add(FailureWindow)}
	}
	return nil
}

// KDFRuns is how many KDF runs the verifier made (tests, benchmarks).
func (v *Verifier) KDFRuns() int64 { return v.kdfRuns.Load() }

// fresh ages the cache when a key changed since it was filled: a change
// this process heard of (its own write, a NOTIFY), or a revision read at
// most once per recheck that differs from the last one.
func (v *Verifier) fresh(ctx context.Context, now time.Time) error {
	heard := v.store.APIKeyChanges().Generation()
	v.mu.Lock()
	poll := v.polledAt.IsZero() || now.Sub(v.polledAt) >= v.recheck || now.Before(v.polledAt)
	if poll {
		// Taken by this request; the others go on with the cache.
		v.polledAt = now
	}
	if heard != v.heard {
		v.heard = heard
		v.flush()
	}
	v.mu.Unlock()
	if !poll {
		return nil
	}
	rev, err := v.store.APIKeyRevision(ctx)
	if err != nil {
		v.mu.Lock()
		v.polledAt = time.Time{} // the next request tries again
		v.mu.Unlock()
		return fmt.Errorf("verify api key: %w", err)
	}
	v.mu.Lock()
	if rev != v.rev {
		v.rev = rev
		v.flush()
	}
	v.mu.Unlock()
	return nil
}

// flush makes every entry stale: its next use reads its row again (but
// runs no KDF). v.mu is held.
func (v *Verifier) flush() { v.gen++ }
