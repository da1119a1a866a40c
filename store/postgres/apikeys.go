package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/store"
)

// API keys (store.APIKeys) and the audit log (store.Audit). A key's create
// and revoke bump api_key_revision and NOTIFY the keys' channel (keyChannel)
// in one transaction; the listener (listen.go) hears it in every process
// on the database and bumps that process's APIKeyChanges, which makes
// package apikeys drop its cache at once. A listener that reconnects bumps
// it too (it may have missed some), and the revision counter is the
// backstop apikeys reads at most once a recheck interval.
const (
	qAPIKeyCols = `id, tenant, name, scopes, hash, created_by, created_at, expires_at, revoked_at`
	// $1 now, $2 id, $3 tenant, $4 name, $5 scopes, $6 hash, $7 created by, $8 expires.
	qAPIKeyInsert = `INSERT INTO api_keys (` + qAPIKeyCols + `)
VALUES ($2::text, $3::text, $4::text, $5::text[], $6::text, $7::text, coalesce($1::timestamptz, now()), $8::timestamptz, NULL)
RETURNING created_at`
	// $1 channel, $2 payload.
	qAPIKeyBump = `WITH b AS (UPDATE api_key_revision SET revision = revision + 1 WHERE id = 1 RETURNING revision)
SELECT pg_notify($1::text, $2::text) FROM b`
	qAPIKeyGet = `SELECT ` + qAPIKeyCols + ` FROM api_keys WHERE id = $1::text`
	// $1 tenant ('' every tenant).
	qAPIKeyList = `SELECT ` + qAPIKeyCols + ` FROM api_keys WHERE $1::text = '' OR tenant = $1::text ORDER BY created_at, id`
	// $1 now, $2 tenant ('' any), $3 id.
	qAPIKeyRevoke = `UPDATE api_keys SET revoked_at = coalesce($1::timestamptz, now())
WHERE id = $3::text AND ($2::text = '' OR tenant = $2::text) AND revoked_at IS NULL`
	qAPIKeyRevision = `SELECT revision FROM api_key_revision WHERE id = 1`

	// $1 now, then the entry.
	qAuditInsert = `INSERT INTO audit_log (at, tenant, actor_key, actor_name, action, target, remote, detail)
VALUES (coalesce($1::timestamptz, now()), $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text)
RETURNING id, at`
	// $1 tenant ('' every tenant), $2 before id, $3 limit.
	qAuditList = `SELECT id, at, tenant, actor_key, actor_name, action, target, remote, detail FROM audit_log
WHERE ($1::text = '' OR tenant = $1::text) AND id < $2::bigint ORDER BY id DESC LIMIT $3::integer`
)

// keyChannel names the NOTIFY channel of API key changes in one database
// and schema, as inboxChannel does for the inbox.
func keyChannel(db, schema string) string {
	sum := md5.Sum([]byte(db + "." + schema))
	return "herald_keys_" + hex.EncodeToString(sum[:])[:8]
}

// APIKeyCreate stores k.
func (s *Store) APIKeyCreate(ctx context.Context, k store.APIKey) (store.APIKey, error) {
	var expires *time.Time
	if !k.ExpiresAt.IsZero() {
		expires = &k.ExpiresAt
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, qAPIKeyInsert, s.now(), k.ID, k.Tenant, k.Name, k.Scopes, k.Hash, k.CreatedBy, expires).
			Scan(&k.CreatedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, qAPIKeyBump, s.keyChannel, k.ID)
		return err
	})
	if err != nil {
		return store.APIKey{}, s.fail("create api key", err)
	}
	s.keyChanges.Changed()
	k.CreatedAt = utc(k.CreatedAt)
	return k, nil
}

// APIKeyGet returns the key of id.
func (s *Store) APIKeyGet(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, qAPIKeyGet, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.APIKey{}, store.ErrNotFound
	}
	if err != nil {
		return store.APIKey{}, s.fail("read api key", err)
	}
	return k, nil
}

// APIKeyList returns a tenant's keys, oldest first.
func (s *Store) APIKeyList(ctx context.Context, tenant string) ([]store.APIKey, error) {
	rows, err := s.pool.Query(ctx, qAPIKeyList, tenant)
	if err != nil {
		return nil, s.fail("list api keys", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.APIKey, error) { return scanAPIKey(row) })
	if err != nil {
		return nil, s.fail("list api keys", err)
	}
	return out, nil
}

// APIKeyRevoke revokes a key, once, and announces it to every process.
func (s *Store) APIKeyRevoke(ctx context.Context, tenant, id string) (store.APIKey, bool, error) {
	var k store.APIKey
	var revoked bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, qAPIKeyRevoke, s.now(), tenant, id)
		if err != nil {
			return err
		}
		if revoked = tag.RowsAffected() > 0; revoked {
			if _, err := tx.Exec(ctx, qAPIKeyBump, s.keyChannel, id); err != nil {
				return err
			}
		}
		k, err = scanAPIKey(tx.QueryRow(ctx, qAPIKeyGet, id))
		if err == nil && tenant != "" && k.Tenant != tenant {
			return pgx.ErrNoRows
		}
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.APIKey{}, false, store.ErrNotFound
	}
	if err != nil {
		return store.APIKey{}, false, s.fail("revoke api key", err)
	}
	if revoked {
		s.keyChanges.Changed()
	}
	return k, revoked, nil
}

// APIKeyRevision reads the keys' revision counter.
func (s *Store) APIKeyRevision(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, qAPIKeyRevision).Scan(&v); err != nil {
		return 0, s.fail("read api key revision", err)
	}
	return v, nil
}

// APIKeyChanges counts the key changes this process heard of: its own and,
// through LISTEN, every other process's.
func (s *Store) APIKeyChanges() *store.APIKeyChanges { return &s.keyChanges }

func scanAPIKey(row pgx.Row) (store.APIKey, error) {
	var k store.APIKey
	var expires, revoked *time.Time
	if err := row.Scan(&k.ID, &k.Tenant, &k.Name, &k.Scopes, &k.Hash, &k.CreatedBy, &k.CreatedAt, &expires, &revoked); err != nil {
		return store.APIKey{}, err
	}
	k.CreatedAt = utc(k.CreatedAt)
	if expires != nil {
		k.ExpiresAt = utc(*expires)
	}
	if revoked != nil {
		k.RevokedAt = utc(*revoked)
	}
	return k, nil
}

// AuditAppend adds an entry to the audit log.
func (s *Store) AuditAppend(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	if e.Detail == "" {
		e.Detail = "{}"
	}
	err := s.pool.QueryRow(ctx, qAuditInsert, s.now(), e.Tenant, e.ActorKey, e.ActorName, e.Action, e.Target, e.Remote, e.Detail).
		Scan(&e.ID, &e.At)
	if err != nil {
		return store.AuditEntry{}, s.fail("append to the audit log", err)
	}
	e.At = utc(e.At)
	return e, nil
}

// AuditList returns a page of the audit log, newest first.
func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEntry, error) {
	before := int64(math.MaxInt64)
	if p.Before > 0 {
		before = p.Before
	}
	rows, err := s.pool.Query(ctx, qAuditList, p.Tenant, before, p.LimitOrDefault())
	if err != nil {
		return nil, s.fail("list the audit log", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.AuditEntry, error) {
		var e store.AuditEntry
		err := row.Scan(&e.ID, &e.At, &e.Tenant, &e.ActorKey, &e.ActorName, &e.Action, &e.Target, &e.Remote, &e.Detail)
		e.At = utc(e.At)
		return e, err
	})
	if err != nil {
		return nil, s.fail("list the audit log", err)
	}
	return out, nil
}

// keyHeard is a notification on the keys' channel.
func (s *Store) keyHeard() { s.keyChanges.Changed() }
