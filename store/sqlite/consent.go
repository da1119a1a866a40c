package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The consent history (store.ConsentHistory). A put reads the stored
// profile, replaces it and records the changes in one write transaction;
// the writer is the file's only writer, so no other put comes between the
// read and the write.
const (
	// ?1 tenant, ?2 recipient.
	qConsentProfileRead = `SELECT data FROM profiles WHERE tenant = ?1 AND recipient = ?2`
	// ?1 tenant, ?2 recipient, ?3 channel, ?4 old, ?5 new, ?6 now, ?7 by tenant, ?8 by key.
	qConsentInsert = `INSERT INTO consent_history (tenant, recipient, channel, old_consent, new_consent, changed_at, by_tenant, by_key)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)`
	// ?1 tenant, ?2 recipient, ?3 before id, ?4 limit.
	qConsentList = `SELECT id, channel, old_consent, new_consent, changed_at, by_tenant, by_key FROM consent_history
WHERE tenant = ?1 AND recipient = ?2 AND id < ?3
ORDER BY id DESC
LIMIT ?4`
	// qEraseConsentHistory deletes a recipient's history (an erasure's
	// first batch, with the profile). ?1 tenant, ?2 recipient.
	qEraseConsentHistory = `DELETE FROM consent_history WHERE tenant = ?1 AND recipient = ?2`
)

func init() { writeQueries = append(writeQueries, qConsentProfileRead, qConsentInsert) }

// ProfilePutBy creates or replaces a recipient's profile and records the
// consent changes it makes, in one transaction.
func (s *Store) ProfilePutBy(ctx context.Context, p store.Profile, by store.ConsentActor) error {
	return s.ProfileChangeBy(ctx, p.Tenant, p.Recipient, by, func(old *store.Profile) error {
		*old = p
		return nil
	})
}

// ProfileChangeBy changes a recipient's profile in place and records the
// consent changes it makes, in one transaction (the writer's: changes are
// ordered).
func (s *Store) ProfileChangeBy(ctx context.Context, tenant, recipient string, by store.ConsentActor, change func(*store.Profile) error) error {
	var refused error
	err := s.w.do(ctx, func(tx wtx) error {
		refused = nil
		p := store.Profile{Tenant: tenant, Recipient: recipient}
		var prev string
		switch err := tx.QueryRow(qConsentProfileRead, tenant, recipient).Scan(&prev); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read profile: %w", err)
		default:
			var err error
			if p, err = store.DecodeProfile(tenant, recipient, []byte(prev), fromMs(0)); err != nil {
				return err
			}
		}
		oldConsent := maps.Clone(p.Consent)
		if refused = change(&p); refused != nil {
			return refused
		}
		p.Tenant, p.Recipient = tenant, recipient
		data, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("encode profile: %w", err)
		}
		now := s.now()
		if _, err := tx.Exec(qProfilePut, tenant, recipient, string(data), now); err != nil {
			return err
		}
		for _, c := range store.ConsentDiff(oldConsent, p.Consent) {
			if _, err := tx.Exec(qConsentInsert, tenant, recipient, string(c.Channel),
				nullableBool(c.Old), nullableBool(c.New), now, by.Tenant, by.Key); err != nil {
				return fmt.Errorf("record consent change: %w", err)
			}
		}
		return nil
	})
	switch {
	case refused != nil:
		return refused
	case err != nil:
		return fmt.Errorf("write profile: %w", err)
	}
	return nil
}

// ConsentHistoryList returns a page of a recipient's consent changes,
// newest first.
func (s *Store) ConsentHistoryList(ctx context.Context, p store.ConsentHistoryListParams) ([]store.ConsentChange, error) {
	before := int64(math.MaxInt64)
	if p.Before != 0 {
		before = p.Before
	}
	rows, err := s.query(ctx, qConsentList, p.Tenant, p.Recipient, before, p.LimitOrDefault())
	if err != nil {
		return nil, fmt.Errorf("list consent history: %w", err)
	}
	defer rows.Close()
	var out []store.ConsentChange
	for rows.Next() {
		c := store.ConsentChange{Tenant: p.Tenant, Recipient: p.Recipient}
		var ch string
		var old, new sql.NullBool
		var at int64
		if err := rows.Scan(&c.ID, &ch, &old, &new, &at, &c.By.Tenant, &c.By.Key); err != nil {
			return nil, fmt.Errorf("list consent history: %w", err)
		}
		c.Channel, c.At = heraldtype.Channel(ch), fromMs(at)
		c.Old, c.New = boolOrNil(old), boolOrNil(new)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list consent history: %w", err)
	}
	return out, nil
}

// nullableBool is b as a column value: NULL for nil.
func nullableBool(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

func boolOrNil(b sql.NullBool) *bool {
	if !b.Valid {
		return nil
	}
	return &b.Bool
}
