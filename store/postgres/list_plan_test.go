package postgres

import (
	"strings"
	"testing"
	"time"
)

// Listing a tenant's notifications (GET /v1/notifications) walks an index
// of migration 5 backwards from the cursor and stops after the page: it
// neither scans the tenant's rows nor sorts them, with or without a
// recipient, a cursor or filters, and in the generic plan a prepared
// statement ends up with.
func TestNotificationListWalksItsIndex(t *testing.T) {
	t.Parallel()
	// 40,000 notifications over a few days, half of tenant "big": of those,
	// half for one recipient ("hot"), the rest spread over 200 recipients;
	// each with its outbox row and delivery.
	_, conn := planConn(t,
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'ntf_' || lpad(g::text, 8, '0'), CASE WHEN g % 2 = 0 THEN 'big' ELSE 'other' END,
       CASE WHEN g % 4 = 0 THEN 'hot' ELSE 'r' || (g % 400) END, 'e' || g,
       CASE WHEN g % 3 = 0 THEN 'k1' ELSE 'k2' END, 'transactional', '{}', timestamptz '2030-01-01' + g * interval '10 s'
FROM generate_series(1, 40000) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
SELECT id, id || '.webhook', tenant, lane, 'webhook', 'DONE', created_at, created_at, created_at FROM notifications`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT message_id, notification_id, tenant, channel, 'PROVIDER_ACCEPTED', 1, created_at, created_at FROM outbox`,
		`ANALYZE notifications; ANALYZE outbox; ANALYZE deliveries`,
	)
	cursor := time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC)
	since := time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)
	for name, q := range map[string]struct {
		sql  string
		args []any
		// walk: the index the statement walks backwards and stops in.
		walk string
	}{
		"FirstPage":          {qNotificationList, []any{nil, "big", "", "", "", nil, nil, "", 51}, "notifications_tenant_created"},
		"NextPage":           {qNotificationList, []any{nil, "big", "", "", "", nil, &cursor, "ntf_00021600", 51}, "notifications_tenant_created"},
		"KindStateSince":     {qNotificationList, []any{nil, "big", "", "k1", "PENDING", &since, &cursor, "ntf_00021600", 51}, "notifications_tenant_created"},
		"Recipient":          {qNotificationListByRecipient, []any{nil, "big", "hot", "", "", nil, nil, "", 51}, "notifications_tenant_recipient_created"},
		"RecipientNextState": {qNotificationListByRecipient, []any{nil, "big", "r10", "k2", "UNKNOWN", &since, &cursor, "ntf_00021600", 51}, "notifications_tenant_recipient_created"},
	} {
		// A prepared statement, planned generically, as a pooled
		// connection's statement cache ends up running it.
		text := explainExecute(t, conn, "list_"+name, q.sql, q.args)
		if !strings.Contains(text, "Index Scan Backward using "+q.walk+" on notifications") {
			t.Errorf("%s does not walk %s backwards:\n%s", name, q.walk, text)
		}
		for _, bad := range []string{"Seq Scan on notifications", "Seq Scan on outbox", "Seq Scan on deliveries", "Bitmap Heap Scan on notifications"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s: %s:\n%s", name, bad, text)
			}
		}
		// The keyset bounds the walk: it is an index condition, not a filter.
		if !indexCondNames(text, "created_at") {
			t.Errorf("%s: created_at does not bound the index scan:\n%s", name, text)
		}
	}
}

// Listing a tenant's campaigns (GET /v1/campaigns) walks
// campaigns_tenant_created (migration 38) backwards from the cursor and
// stops after the page, and one state's campaigns walk
// campaigns_tenant_state_created (migration 39), in the generic plan.
func TestCampaignListWalksItsIndex(t *testing.T) {
	t.Parallel()
	_, conn := planConn(t,
		`INSERT INTO campaigns (id, tenant, kind, lane, channels, steps, params, state, idempotency_key, request_hash, created_at, draft_expires_at)
SELECT 'cmp_' || lpad(g::text, 8, '0'), 't' || (g % 50), 'k', 'marketing', '{webhook}', '{0}', '{}',
       CASE WHEN g % 1000 = 0 THEN 'RUNNING' WHEN g % 3 = 0 THEN 'DONE' ELSE 'CANCELLED' END, 'key' || g, 'h', timestamptz '2030-01-01' + g * interval '1 min',
       timestamptz '2030-02-01'
FROM generate_series(1, 20000) g`,
		`ANALYZE campaigns`,
	)
	cursor := time.Date(2030, 1, 5, 0, 0, 0, 0, time.UTC)
	for name, c := range map[string]struct {
		q, index string
		args     []any
	}{
		"FirstPage":          {qCampaignList, "campaigns_tenant_created", []any{"t7", nil, "", 51}},
		"NextPage":           {qCampaignList, "campaigns_tenant_created", []any{"t7", &cursor, "cmp_00005000", 51}},
		"FirstPageOfRunning": {qCampaignListState, "campaigns_tenant_state_created", []any{"t0", nil, "", 51, "RUNNING"}},
		"NextPageOfDone":     {qCampaignListState, "campaigns_tenant_state_created", []any{"t7", &cursor, "cmp_00005000", 51, "DONE"}},
	} {
		text := explainExecute(t, conn, "campaign_list_"+name, c.q, c.args)
		if !strings.Contains(text, "Index Scan Backward using "+c.index+" on campaigns") || strings.Contains(text, "Seq Scan on campaigns") ||
			strings.Contains(text, "Sort") {
			t.Errorf("%s does not walk %s backwards, unsorted:\n%s", name, c.index, text)
		}
		// The keyset bounds the walk from the cursor: an index condition,
		// not a filter over the tenant's campaigns from the newest.
		if !indexCondNames(text, "created_at") {
			t.Errorf("%s: created_at does not bound the index scan:\n%s", name, text)
		}
	}
}
