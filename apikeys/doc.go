// Package apikeys authenticates a tenant's backend by its API key and says
// what the key may do.
//
// # Keys
//
// A stored key (store.APIKeys) reads hk_<id>_<secret>: id is 16 base32
// characters that name the row, secret 43 base64url characters (256 random
// bits). The key is shown once, when it is created; the row holds only
// Hash(secret): PBKDF2-HMAC-SHA256 (stdlib crypto/pbkdf2) with a 16-byte
// random salt and Iterations rounds, written as
// "pbkdf2-sha256$<rounds>$<salt>$<digest>" so the rounds can be raised
// later without breaking the keys made before. Lookup is by id, so a
// presented key costs at most one KDF run, and only for an id that exists.
//
// A key has a tenant, a name, scopes (send, read, admin: Scope), an
// optional expiry and, once revoked, its revocation time. Keys from the
// config file (api_keys) keep working for development: they are compared
// by their SHA-256 digests, never stored, and have every scope unless the
// config lists some.
//
// # The cache, and how fast a revocation takes effect
//
// Verifying a key is deliberately slow (tens of milliseconds), so a
// process verifies a key once and then remembers it, by the SHA-256 of
// the whole presented key (a fast hash: the cache is in memory only). An
// entry is good while the process's generation has not moved; the
// generation moves when
//
//   - this process creates or revokes a key (at once);
//   - PostgreSQL: any process creates or revokes one: the store's NOTIFY
//     reaches every listener within milliseconds, and a listener that
//     reconnects counts as a change (it may have missed one);
//   - the revision counter the store bumps with every change differs from
//     the one read last. The verifier reads it at most once per Recheck
//     (default 1 s), on the request path. On SQLite, where processes that
//     share a file have no notifications, this is what bounds the delay: a
//     revocation in one process takes effect in the others within Recheck.
//     On PostgreSQL it is the backstop for a lost notification.
//
// A moved generation makes every entry stale: its next use reads its row
// again (one indexed read; scopes, expiry and revocation are taken from
// it) but runs no KDF, since the entry remembers the hash the secret
// matched and a row's hash never changes. Requests that present one key
// while it is being verified wait for that one verification; it outlives
// the request that started it but not StoreTimeout (default 5 s), after
// which it and its waiters answer 503, so a store that never answers
// holds no request for ever. Expiry needs
// no store: a cached entry carries its key's expiry and is refused once it
// has passed.
//
// A wrong secret for an existing id costs a KDF run; at most
// KDFConcurrency of them run at once, so a flood of guesses queues rather
// than taking every core (a check that has no KDF slot within StoreTimeout
// is ErrBusy, 503). A guess is hopeless (256 bits), so this guards only
// the CPU, and the slots: an id that had MaxFailures wrong secrets within
// FailureWindow runs no KDF until the window ends (ThrottledError, 429),
// checked again once a slot is free so the guesses queued behind the
// limit run none either. Without it, anyone who knows one key's id (every
// tenant knows its own, and the audit log shows them) could keep the
// slots busy and every other tenant's first request with a key would wait
// and fail. The throttle is per process and per id; a key already
// verified is cached and never meets it.
package apikeys
