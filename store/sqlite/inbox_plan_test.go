package sqlite

import (
	"github.com/heraldhq/herald/internal/testenv"
	"strings"
	"testing"
)

// The inbox's statements search by key, never scan the items: the feed and
// the replay walk the primary key from the cursor's seq; marks by id find
// items by message_id; marks up to a seq, the recount and the purge's
// delete use the primary key; the purge lists tenants through the
// counters' key and picks each tenant's oldest items from
// inbox_items_tenant_created, in its order.
func TestInboxStatementsSearchTheirKeys(t *testing.T) {
	t.Parallel()
	if testenv.WithoutRace(t) {
		return
	}
	s := planStore(t, qBenchInboxFill...)
	for name, q := range map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"feed":      {qInboxFeed, []any{"t1", "r1", int64(40000), false, 51}, []string{"SEARCH inbox_items USING PRIMARY KEY (tenant=? AND recipient=? AND seq<?)", "SEARCH inbox_counters USING PRIMARY KEY (tenant=? AND recipient=?)"}},
		"after":     {qInboxAfter, []any{"t1", "r1", 100, 51}, []string{"SEARCH inbox_items USING PRIMARY KEY (tenant=? AND recipient=? AND seq>?)"}},
		"badge":     {qInboxBadge, []any{"t1", "r1"}, []string{"SEARCH inbox_counters USING PRIMARY KEY (tenant=? AND recipient=?)"}},
		"readIDs":   {qInboxReadIDs, []any{1, "t1", "r1", `["ntf_1.inbox"]`}, []string{"SEARCH inbox_items USING INDEX sqlite_autoindex_inbox_items_1 (message_id=?"}},
		"readUpTo":  {qInboxReadUpTo, []any{1, "t1", "r1", 300}, []string{"SEARCH inbox_items USING PRIMARY KEY (tenant=? AND recipient=? AND seq<?)"}},
		"archive":   {qInboxArchive, []any{1, "t1", "r1", "ntf_7.inbox"}, []string{"SEARCH inbox_items USING INDEX sqlite_autoindex_inbox_items_1 (message_id=?"}},
		"recount":   {qInboxRecountBatch, []any{"", "", "", "", 1000}, []string{"SEARCH c USING PRIMARY KEY ((tenant,recipient)>(?,?))", "SEARCH i USING PRIMARY KEY (tenant=? AND recipient=?)"}},
		"tenants":   {qInboxTenants, nil, []string{"SEARCH inbox_counters USING PRIMARY KEY", "SEARCH c USING PRIMARY KEY (tenant>?)"}},
		"purgePick": {qInboxPurgePick, []any{"t1", 5000, 1000}, []string{"SEARCH inbox_items USING COVERING INDEX inbox_items_tenant_created (tenant=? AND created_at<?)"}},
		"purge":     {qInboxPurge, []any{`[["t1","r1",5]]`}, []string{"SEARCH inbox_items USING PRIMARY KEY (tenant=? AND recipient=? AND seq=?)"}},
	} {
		text := queryPlan(t, s, q.sql, q.args...)
		for _, want := range q.want {
			if !strings.Contains(text, want) {
				t.Errorf("%s: no %q:\n%s", name, want, text)
			}
		}
		if strings.Contains(text, "SCAN inbox_items") || strings.Contains(text, "SCAN i\n") || strings.Contains(text, "SCAN inbox_counters") {
			t.Errorf("%s scans a table:\n%s", name, text)
		}
		// Only the feed sorts, and only its page (the rows of its LIMIT).
		if name != "feed" && strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%s sorts:\n%s", name, text)
		}
	}
}
