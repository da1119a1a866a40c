package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/recount"
	"github.com/heraldhq/herald/store"
)

// recountDB is a fresh database with a store open on it, and the config
// file that names it.
type recountDB struct {
	*testdb.DB
	config string
}

func openRecountDB(t *testing.T, driver string) recountDB {
	t.Helper()
	db := recountDB{DB: testdb.Open(t, driver, nil), config: filepath.Join(t.TempDir(), "herald.yaml")}
	if err := os.WriteFile(db.config, []byte("database: '"+db.Database+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return db
}

// items writes n inbox items for tenant's recipient.
func (db recountDB) items(t *testing.T, tenant, recipient string, n int) {
	t.Helper()
	for range n {
		id := ids.New("ntf", time.Now())
		if _, err := db.Store.NotificationCreate(context.Background(), store.NotificationCreateParams{
			Tenant: tenant, ID: id, Recipient: recipient, EventID: id, Kind: "order.shipped", Lane: heraldtype.LaneTransactional,
			Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelInbox},
			Inbox: []store.InboxText{{Title: "Shipped", Body: "On its way"}},
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func (db recountDB) badge(t *testing.T, tenant, recipient string) store.InboxBadge {
	t.Helper()
	b, err := db.Store.InboxBadge(context.Background(), tenant, recipient)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// recountCLI runs herald inbox recount with args and returns its exit
// status and output.
func recountCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return cli(append([]string{"inbox", "recount"}, args...)...)
}

// A counter broken on purpose with SQL shows a wrong badge until herald
// inbox recount repairs it; --tenant and --recipient narrow what it
// touches.
func TestInboxRecountRepairsABrokenCounter(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := openRecountDB(t, driver)
			db.items(t, "acme", "u1", 3)
			db.items(t, "acme", "u2", 2)
			db.items(t, "zeta", "u1", 1)
			db.Exec(t, `UPDATE inbox_counters SET unread = unread + 40 WHERE tenant = 'acme' AND recipient = 'u1'`)
			db.Exec(t, `UPDATE inbox_counters SET unread = 0 WHERE tenant = 'zeta' AND recipient = 'u1'`)
			acme := db.badge(t, "acme", "u1")
			if acme.Unread != 43 {
				t.Fatalf("broken badge %+v, want 43 unread: the break did not take", acme)
			}
			zeta := db.badge(t, "zeta", "u1").Seq // the newest item's: 1 on PostgreSQL, the file's sixth on SQLite

			// One recipient: only its counter.
			code, out, errOut := recountCLI(t, "--config", db.config, "--tenant", "acme", "--recipient", "u1", "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out, errOut)
			}
			var rep recount.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("--json printed %q: %v", out, err)
			}
			want := recount.Report{Tenant: "acme", Recipient: "u1", Checked: 1, Repaired: 1, Drifted: []recount.Drift{
				{Tenant: "acme", Recipient: "u1", Was: recount.Badge{Unread: 43, Seq: acme.Seq}, Now: recount.Badge{Unread: 3, Seq: acme.Seq}}}}
			if got, _ := json.Marshal(rep); string(got) != mustJSON(t, want) {
				t.Errorf("report %s, want %s", got, mustJSON(t, want))
			}
			if !strings.HasPrefix(errOut, "database ") {
				t.Errorf("stderr %q, want the database line", errOut)
			}
			if b := db.badge(t, "acme", "u1"); b.Unread != 3 {
				t.Errorf("badge after the recount %+v, want 3 unread", b)
			}
			if b := db.badge(t, "zeta", "u1"); b.Unread != 0 {
				t.Errorf("another tenant's counter changed: %+v", b)
			}

			// Every tenant, for a person: the other broken counter.
			code, out, errOut = recountCLI(t, "--config", db.config)
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out, errOut)
			}
			for _, line := range []string{"inbox counters of every tenant: 3 checked, 1 repaired", fmt.Sprintf("zeta u1: unread 0 → 1, seq %d → %d", zeta, zeta)} {
				if !strings.Contains(out, line) {
					t.Errorf("output %q lacks %q", out, line)
				}
			}
			if b := db.badge(t, "zeta", "u1"); b.Unread != 1 {
				t.Errorf("badge after the recount %+v, want 1 unread", b)
			}
			// Nothing is left to repair.
			if _, out, _ = recountCLI(t, "--config", db.config, "--json"); !strings.Contains(out, `"repaired": 0`) {
				t.Errorf("a second recount: %s", out)
			}
		})
	}
}

func TestInboxRecountUsage(t *testing.T) {
	t.Parallel()
	if code, _, errOut := recountCLI(t, "--recipient", "u1"); code != 2 || !strings.Contains(errOut, "--recipient needs --tenant") {
		t.Errorf("--recipient alone: exit %d, %q", code, errOut)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
