package sqlite

import (
	"github.com/heraldhq/herald/internal/testenv"
	"strings"
	"testing"
)

// The inbox's statements search by key, never scan the items: the feed and
// the replay seek the cursor's item by its seq and walk the recipient's
// notifications (notifications_tenant_recipient_created) from its place,
// each item found by message_id; marks by id find items by message_id;
// marks up to a seq and the recount walk the same index; the purge lists
// tenants through the counters' key, picks each tenant's oldest items from
// inbox_items_tenant_created, in its order, and deletes by seq.
func TestInboxStatementsSearchTheirKeys(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	s := planStore(t, qBenchInboxFill...)
	const (
		seek  = "SEARCH k USING INTEGER PRIMARY KEY (rowid=?)"
		walk  = "SEARCH n USING COVERING INDEX notifications_tenant_recipient_created (tenant=? AND recipient=?"
		item  = "SEARCH i USING INDEX sqlite_autoindex_inbox_items_1 (message_id=?"
		count = "SEARCH inbox_counters USING PRIMARY KEY (tenant=? AND recipient=?)"
	)
	for name, q := range map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"feed":       {qInboxFeed, []any{"t1", "r1", int64(40000), true, false, 51}, []string{seek, walk + " AND (created_at,id)<(?,?))", item, count}},
		"after":      {qInboxAfter, []any{"t1", "r1", 100, false, 51}, []string{seek, walk + " AND (created_at,id)>(?,?))", item}},
		"badge":      {qInboxBadge, []any{"t1", "r1"}, []string{count}},
		"create":     {qNotificationInsertFeed, []any{"ntf_x", "t1", "r1", "e", "k", "transactional", "{}", nil, nil, nil, 1, 1}, []string{"SEARCH notifications USING COVERING INDEX notifications_tenant_recipient_created (tenant=? AND recipient=?)"}},
		"readIDs":    {qInboxReadIDs, []any{1, "t1", "r1", `["ntf_1.inbox"]`}, []string{"SEARCH inbox_items USING INDEX sqlite_autoindex_inbox_items_1 (message_id=?"}},
		"readUpTo":   {qInboxReadUpTo, []any{1, "t1", "r1", 300}, []string{"SEARCH inbox_items USING INDEX sqlite_autoindex_inbox_items_1 (message_id=?", walk + ")"}},
		"archive":    {qInboxArchive, []any{1, "t1", "r1", "ntf_7.inbox"}, []string{"SEARCH inbox_items USING INDEX sqlite_autoindex_inbox_items_1 (message_id=?"}},
		"recount":    {qInboxRecountBatch, []any{"", "", "", "", 1000}, []string{"SEARCH c USING PRIMARY KEY ((tenant,recipient)>(?,?))", walk + ")"}},
		"heads":      {qInboxHeads, []any{`[["t1","r1"],["t1","u7"]]`}, []string{"SEARCH c USING PRIMARY KEY (tenant=? AND recipient=?)", walk + ")", "SEARCH i USING INDEX sqlite_autoindex_inbox_items_1 (message_id=?)"}},
		"legacyUp":   {qInboxLegacyUp, []any{"t1", "r1", 7}, []string{"SEARCH inbox_items USING COVERING INDEX inbox_items_legacy (tenant=? AND recipient=? AND legacy_seq<?)"}},
		"legacyDown": {qInboxLegacyDown, []any{"t1", "r1", 7}, []string{"SEARCH inbox_items USING COVERING INDEX inbox_items_legacy (tenant=? AND recipient=? AND legacy_seq>?)"}},
		"tenants":    {qInboxTenants, nil, []string{"SEARCH inbox_counters USING PRIMARY KEY", "SEARCH c USING PRIMARY KEY (tenant>?)"}},
		"purgePick":  {qInboxPurgePick, []any{"t1", 5000, 1000}, []string{"SEARCH inbox_items USING INDEX inbox_items_tenant_created (tenant=? AND created_at<?)"}},
		"purge":      {qInboxPurge, []any{`[5, 7]`}, []string{"SEARCH inbox_items USING INTEGER PRIMARY KEY (rowid=?)"}},
	} {
		text := queryPlan(t, s, q.sql, q.args...)
		for _, want := range q.want {
			if !strings.Contains(text, want) {
				t.Errorf("%s: no %q:\n%s", name, want, text)
			}
		}
		if strings.Contains(text, "SCAN inbox_items") || strings.Contains(text, "SCAN i\n") || strings.Contains(text, "SCAN n\n") ||
			strings.Contains(text, "SCAN notifications") || strings.Contains(text, "SCAN inbox_counters") {
			t.Errorf("%s scans a table:\n%s", name, text)
		}
		// Only the feed sorts, and only its page (the rows of its LIMIT).
		if name != "feed" && strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%s sorts:\n%s", name, text)
		}
	}
}
