package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/store"
)

// Personal data at rest (store.Sealed): one page and one swap statement
// per field. A page lists rows after a key in key order, each as its key
// columns, its tenant and its value as text; its first key is after ”
// (keys are never empty). A swap names the key ($1..$k), the new value
// ($k+1) and the value it replaces ($k+2): a row written since the page
// was read keeps its value. json has no equality, so params compare as
// text (the text the page read); profiles.data is jsonb and compares as
// jsonb.
var _ store.Sealed = (*Store)(nil)

var sealedQueries = map[store.SealedField]struct{ page, swap string }{
	store.SealedNotificationParams: {
		page: `SELECT id, tenant, params::text FROM notifications WHERE id > $1::text ORDER BY id LIMIT $2`,
		swap: `UPDATE notifications SET params = $2::json WHERE id = $1::text AND params::text = $3::text`,
	},
	store.SealedCampaignParams: {
		page: `SELECT id, tenant, params::text FROM campaigns WHERE id > $1::text ORDER BY id LIMIT $2`,
		swap: `UPDATE campaigns SET params = $2::json WHERE id = $1::text AND params::text = $3::text`,
	},
	store.SealedCampaignRecipientParams: {
		page: `SELECT r.campaign_id, r.recipient, c.tenant, r.params::text
FROM campaign_recipients r JOIN campaigns c ON c.id = r.campaign_id
WHERE (r.campaign_id, r.recipient) > ($1::text, $2::text) AND r.params IS NOT NULL
ORDER BY r.campaign_id, r.recipient LIMIT $3`,
		swap: `UPDATE campaign_recipients SET params = $3::json
WHERE campaign_id = $1::text AND recipient = $2::text AND params::text = $4::text`,
	},
	store.SealedProfiles: {
		page: `SELECT tenant, recipient, tenant, data::text FROM profiles
WHERE (tenant, recipient) > ($1::text, $2::text) ORDER BY tenant, recipient LIMIT $3`,
		swap: `UPDATE profiles SET data = $3::jsonb WHERE tenant = $1::text AND recipient = $2::text AND data = $4::jsonb`,
	},
	store.SealedDeviceTokens: {
		page: `SELECT tenant, recipient, device_id, tenant, token FROM devices
WHERE (tenant, recipient, device_id) > ($1::text, $2::text, $3::text) ORDER BY tenant, recipient, device_id LIMIT $4`,
		swap: `UPDATE devices SET token = $4::text
WHERE tenant = $1::text AND recipient = $2::text AND device_id = $3::text AND token = $5::text`,
	},
}

// SealedPage reads one page of a field's values.
func (s *Store) SealedPage(ctx context.Context, p store.SealedPageParams) ([]store.SealedValue, error) {
	q, ok := sealedQueries[p.Field]
	if !ok {
		return nil, fmt.Errorf("sealed page: unknown field %q", p.Field)
	}
	rows, err := s.pool.Query(ctx, q.page, p.Args()...)
	if err != nil {
		return nil, s.fail("sealed page "+string(p.Field), err)
	}
	defer rows.Close()
	var out []store.SealedValue
	for rows.Next() {
		var v store.SealedValue
		if err := rows.Scan(p.Field.Dest(&v)...); err != nil {
			return nil, s.fail("sealed page "+string(p.Field), err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("sealed page "+string(p.Field), err)
	}
	return out, nil
}

// SealedSwap swaps values in one transaction.
func (s *Store) SealedSwap(ctx context.Context, field store.SealedField, swaps []store.SealedSwap) (int, error) {
	q, ok := sealedQueries[field]
	if !ok {
		return 0, fmt.Errorf("sealed swap: unknown field %q", field)
	}
	var changed int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		changed = 0
		b := &pgx.Batch{}
		for _, sw := range swaps {
			args, err := sw.Args(field)
			if err != nil {
				return err
			}
			b.Queue(q.swap, args...)
		}
		res := tx.SendBatch(ctx, b)
		for range swaps {
			tag, err := res.Exec()
			if err != nil {
				res.Close()
				return err
			}
			changed += tag.RowsAffected()
		}
		return res.Close()
	})
	if err != nil {
		return 0, s.fail("sealed swap "+string(field), err)
	}
	return int(changed), nil
}
