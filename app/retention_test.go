package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// retentionConfig purges every interval the development tenant's items
// older than retention.
func retentionConfig(t *testing.T, database string, retention, interval time.Duration) *config.Config {
	t.Helper()
	return testConfig(t, database, func(c *config.Config) {
		c.Inbox.TenantRetention = map[string]config.Duration{config.DevTenant: config.Duration(retention)}
		c.Inbox.PurgeInterval = config.Duration(interval)
	})
}

// unread reads a recipient's badge from a's store.
func unread(t *testing.T, a *app.App, recipient string) int64 {
	t.Helper()
	b, err := a.Store().InboxBadge(context.Background(), config.DevTenant, recipient)
	if err != nil {
		t.Fatal(err)
	}
	return b.Unread
}

// A running herald purges its tenants' inbox items past their retention
// every purge_interval, and counts them.
func TestServerPurgesItemsPastTheirRetention(t *testing.T) {
	t.Parallel()
	a, base := newHerald(t, retentionConfig(t, "", 300*time.Millisecond, 50*time.Millisecond), app.Options{})
	runHerald(t, a)
	postShipped(t, base, "u1", "k1")
	postShipped(t, base, "u1", "k2")
	testenv.WaitFor(t, "the purge of both items", testenv.Patience, func() bool { return unread(t, a, "u1") == 0 })
	items, err := a.Store().InboxItemsAfter(context.Background(), config.DevTenant, "u1", 0, 10)
	if err != nil || len(items) != 0 {
		t.Fatalf("items after the purge: %d (%v)", len(items), err)
	}
	_, metrics := get(t, base, "/metrics", "")
	if !strings.Contains(string(metrics), "herald_inbox_purged_total 2") {
		t.Errorf("/metrics lacks herald_inbox_purged_total 2")
	}
}

// Of two herald processes on one PostgreSQL database only the leader
// purges: the second, which would purge every 20 ms, leaves the items
// alone until the first stops and it takes the lead.
func TestOnlyTheLeaderPurges(t *testing.T) {
	t.Parallel()
	database := testpg.Schema(t)
	// A leads and would purge only after an hour.
	a, baseA := newHerald(t, retentionConfig(t, database, time.Millisecond, time.Hour), app.Options{})
	stopA := runHerald(t, a)
	testenv.WaitFor(t, "the first process to be ready", testenv.Patience, func() bool {
		code, _ := get(t, baseA, "/readyz", "")
		return code == http.StatusOK
	})
	b, baseB := newHerald(t, retentionConfig(t, database, time.Millisecond, 20*time.Millisecond), app.Options{})
	runHerald(t, b)
	testenv.WaitFor(t, "the second process to be ready", testenv.Patience, func() bool {
		code, _ := get(t, baseB, "/readyz", "")
		return code == http.StatusOK
	})
	postShipped(t, baseA, "u1", "k1")
	// A negative is shown over time: fifteen of B's rounds (every 20 ms)
	// pass while A leads.
	time.Sleep(300 * time.Millisecond)
	if n := unread(t, b, "u1"); n != 1 {
		t.Fatalf("%d unread while the first process leads, want the item kept", n)
	}
	stopA()
	testenv.WaitFor(t, "the second process's purge once it leads", testenv.Patience, func() bool { return unread(t, b, "u1") == 0 })
}
