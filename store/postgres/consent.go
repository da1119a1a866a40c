package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// The consent history (store.ConsentHistory). A put locks the recipient's
// profile row (FOR UPDATE) before it compares and writes, so concurrent
// puts of one recipient run one after the other, each comparing with what
// the one before it committed, and take history ids in that order. With no
// row to lock, the put inserts the profile (ON CONFLICT DO NOTHING, which
// waits for a concurrent insert of the same recipient to end); finding one
// inserted meanwhile, it goes back and locks that.
const (
	// $1 tenant, $2 recipient.
	qConsentProfileLock = `SELECT data FROM profiles WHERE tenant = $1::text AND recipient = $2::text FOR UPDATE`
	// $1 now (NULL: the server's), $2 tenant, $3 recipient, $4 data.
	qConsentProfileInsert = `INSERT INTO profiles (tenant, recipient, data, updated_at)
VALUES ($2::text, $3::text, $4::jsonb, coalesce($1::timestamptz, now()))
ON CONFLICT (tenant, recipient) DO NOTHING`
	// $1 now, $2 tenant, $3 recipient, $4 data.
	qConsentProfileUpdate = `UPDATE profiles SET data = $4::jsonb, updated_at = coalesce($1::timestamptz, now())
WHERE tenant = $2::text AND recipient = $3::text`
	// $1 now, $2 tenant, $3 recipient, $4 by tenant, $5 by key, then the
	// changes as arrays: $6 channels, $7 old, $8 new (NULL elements: none).
	qConsentInsert = `INSERT INTO consent_history (tenant, recipient, channel, old_consent, new_consent, changed_at, by_tenant, by_key)
SELECT $2::text, $3::text, c.channel, c.old, c.new, coalesce($1::timestamptz, now()), $4::text, $5::text
FROM unnest($6::text[], $7::boolean[], $8::boolean[]) WITH ORDINALITY AS c(channel, old, new, n)
ORDER BY c.n`
	// $1 tenant, $2 recipient, $3 before id, $4 limit.
	qConsentList = `SELECT id, channel, old_consent, new_consent, changed_at, by_tenant, by_key FROM consent_history
WHERE tenant = $1::text AND recipient = $2::text AND id < $3::bigint
ORDER BY id DESC
LIMIT $4::integer`
	// qEraseConsentHistory deletes a recipient's history (an erasure's
	// first batch, after the profile: a put that held the profile's lock
	// commits first, and this later statement sees its rows).
	// $1 tenant, $2 recipient.
	qEraseConsentHistory = `DELETE FROM consent_history WHERE tenant = $1::text AND recipient = $2::text`
)

// profilePutTries bounds the put's lock-or-insert loop: each turn finds
// the row gone (an erasure) or inserted by another put, and an erasure
// and a put in a row are rare; a third turn is an error.
const profilePutTries = 3

// ProfilePutBy creates or replaces a recipient's profile and records the
// consent changes it makes, in one transaction.
func (s *Store) ProfilePutBy(ctx context.Context, p store.Profile, by store.ConsentActor) error {
	return s.ProfileChangeBy(ctx, p.Tenant, p.Recipient, by, func(old *store.Profile) error {
		*old = p
		return nil
	})
}

// ProfileChangeBy changes a recipient's profile in place and records the
// consent changes it makes, in one transaction.
func (s *Store) ProfileChangeBy(ctx context.Context, tenant, recipient string, by store.ConsentActor, change func(*store.Profile) error) error {
	var refused error // change's own error, returned as it is
	guarded := func(p *store.Profile) error {
		refused = change(p)
		return refused
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		old, p, err := s.profileChange(ctx, tx, tenant, recipient, guarded)
		if err != nil {
			return err
		}
		changes := store.ConsentDiff(old, p.Consent)
		if len(changes) == 0 {
			return nil
		}
		channels := make([]string, len(changes))
		olds, news := make([]*bool, len(changes)), make([]*bool, len(changes))
		for i, c := range changes {
			channels[i], olds[i], news[i] = string(c.Channel), c.Old, c.New
		}
		if _, err := tx.Exec(ctx, qConsentInsert, s.now(), tenant, recipient, by.Tenant, by.Key, channels, olds, news); err != nil {
			return fmt.Errorf("record consent changes: %w", err)
		}
		return nil
	})
	switch {
	case refused != nil:
		return refused
	case err != nil:
		return s.fail("write profile", err)
	}
	return nil
}

// profileChange applies change to the recipient's profile in tx, holding
// its row, writes the result, and returns the consent it replaced (nil
// when there was no profile) and the profile written.
func (s *Store) profileChange(ctx context.Context, tx pgx.Tx, tenant, recipient string, change func(*store.Profile) error) (map[heraldtype.Channel]bool, store.Profile, error) {
	apply := func(p store.Profile) (store.Profile, []byte, error) {
		if err := change(&p); err != nil {
			return p, nil, err
		}
		p.Tenant, p.Recipient = tenant, recipient
		data, err := json.Marshal(p)
		if err != nil {
			return p, nil, fmt.Errorf("encode profile: %w", err)
		}
		return p, data, nil
	}
	for range profilePutTries {
		var prev []byte
		err := tx.QueryRow(ctx, qConsentProfileLock, tenant, recipient).Scan(&prev)
		switch {
		case err == nil:
			old, err := store.DecodeProfile(tenant, recipient, prev, time.Time{})
			if err != nil {
				return nil, store.Profile{}, err
			}
			oldConsent := maps.Clone(old.Consent)
			p, data, err := apply(old)
			if err != nil {
				return nil, p, err
			}
			if _, err := tx.Exec(ctx, qConsentProfileUpdate, s.now(), tenant, recipient, string(data)); err != nil {
				return nil, p, err
			}
			return oldConsent, p, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, store.Profile{}, fmt.Errorf("lock profile: %w", err)
		}
		p, data, err := apply(store.Profile{Tenant: tenant, Recipient: recipient})
		if err != nil {
			return nil, p, err
		}
		tag, err := tx.Exec(ctx, qConsentProfileInsert, s.now(), tenant, recipient, string(data))
		if err != nil {
			return nil, p, err
		}
		if tag.RowsAffected() == 1 {
			return nil, p, nil
		}
		// Another put inserted this recipient's profile and committed:
		// lock that one and compare with it.
	}
	return nil, store.Profile{}, errors.New("the profile kept appearing and disappearing under the put")
}

// ConsentHistoryList returns a page of a recipient's consent changes,
// newest first.
func (s *Store) ConsentHistoryList(ctx context.Context, p store.ConsentHistoryListParams) ([]store.ConsentChange, error) {
	before := int64(math.MaxInt64)
	if p.Before != 0 {
		before = p.Before
	}
	rows, err := s.pool.Query(ctx, qConsentList, p.Tenant, p.Recipient, before, p.LimitOrDefault())
	if err != nil {
		return nil, s.fail("list consent history", err)
	}
	var out []store.ConsentChange
	var c store.ConsentChange
	var ch string
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &ch, &c.Old, &c.New, &c.At, &c.By.Tenant, &c.By.Key}, func() error {
		c.Tenant, c.Recipient, c.Channel, c.At = p.Tenant, p.Recipient, heraldtype.Channel(ch), c.At.UTC()
		out = append(out, c)
		c.Old, c.New = nil, nil
		return nil
	})
	if err != nil {
		return nil, s.fail("list consent history", err)
	}
	return out, nil
}
