package sqlite

import (
	"math"
	"strings"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
)

// Listing a tenant's notifications (GET /v1/notifications) searches an
// index of migration 5 in its order and stops after the page: no scan of
// the notifications, no sort of them, with or without a recipient.
func TestNotificationListSearchesItsIndex(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	s := planStore(t, `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 20000)
INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT printf('ntf_%08d', i), CASE WHEN i % 2 = 0 THEN 'big' ELSE 'other' END,
       CASE WHEN i % 4 = 0 THEN 'hot' ELSE 'r' || (i % 400) END, 'e' || i, 'k', 'transactional', '{}', 1000 * i
FROM g`)
	for name, q := range map[string]struct {
		sql   string
		args  []any
		index string
	}{
		"FirstPage":      {qNotificationList, []any{0, "big", "", "", "", int64(math.MinInt64), int64(math.MaxInt64), "", 51}, "notifications_tenant_created"},
		"KindStateSince": {qNotificationList, []any{0, "big", "", "k", "PENDING", 5000, 9000000, "ntf_00009000", 51}, "notifications_tenant_created"},
		"Recipient":      {qNotificationListByRecipient, []any{0, "big", "hot", "", "", int64(math.MinInt64), int64(math.MaxInt64), "", 51}, "notifications_tenant_recipient_created"},
		"RecipientState": {qNotificationListByRecipient, []any{0, "big", "r10", "k", "DONE", 5000, 9000000, "ntf_00009000", 51}, "notifications_tenant_recipient_created"},
	} {
		text := queryPlan(t, s, q.sql, q.args...)
		if !strings.Contains(text, "SEARCH n USING INDEX "+q.index+" (tenant=?") {
			t.Errorf("%s does not search %s:\n%s", name, q.index, text)
		}
		if strings.Contains(text, "SCAN n") || strings.Contains(text, "SCAN notifications") {
			t.Errorf("%s scans the notifications:\n%s", name, text)
		}
		// Only the page's own rows may be sorted (by outbox row, for the
		// planned sends), never the notifications.
		if strings.Contains(text, "USE TEMP B-TREE FOR ORDER BY") {
			t.Errorf("%s sorts the notifications:\n%s", name, text)
		}
	}
}

// Listing a tenant's campaigns (GET /v1/campaigns) searches
// campaigns_tenant_created (migration 34) from its cursor: the keyset is a
// range of the index search, not a filter over the tenant's campaigns
// from the newest, and nothing is sorted.
func TestCampaignListSearchesItsIndexFromTheCursor(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	s := planStore(t, `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 20000)
INSERT INTO campaigns (id, tenant, kind, lane, channels, params, state, idempotency_key, request_hash, created_at)
SELECT printf('cmp_%08d', i), 't' || (i % 20), 'k', 'marketing', '["webhook"]', '{}',
       CASE WHEN i % 1000 = 0 THEN 'RUNNING' WHEN i % 3 = 0 THEN 'DONE' ELSE 'CANCELLED' END, 'key' || i, 'h', 1000 * i
FROM g`)
	for name, c := range map[string]struct {
		q, search string
		args      []any
	}{
		"FirstPage":          {qCampaignList, "campaigns_tenant_created (tenant=? AND (created_at,id)<(?,?))", []any{"t7", int64(math.MaxInt64), "", 51}},
		"NextPage":           {qCampaignList, "campaigns_tenant_created (tenant=? AND (created_at,id)<(?,?))", []any{"t7", 9000000, "cmp_00009000", 51}},
		"FirstPageOfRunning": {qCampaignListState, "campaigns_tenant_state_created (tenant=? AND state=? AND (created_at,id)<(?,?))", []any{"t0", int64(math.MaxInt64), "", 51, "RUNNING"}},
		"NextPageOfDone":     {qCampaignListState, "campaigns_tenant_state_created (tenant=? AND state=? AND (created_at,id)<(?,?))", []any{"t7", 9000000, "cmp_00009000", 51, "DONE"}},
	} {
		text := queryPlan(t, s, c.q, c.args...)
		if !strings.Contains(text, "SEARCH c USING INDEX "+c.search) || strings.Contains(text, "USE TEMP B-TREE FOR ORDER BY") {
			t.Errorf("%s does not search %s from its cursor, unsorted:\n%s", name, c.search, text)
		}
	}
}
