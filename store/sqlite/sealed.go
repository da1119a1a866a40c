package sqlite

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/store"
)

// Personal data at rest (store.Sealed): one page and one swap statement
// per field. A page lists rows after a key in key order, each as its key
// columns, its tenant and its value; its first key is after ” (keys are
// never empty). A swap names the key (?1..?k), the new value (?k+1) and
// the value it replaces (?k+2): a row written since the page was read
// keeps its value.
var _ store.Sealed = (*Store)(nil)

var sealedQueries = map[store.SealedField]struct{ page, swap string }{
	store.SealedNotificationParams: {
		page: `SELECT id, tenant, params FROM notifications WHERE id > ?1 ORDER BY id LIMIT ?2`,
		swap: `UPDATE notifications SET params = ?2 WHERE id = ?1 AND params = ?3`,
	},
	store.SealedCampaignParams: {
		page: `SELECT id, tenant, params FROM campaigns WHERE id > ?1 ORDER BY id LIMIT ?2`,
		swap: `UPDATE campaigns SET params = ?2 WHERE id = ?1 AND params = ?3`,
	},
	store.SealedCampaignRecipientParams: {
		page: `SELECT r.campaign_id, r.recipient, c.tenant, r.params
FROM campaign_recipients r JOIN campaigns c ON c.id = r.campaign_id
WHERE (r.campaign_id, r.recipient) > (?1, ?2) AND r.params IS NOT NULL
ORDER BY r.campaign_id, r.recipient LIMIT ?3`,
		swap: `UPDATE campaign_recipients SET params = ?3 WHERE campaign_id = ?1 AND recipient = ?2 AND params = ?4`,
	},
	store.SealedProfiles: {
		page: `SELECT tenant, recipient, tenant, data FROM profiles WHERE (tenant, recipient) > (?1, ?2) ORDER BY tenant, recipient LIMIT ?3`,
		swap: `UPDATE profiles SET data = ?3 WHERE tenant = ?1 AND recipient = ?2 AND data = ?4`,
	},
	store.SealedDeviceTokens: {
		page: `SELECT tenant, recipient, device_id, tenant, token FROM devices
WHERE (tenant, recipient, device_id) > (?1, ?2, ?3) ORDER BY tenant, recipient, device_id LIMIT ?4`,
		swap: `UPDATE devices SET token = ?4 WHERE tenant = ?1 AND recipient = ?2 AND device_id = ?3 AND token = ?5`,
	},
}

// SealedPage reads one page of a field's values.
func (s *Store) SealedPage(ctx context.Context, p store.SealedPageParams) ([]store.SealedValue, error) {
	q, ok := sealedQueries[p.Field]
	if !ok {
		return nil, fmt.Errorf("sealed page: unknown field %q", p.Field)
	}
	rows, err := s.query(ctx, q.page, p.Args()...)
	if err != nil {
		return nil, fmt.Errorf("sealed page %s: %w", p.Field, err)
	}
	defer rows.Close()
	var out []store.SealedValue
	for rows.Next() {
		var v store.SealedValue
		if err := rows.Scan(p.Field.Dest(&v)...); err != nil {
			return nil, fmt.Errorf("sealed page %s: %w", p.Field, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sealed page %s: %w", p.Field, err)
	}
	return out, nil
}

// SealedSwap swaps values in one write transaction.
func (s *Store) SealedSwap(ctx context.Context, field store.SealedField, swaps []store.SealedSwap) (int, error) {
	q, ok := sealedQueries[field]
	if !ok {
		return 0, fmt.Errorf("sealed swap: unknown field %q", field)
	}
	var changed int64
	err := s.w.do(ctx, func(tx wtx) error {
		changed = 0
		for _, sw := range swaps {
			args, err := sw.Args(field)
			if err != nil {
				return err
			}
			r, err := tx.Exec(q.swap, args...)
			if err != nil {
				return err
			}
			n, err := r.RowsAffected()
			if err != nil {
				return err
			}
			changed += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sealed swap %s: %w", field, err)
	}
	return int(changed), nil
}
