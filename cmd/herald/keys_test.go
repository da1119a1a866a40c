package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

func init() { apikeys.Iterations = 1000 } // the tests' keys: production's rounds take seconds under -race

func TestKeysCommands(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := openRecountDB(t, driver)
			herald := func(args ...string) (int, string, string) { return cli(append(args, "--config", db.config)...) }
			code, out, errb := herald("keys", "create", "--tenant", "t1", "--name", "billing", "--scopes", "send,admin")
			if code != 0 {
				t.Fatalf("keys create: exit %d, %s %s", code, out, errb)
			}
			var key string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "hk_") {
					key = l
				}
			}
			id, _, ok := apikeys.Parse(key)
			if !ok {
				t.Fatalf("keys create printed no key:\n%s", out)
			}
			// A process serving the API: the CLI's revoke reaches it within
			// its recheck (at once on PostgreSQL, through NOTIFY).
			clk := clock.NewFake(time.Now())
			v := apikeys.NewVerifier(apikeys.Config{Store: db.Store, Clock: clk})
			ctx := context.Background()
			p, err := v.Verify(ctx, key)
			if err != nil || p.Tenant != "t1" || p.Name != "billing" || !p.Has(apikeys.ScopeAdmin) || p.Has(apikeys.ScopeRead) {
				t.Fatalf("the printed key verifies as %+v, %v", p, err)
			}
			code, out, _ = herald("keys", "list", "--tenant", "t1")
			if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "send,admin") || strings.Contains(out, key) {
				t.Fatalf("keys list: exit %d\n%s", code, out)
			}
			if code, out, errb = herald("keys", "revoke", id); code != 0 || !strings.Contains(out, "revoked key "+id) {
				t.Fatalf("keys revoke: exit %d, %s %s", code, out, errb)
			}
			// Again: said so, and no second audit entry (counted below).
			if code, out, errb = herald("keys", "revoke", id); code != 0 || !strings.Contains(out, "already revoked") {
				t.Fatalf("keys revoke again: exit %d, %s %s", code, out, errb)
			}
			clk.Advance(apikeys.DefaultRecheck)
			if _, err := v.Verify(ctx, key); !errors.Is(err, apikeys.ErrRevoked) {
				t.Fatalf("after keys revoke: %v, want ErrRevoked", err)
			}
			entries, err := db.Store.AuditList(ctx, store.AuditListParams{Tenant: "t1"})
			if err != nil || len(entries) != 2 || entries[0].Action != "key.revoke" || !strings.HasPrefix(entries[0].ActorKey, "cli:") {
				t.Fatalf("audit after the CLI: %+v, %v", entries, err)
			}
			code, out, _ = herald("audit", "list", "--tenant", "t1")
			if code != 0 || !strings.Contains(out, "key.revoke") || !strings.Contains(out, "key.create") || !strings.Contains(out, id) {
				t.Fatalf("audit list: exit %d\n%s", code, out)
			}
			for _, bad := range [][]string{
				{"keys", "create", "--tenant", "t1", "--name", "x", "--scopes", "root"},
				{"keys", "create", "--name", "x"},
				{"keys", "revoke"},
			} {
				code, _, errb := herald(bad...)
				if code != 2 || !strings.HasPrefix(errb, "herald: ") {
					t.Errorf("%v: exit %d, stderr %q; want 2 and one line", bad, code, errb)
				}
				if len(bad) == 4 && bad[2] == "--name" && !strings.Contains(errb, "--tenant is required") {
					t.Errorf("%v: %q; want the missing flag named", bad, errb)
				}
			}
			if code, _, errb := herald("keys", "revoke", "nosuchkey"); code != 1 || strings.Count(strings.TrimSpace(errb), "\n") != 0 {
				t.Errorf("revoke of an unknown key: exit %d, %q; want 1 and one line", code, errb)
			}
		})
	}
}

// A CLI action's audit entry is written even when the command's own time
// has run out (a long requeue --all that stopped part-way): the action
// was done, so is its entry, as the API's are.
func TestACLIAuditEntryOutlivesTheCommandsContext(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var logs bytes.Buffer
	cliAudit(ctx, st, slog.New(slog.NewTextHandler(&logs, nil)), "t1", audit.ParkedRequeue, "", map[string]int{"requeued": 3})
	entries, err := st.AuditList(context.Background(), store.AuditListParams{})
	if err != nil || len(entries) != 1 || entries[0].Action != audit.ParkedRequeue || entries[0].Detail != `{"requeued":3}` ||
		!strings.HasPrefix(entries[0].ActorKey, "cli:") {
		t.Fatalf("entries %+v (%v), logged %q; want the requeue's entry", entries, err, logs.String())
	}
}

// A name or an id in the store cannot rewrite what an operator reads in a
// table: a right-to-left override (x‮gnp.exe reads as xexe.png) and other
// format and control characters are printed as escapes.
func TestTablesShowFormatCharactersAsEscapes(t *testing.T) {
	t.Parallel()
	db := openRecountDB(t, "sqlite")
	code, out, errb := cli("keys", "create", "--tenant", "t1", "--name", "x\u202egnp.exe\u200b", "--scopes", "send", "--config", db.config)
	if code != 0 {
		t.Fatalf("keys create: exit %d, %s %s", code, out, errb)
	}
	code, out, _ = cli("keys", "list", "--tenant", "t1", "--config", db.config)
	if code != 0 || !strings.Contains(out, `x\u202egnp.exe\u200b`) || strings.ContainsRune(out, '\u202e') {
		t.Fatalf("keys list: exit %d\n%s", code, out)
	}
	for in, want := range map[string]string{
		"plain 결제": "plain 결제", "a\tb": `a\u0009b`, "\x1b[31mred": `\u001b[31mred`, "\u009b31m": `\u009b31m`, "bad\xff": `bad\xff`,
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %q, want %q", in, got, want)
		}
	}
}
