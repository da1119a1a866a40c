package sqlite

import (
	"github.com/heraldhq/herald/internal/testenv"
	"strings"
	"testing"
)

// The inbox's statements search by key, never scan the notifications: the
// feed and the replay seek the cursor's item by its seq
// (notifications_inbox_seq) and walk the recipient's notifications
// (notifications_tenant_recipient_created) from its place; marks by id find
// the notification by its id; marks up to a seq and the recount walk the
// recipient's notifications; the purge lists tenants through the counters'
// key, picks each tenant's oldest items from notifications_inbox_created, in
// its order, and clears them by seq.
func TestInboxStatementsSearchTheirKeys(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	s := planStore(t, qBenchInboxFill...)
	const (
		seek   = "SEARCH notifications USING INDEX notifications_inbox_seq (inbox_seq=?)"
		walk   = "USING INDEX notifications_tenant_recipient_created (tenant=? AND recipient=?"
		byID   = "SEARCH notifications USING INDEX sqlite_autoindex_notifications_1 (id=?)"
		count  = "SEARCH inbox_counters USING PRIMARY KEY (tenant=? AND recipient=?)"
		legacy = "SEARCH inbox_legacy_items USING PRIMARY KEY (tenant=? AND recipient=? AND legacy_seq"
	)
	for name, q := range map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"feed":    {qInboxFeed, []any{"t1", "r1", int64(40000), false, 51}, []string{seek, walk + " AND (created_at,id)<(?,?))", count}},
		"after":   {qInboxAfter, []any{"t1", "r1", 100, 51}, []string{seek, walk + " AND (created_at,id)>(?,?))"}},
		"badge":   {qInboxBadge, []any{"t1", "r1"}, []string{count}},
		"create":  {qNotificationInsertFeed, []any{"ntf_x", "t1", "r1", "e", "k", "transactional", "{}", nil, nil, nil, 1, 1, "", "t", "b", ""}, []string{"SEARCH notifications USING COVERING INDEX notifications_tenant_recipient_created (tenant=? AND recipient=?)"}},
		"readIDs": {qInboxReadIDs, []any{1, "t1", "r1", `["ntf_1"]`}, []string{byID}},
		// One tenant in the file: SQLite's statistics make a skip scan of
		// the tenant as cheap as seeking it; either walks the recipient.
		"readUpTo":   {qInboxReadUpTo, []any{1, "t1", "r1", 300}, []string{"USING INDEX notifications_tenant_recipient_created (", "recipient=?)"}},
		"archive":    {qInboxArchive, []any{1, "t1", "r1", "ntf_7"}, []string{byID}},
		"exists":     {qInboxItemExists, []any{"ntf_7", "t1", "r1"}, []string{byID}},
		"recount":    {qInboxRecountBatch, []any{"", "", "", "", 1000}, []string{"SEARCH c USING PRIMARY KEY ((tenant,recipient)>(?,?))", walk + ")"}},
		"heads":      {qInboxHeads, []any{`[["t1","r1"],["t1","u7"]]`}, []string{"SEARCH c USING PRIMARY KEY (tenant=? AND recipient=?)", walk + ")", "SEARCH n USING INTEGER PRIMARY KEY (rowid=?)"}},
		"legacyUp":   {qInboxLegacyUp, []any{"t1", "r1", 7}, []string{legacy}},
		"legacyDown": {qInboxLegacyDown, []any{"t1", "r1", 7}, []string{legacy}},
		"tenants":    {qInboxTenants, nil, []string{"SEARCH inbox_counters USING PRIMARY KEY", "SEARCH c USING PRIMARY KEY (tenant>?)"}},
		"purgePick":  {qInboxPurgePick, []any{"t1", 5000, 1000}, []string{"SEARCH notifications USING INDEX notifications_inbox_created (tenant=? AND created_at<?)"}},
		"purge":      {qInboxPurge, []any{`[5, 7]`}, []string{"SEARCH notifications USING COVERING INDEX notifications_inbox_seq (inbox_seq=?)"}},
		"erase":      {qEraseInbox, []any{"t1", "r1", `["ntf_5"]`}, []string{byID}},
	} {
		text := queryPlan(t, s, q.sql, q.args...)
		for _, want := range q.want {
			if !strings.Contains(text, want) {
				t.Errorf("%s: no %q:\n%s", name, want, text)
			}
		}
		if strings.Contains(text, "SCAN n\n") || strings.HasSuffix(text, "SCAN n") ||
			strings.Contains(text, "SCAN notifications") || strings.Contains(text, "SCAN inbox_counters") {
			t.Errorf("%s scans a table:\n%s", name, text)
		}
		// Only the feed sorts, and only its page (the rows of its LIMIT).
		if name != "feed" && strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%s sorts:\n%s", name, text)
		}
	}
}
