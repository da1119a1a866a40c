package postgres

import (
	"strings"
	"testing"
	"time"
)

// The inbox's statements find their rows by key, in the custom plan and in
// the generic plan a pooled connection's statement cache ends up with: the
// feed and the replay walk inbox_items' primary key from the cursor's seq
// and stop after the page; marks by id find items by message_id; marks up
// to a seq, the recount and the purge's delete walk the primary key; the
// purge lists the tenants by the counters' key and picks each one's oldest
// items from inbox_items_tenant_created; counters are read
// and locked by theirs. Nothing scans the items.
func TestInboxStatementsUseTheirKeys(t *testing.T) {
	t.Parallel()
	// One recipient with 50,000 items among 1,000 others with 50 each.
	_, conn := planConn(t,
		`INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at, read_at, archived_at)
SELECT 't1', 'r1', g, 'ntf_' || g || '.inbox', 'ntf_' || g, 'k', 'Paid', 'Paid', '', timestamptz '2030-01-01' + g * interval '1 s',
       CASE WHEN g % 10 = 0 THEN timestamptz '2030-02-01' END, CASE WHEN g % 100 = 0 THEN timestamptz '2030-02-01' END
FROM generate_series(1, 50000) g`,
		`INSERT INTO inbox_items (tenant, recipient, seq, message_id, notification_id, kind, title, body, locale, created_at)
SELECT 't' || (g % 3), 'u' || (g / 50), g % 50 + 1, 'ntf_o' || g || '.inbox', 'ntf_o' || g, 'k', 'Paid', 'Paid', '', timestamptz '2030-01-01' + g * interval '1 s'
FROM generate_series(0, 49999) g`,
		`INSERT INTO inbox_counters (tenant, recipient, seq, unread)
SELECT tenant, recipient, max(seq), count(*) FILTER (WHERE read_at IS NULL AND archived_at IS NULL) FROM inbox_items GROUP BY tenant, recipient`,
		`ANALYZE inbox_items; ANALYZE inbox_counters`,
	)
	before := time.Date(2030, 1, 1, 0, 10, 0, 0, time.UTC)
	for name, q := range map[string]struct {
		sql  string
		args []any
		// want: the indexes that must drive the statement, each with the
		// column its index condition must name.
		want map[string]string
	}{
		"feed":      {qInboxFeed, []any{"t1", "r1", int64(40000), false, 51}, map[string]string{"inbox_items_pkey": "seq", "inbox_counters_pkey": "recipient"}},
		"feedFirst": {qInboxFeed, []any{"t1", "r1", int64(1<<63 - 1), true, 51}, map[string]string{"inbox_items_pkey": "seq"}},
		"after":     {qInboxAfter, []any{"t1", "r1", int64(100), 51}, map[string]string{"inbox_items_pkey": "seq"}},
		"badge":     {qInboxBadge, []any{"t1", "r1"}, map[string]string{"inbox_counters_pkey": "recipient"}},
		"lock":      {qInboxLock, []any{"t1", "r1"}, map[string]string{"inbox_counters_pkey": "recipient"}},
		"readIDs":   {qInboxReadIDs, []any{nil, "t1", "r1", []string{"ntf_1.inbox", "ntf_2.inbox"}}, map[string]string{"inbox_items_message_id_key": "message_id"}},
		"readUpTo":  {qInboxReadUpTo, []any{nil, "t1", "r1", int64(300)}, map[string]string{"inbox_items_pkey": "seq"}},
		"archive":   {qInboxArchive, []any{nil, "t1", "r1", "ntf_7.inbox"}, map[string]string{"inbox_items_message_id_key": "message_id"}},
		"recount":   {qInboxRecountItems, []any{[]string{"t1"}, []string{"r1"}}, map[string]string{"inbox_items_pkey": "recipient"}},
		"purgePick": {qInboxPurgePick, []any{"t1", before, 1000}, map[string]string{"inbox_items_tenant_created": "created_at"}},
		"purgeLock": {qInboxPurgeLock, []any{[]string{"t1"}, []string{"r1"}}, map[string]string{"inbox_counters_pkey": "recipient"}},
		"purge":     {qInboxPurge, []any{[]string{"t1"}, []string{"r1"}, []int64{5}}, map[string]string{"inbox_items_pkey": "seq"}},
	} {
		plans := bothPlans(t, conn, "inbox_"+name, q.sql, q.args)
		for _, how := range []string{"custom", "generic"} {
			text := plans[how]
			for _, bad := range []string{"Seq Scan on inbox_items", "Seq Scan on inbox_counters"} {
				if strings.Contains(text, bad) {
					t.Errorf("%s (%s plan): %s:\n%s", name, how, bad, text)
				}
			}
			for index, col := range q.want {
				if !strings.Contains(text, "using "+index+" on ") && !strings.Contains(text, "Bitmap Index Scan on "+index+" ") {
					t.Errorf("%s (%s plan) is not driven by %s:\n%s", name, how, index, text)
				}
				if !indexCondNames(text, col) {
					t.Errorf("%s (%s plan): %s bounds no index scan:\n%s", name, how, col, text)
				}
			}
		}
		// The feed and the replay walk the key and stop after the page.
		for how, text := range plans {
			if strings.HasPrefix(name, "feed") && !strings.Contains(text, "Index Scan Backward using inbox_items_pkey on inbox_items") {
				t.Errorf("%s (%s plan) does not walk inbox_items_pkey backwards:\n%s", name, how, text)
			}
			if name == "after" && !strings.Contains(text, "Index Scan using inbox_items_pkey on inbox_items") {
				t.Errorf("after (%s plan) does not walk inbox_items_pkey:\n%s", how, text)
			}
		}
	}
	// The purge's list of tenants skips through the counters' key.
	text := explain(t, conn, "tenants", "EXPLAIN "+qInboxTenants)
	if strings.Contains(text, "Seq Scan") || !strings.Contains(text, "inbox_counters_pkey") {
		t.Errorf("the tenants' list does not skip through inbox_counters_pkey:\n%s", text)
	}
}
