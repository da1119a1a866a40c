package e2e

// `herald reconcile` as the README documents it: its exit codes, the JSON
// report's shape, what it repairs and what it leaves unaccounted for, on a
// database edited to hold each finding; and wantAccounted, which the crash
// and chaos tests end with.

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/reconcile"
	"github.com/heraldhq/herald/store/sqlite"
)

// reconcileJSON runs `herald reconcile --json --config config` and returns
// the result and the report it printed (the zero report when stdout is not
// one: the caller's check on the exit code shows the output).
func reconcileJSON(t *testing.T, config string) (cliResult, reconcile.Report, map[string]any) {
	t.Helper()
	r := runCLI(t, t.TempDir(), "reconcile", "--json", "--config", config)
	var rep reconcile.Report
	var fields map[string]any
	if json.Unmarshal([]byte(r.stdout), &rep) != nil || json.Unmarshal([]byte(r.stdout), &fields) != nil {
		return r, reconcile.Report{}, nil
	}
	return r, rep, fields
}

// wantAccounted runs `herald reconcile --json` on config's database and
// fails the test, printing the report, unless every accepted notification
// is accounted for by the normal path alone: exit 0, unowned 0, and nothing
// found to repair (a repair would hide a row the run had stranded). The
// run counts with graces of a second, not the config's minutes, so a row
// stranded moments before the end is found too: the test has stopped
// herald, or everything it sent has ended, when it calls this.
func wantAccounted(t *testing.T, config string) {
	t.Helper()
	raw, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	tight := filepath.Join(t.TempDir(), "reconcile.yaml")
	writeFile(t, tight, string(raw)+"\nwatchdog_retry_grace: 1s\nwatchdog_published_grace: 1s\nwatchdog_sweep_grace: 1s\n")
	r, rep, fields := reconcileJSON(t, tight)
	found := int64(0)
	for _, n := range rep.Found {
		found += n
	}
	if r.code != 0 || fields == nil || rep.Unowned != 0 || found != 0 || rep.Repaired != 0 {
		t.Fatalf("herald reconcile --json: want exit 0, unowned 0 and nothing found to repair, got\n%s", r)
	}
	t.Logf("herald reconcile: %d accepted, %d planned sends %v, unowned 0, nothing to repair, unknown %d",
		rep.Accepted, rep.PlannedSends, rep.ByState, rep.Unknown)
}

// TestCLIReconcile runs `herald reconcile` on a SQLite database edited to
// hold each kind of finding it repairs, and one it cannot: exit 0 while
// everything is accounted for (after its repairs), 1 and the finding named
// when something is not, 2 for a usage mistake; the report it kept is the
// one GET /v1/ops/reconcile serves.
func TestCLIReconcile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.db")
	cfg := filepath.Join(dir, "herald.yaml")
	addr := freeAddr(t)
	writeFile(t, cfg, `listen: `+addr+`
database: sqlite:`+path+`
api_keys: [{key: k1, tenant: t1}]
operator_keys: [ops-1]
providers: [{name: hook, type: sim, channel: webhook}]
kinds:
  - name: payment.approved
    category: transactional
    channels: [webhook]
    templates: {webhook: {title: "Paid", body: "Paid"}}
`)
	if r := runCLI(t, dir, "reconcile", "extra", "--config", cfg); r.code != 2 || r.stdout != "" ||
		!strings.HasPrefix(r.stderr, "herald: reconcile: unexpected argument \"extra\"\nusage: herald reconcile [--config FILE] [--json]\n") {
		t.Fatalf("herald reconcile extra: want exit 2 and the usage, got\n%s", r)
	}
	if r := runCLI(t, dir, "migrate", "--config", cfg); r.code != 0 {
		t.Fatalf("herald migrate:\n%s", r)
	}

	// An empty database: accounted for, and the report has the fields the
	// README lists, every kind of finding at 0.
	r, rep, fields := reconcileJSON(t, cfg)
	if r.code != 0 || fields == nil || !rep.Accounted() || !strings.HasPrefix(r.stderr, "database sqlite:") {
		t.Fatalf("herald reconcile --json on an empty database: want exit 0, a report on stdout and the database on stderr, got\n%s", r)
	}
	for _, k := range []string{"started_at", "finished_at", "run_by", "accepted", "planned_sends", "by_state", "unowned",
		"unowned_by_kind", "unowned_sample", "found", "repaired", "repaired_by_kind", "unknown", "unknown_sample", "overdue"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("the JSON report has no %q:\n%s", k, r.stdout)
		}
	}
	for _, k := range []string{"accepted", "unowned", "repaired", "unknown"} {
		if _, ok := fields[k].(float64); !ok {
			t.Errorf("%q is not a number:\n%s", k, r.stdout)
		}
	}
	if byKind, _ := fields["unowned_by_kind"].(map[string]any); len(byKind) != len(reconcile.Kinds) {
		t.Errorf("unowned_by_kind %v, want every kind %v", byKind, reconcile.Kinds)
	}

	// Findings it repairs: a notification whose planned send was lost, and
	// a finished (DONE) send without a delivery, long ago.
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	long := time.Now().Add(-time.Hour).UnixMilli()
	notification := func(id, kind string) {
		exec(`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
VALUES (?, 't1', 'r1', ?, ?, 'transactional', '{}', ?)`, id, "evt-"+id, kind, long)
	}
	notification("ntf_lost", "payment.approved")
	notification("ntf_closed", "payment.approved")
	exec(`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at)
VALUES ('ntf_closed', 'ntf_closed.webhook', 't1', 'transactional', 'webhook', 'DONE', ?, ?, ?)`, long, long, long)
	r, rep, _ = reconcileJSON(t, cfg)
	if r.code != 0 || rep.Unowned != 0 || rep.Repaired != 2 || rep.RepairedByKind[reconcile.KindMissingOutbox] != 1 ||
		rep.RepairedByKind[reconcile.KindNoDelivery] != 1 || rep.Accepted != 2 {
		t.Fatalf("herald reconcile --json with a lost planned send and a closed one: want exit 0, both repaired, got\n%s", r)
	}
	var pending int
	if err := db.QueryRow(`SELECT count(*) FROM outbox WHERE state = 'PENDING' AND notification_id IN ('ntf_lost', 'ntf_closed')`).Scan(&pending); err != nil || pending != 2 {
		t.Fatalf("after the repairs %d of the two sends are PENDING (%v), want both: the claimers will send them", pending, err)
	}

	// A finding it cannot repair: a notification of a kind no longer
	// configured, with no planned send.
	notification("ntf_retired", "campaign.retired")
	r, rep, _ = reconcileJSON(t, cfg)
	if r.code != 1 || rep.Unowned != 1 || !slices.Equal(rep.UnownedSample[reconcile.KindMissingOutbox], []string{"ntf_retired"}) ||
		!strings.Contains(r.stderr, "alert=UNACCOUNTED message_id=ntf_retired") ||
		!strings.HasSuffix(r.stderr, "herald: 1 planned sends are unaccounted for (see unowned in the report)\n") {
		t.Fatalf("herald reconcile --json with an unrepairable finding: want exit 1, it named and alerted, got\n%s", r)
	}
	text := runCLI(t, dir, "reconcile", "--config", cfg)
	if text.code != 1 || !strings.HasPrefix(text.stdout, "database sqlite:") ||
		!strings.Contains(text.stdout, "unowned      1 (missing_outbox 1: ntf_retired)") || !strings.Contains(text.stdout, "1 unaccounted for") {
		t.Fatalf("herald reconcile (text): want exit 1 and the finding named, got\n%s", text)
	}

	// The server shows the last kept run, the command line's, to the
	// operator, and runs none of its own within reconcile_interval.
	srv := newServer(t, cfg, addr)
	srv.start()
	req, err := http.NewRequest(http.MethodGet, "http://"+srv.addr+"/v1/ops/reconcile", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer ops-1")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var served reconcile.Report
	err = json.NewDecoder(resp.Body).Decode(&served)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(served.RunBy, "cli ") || served.Unowned != 1 {
		t.Fatalf("GET /v1/ops/reconcile: %d %+v (%v), want the command line's last report", resp.StatusCode, served, err)
	}
	if code := srv.stop(30 * time.Second); code != 0 {
		t.Fatalf("SIGTERM exit code %d:\n%s", code, srv.tail())
	}
}
