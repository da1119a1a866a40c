package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/heraldhq/herald/store"
)

// API keys (store.APIKeys) and the audit log (store.Audit). A key's
// create and revoke bump api_key_revision in the same write transaction;
// another process on the file learns of it by reading that one row
// (APIKeyRevision), which package apikeys does at most once a recheck
// interval. They run unprepared: they are rare.
const (
	qAPIKeyCols   = `id, tenant, name, scopes, hash, created_by, created_at, expires_at, revoked_at`
	qAPIKeyInsert = `INSERT INTO api_keys (` + qAPIKeyCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)`
	qAPIKeyBump   = `UPDATE api_key_revision SET revision = revision + 1 WHERE id = 1`
	qAPIKeyGet    = `SELECT ` + qAPIKeyCols + ` FROM api_keys WHERE id = ?`
	// ?1 tenant ('' every tenant).
	qAPIKeyList = `SELECT ` + qAPIKeyCols + ` FROM api_keys WHERE ?1 = '' OR tenant = ?1 ORDER BY created_at, id`
	// ?1 now, ?2 tenant ('' any), ?3 id.
	qAPIKeyRevoke   = `UPDATE api_keys SET revoked_at = ?1 WHERE id = ?3 AND (?2 = '' OR tenant = ?2) AND revoked_at IS NULL`
	qAPIKeyRevision = `SELECT revision FROM api_key_revision WHERE id = 1`

	qAuditInsert = `INSERT INTO audit_log (at, tenant, actor_key, actor_name, action, target, remote, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`
	// ?1 tenant ('' every tenant), ?2 before id, ?3 limit.
	qAuditList = `SELECT id, at, tenant, actor_key, actor_name, action, target, remote, detail FROM audit_log
WHERE (?1 = '' OR tenant = ?1) AND id < ?2 ORDER BY id DESC LIMIT ?3`
)

// APIKeyCreate stores k.
func (s *Store) APIKeyCreate(ctx context.Context, k store.APIKey) (store.APIKey, error) {
	err := s.w.do(ctx, func(tx wtx) error {
		k.CreatedAt = fromMs(s.now())
		var expires any
		if !k.ExpiresAt.IsZero() {
			expires = ms(k.ExpiresAt)
		}
		if _, err := tx.Exec(qAPIKeyInsert, k.ID, k.Tenant, k.Name, strings.Join(k.Scopes, ","), k.Hash,
			k.CreatedBy, ms(k.CreatedAt), expires); err != nil {
			return err
		}
		_, err := tx.Exec(qAPIKeyBump)
		return err
	})
	if err != nil {
		return store.APIKey{}, fmt.Errorf("create api key: %w", err)
	}
	s.keyChanges.Changed()
	return k, nil
}

// APIKeyGet returns the key of id.
func (s *Store) APIKeyGet(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanAPIKey(s.queryRow(ctx, qAPIKeyGet, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, store.ErrNotFound
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("read api key: %w", err)
	}
	return k, nil
}

// APIKeyList returns a tenant's keys, oldest first.
func (s *Store) APIKeyList(ctx context.Context, tenant string) ([]store.APIKey, error) {
	rows, err := s.query(ctx, qAPIKeyList, tenant)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	var out []store.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// APIKeyRevoke revokes a key, once.
func (s *Store) APIKeyRevoke(ctx context.Context, tenant, id string) (store.APIKey, bool, error) {
	var k store.APIKey
	var revoked bool
	err := s.w.do(ctx, func(tx wtx) error {
		res, err := tx.Exec(qAPIKeyRevoke, s.now(), tenant, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			revoked = true
			if _, err := tx.Exec(qAPIKeyBump); err != nil {
				return err
			}
		}
		k, err = scanAPIKey(tx.QueryRow(qAPIKeyGet, id))
		if err == nil && tenant != "" && k.Tenant != tenant {
			return sql.ErrNoRows
		}
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, false, store.ErrNotFound
	}
	if err != nil {
		return store.APIKey{}, false, fmt.Errorf("revoke api key: %w", err)
	}
	if revoked {
		s.keyChanges.Changed()
	}
	return k, revoked, nil
}

// APIKeyRevision reads the keys' revision counter.
func (s *Store) APIKeyRevision(ctx context.Context) (int64, error) {
	var v int64
	if err := s.queryRow(ctx, qAPIKeyRevision).Scan(&v); err != nil {
		return 0, fmt.Errorf("read api key revision: %w", err)
	}
	return v, nil
}

// APIKeyChanges counts this process's key writes (SQLite has no
// announcements between processes: APIKeyRevision is how they learn).
func (s *Store) APIKeyChanges() *store.APIKeyChanges { return &s.keyChanges }

func scanAPIKey(row interface{ Scan(...any) error }) (store.APIKey, error) {
	var k store.APIKey
	var scopes string
	var created int64
	var expires, revoked sql.NullInt64
	if err := row.Scan(&k.ID, &k.Tenant, &k.Name, &scopes, &k.Hash, &k.CreatedBy, &created, &expires, &revoked); err != nil {
		return store.APIKey{}, err
	}
	if scopes != "" {
		k.Scopes = strings.Split(scopes, ",")
	}
	k.CreatedAt = fromMs(created)
	if expires.Valid {
		k.ExpiresAt = fromMs(expires.Int64)
	}
	if revoked.Valid {
		k.RevokedAt = fromMs(revoked.Int64)
	}
	return k, nil
}

// AuditAppend adds an entry to the audit log.
func (s *Store) AuditAppend(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	if e.Detail == "" {
		e.Detail = "{}"
	}
	err := s.w.do(ctx, func(tx wtx) error {
		now := s.now()
		e.At = fromMs(now)
		return tx.QueryRow(qAuditInsert, now, e.Tenant, e.ActorKey, e.ActorName, e.Action, e.Target, e.Remote, e.Detail).Scan(&e.ID)
	})
	if err != nil {
		return store.AuditEntry{}, fmt.Errorf("append to the audit log: %w", err)
	}
	return e, nil
}

// AuditList returns a page of the audit log, newest first.
func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEntry, error) {
	before := int64(math.MaxInt64)
	if p.Before > 0 {
		before = p.Before
	}
	rows, err := s.query(ctx, qAuditList, p.Tenant, before, p.LimitOrDefault())
	if err != nil {
		return nil, fmt.Errorf("list the audit log: %w", err)
	}
	defer rows.Close()
	var out []store.AuditEntry
	for rows.Next() {
		var e store.AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Tenant, &e.ActorKey, &e.ActorName, &e.Action, &e.Target, &e.Remote, &e.Detail); err != nil {
			return nil, fmt.Errorf("list the audit log: %w", err)
		}
		e.At = fromMs(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the audit log: %w", err)
	}
	return out, nil
}
