package e2e

// The CLI commands the README documents, run as a user runs them: `herald
// version`, `herald migrate` on SQLite and PostgreSQL, `herald parked
// list|requeue` on the db transport, and what bad usage answers.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store/sqlite"
)

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version", "-v"} {
		r := runCLI(t, t.TempDir(), arg)
		if r.code != 0 || r.stderr != "" || !regexp.MustCompile(`^herald \S+\n$`).MatchString(r.stdout) {
			t.Errorf("herald %s: want exit 0 and one line \"herald VERSION\", got\n%s", arg, r)
		}
	}
}

// TestCLIBadUsage: a mistake on the command line exits non-zero, writes
// nothing to stdout, and says what was wrong on the first line of stderr.
func TestCLIBadUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "herald.yaml")
	writeFile(t, cfg, "database: sqlite:"+filepath.Join(dir, "herald.db")+"\n")
	for _, tc := range []struct {
		args []string
		code int
		// first is a regexp the first line of stderr must match. Where
		// herald prints only the usage, with no line naming the mistake,
		// it is "^usage:" (noted in issue 14's report).
		first string
	}{
		{[]string{}, 2, `^usage: herald`},
		{[]string{"bogus"}, 2, `^herald: unknown command "bogus"$`},
		{[]string{"serve", "extra"}, 2, `^herald serve: unexpected argument "extra"$`},
		{[]string{"serve", "--config"}, 2, `^flag needs an argument: -config$`},
		{[]string{"migrate", "extra", "--config", cfg}, 2, `^herald migrate: unexpected argument "extra"$`},
		{[]string{"migrate", "--bogus"}, 2, `^flag provided but not defined: -bogus$`},
		{[]string{"migrate", "--config", filepath.Join(dir, "missing.yaml")}, 2, `^herald: .*missing\.yaml.*no such file`},
		{[]string{"parked"}, 2, `^usage:`},
		{[]string{"parked", "bogus"}, 2, `^usage:`},
		{[]string{"parked", "list", "extra", "--config", cfg}, 2, `^herald parked list: unexpected argument "extra"$`},
		{[]string{"parked", "list", "--limit", "x", "--config", cfg}, 2, `^invalid value "x" for flag -limit`},
		{[]string{"parked", "requeue", "--config", cfg}, 2, `^herald parked requeue: give either --all or one MESSAGE_ID$`},
		{[]string{"parked", "requeue", "--all", "ntf_1.sms", "--config", cfg}, 2, `^herald parked requeue: give either --all or one MESSAGE_ID$`},
		{[]string{"parked", "requeue", "ntf_1.sms", "ntf_2.sms", "--config", cfg}, 2, `^herald parked requeue: give either --all or one MESSAGE_ID$`},
		{[]string{"parked", "requeue", "ntf_1.sms", "--config", cfg}, 1, `^herald: ntf_1\.sms is not parked$`},
	} {
		name := strings.ReplaceAll(strings.Join(append([]string{"herald"}, tc.args...), " "), dir+string(filepath.Separator), "")
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, dir, tc.args...)
			first, _, _ := strings.Cut(r.stderr, "\n")
			if r.code != tc.code || r.stdout != "" || !regexp.MustCompile(tc.first).MatchString(first) {
				t.Errorf("want exit %d, empty stdout and a first stderr line matching %s; got\n%s", tc.code, tc.first, r)
			}
		})
	}
}

// TestCLIMigrateSQLite: `herald migrate --config FILE` creates the schema in
// a new SQLite file, a second run changes nothing, and `serve` then runs on
// that database.
func TestCLIMigrateSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.db")
	// One run after the other: the README promises concurrent migrations on
	// PostgreSQL only (two at once on a new SQLite file can fail with
	// SQLITE_BUSY; see issue 14's report).
	runMigrateThriceThenServe(t, dir, "sqlite:"+path, false, latestMigration(t, "sqlite"), func() (tables []string, version int) {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
		if err != nil {
			t.Fatalf("list tables: %v", err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, name)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&version); err != nil {
			t.Fatalf("read schema_migrations: %v", err)
		}
		return tables, version
	})
}

// TestCLIMigratePostgres: the same on a fresh PostgreSQL database, with the
// first two runs at once (the README: migrations are "serialised by an
// advisory lock, so several processes may start at once").
func TestCLIMigratePostgres(t *testing.T) {
	t.Parallel()
	dbURL := testpg.Database(t)
	runMigrateThriceThenServe(t, t.TempDir(), dbURL, true, latestMigration(t, "postgres"), func() (tables []string, version int) {
		var list string
		if err := pgQuery(dbURL, `SELECT coalesce(string_agg(table_name::text, ',' ORDER BY table_name), '') FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`, nil, &list); err != nil {
			t.Fatalf("list tables: %v", err)
		}
		if err := pgQuery(dbURL, `SELECT max(version)::int FROM schema_migrations`, nil, &version); err != nil {
			t.Fatalf("read schema_migrations: %v", err)
		}
		return strings.Split(list, ","), version
	})
}

// herald's tables, on both drivers.
var heraldTables = []string{"deliveries", "delivery_attempts", "idempotency_keys", "notifications", "outbox", "profiles", "schema_migrations"}

// runMigrateThriceThenServe runs `herald migrate` on database three times
// (the first two at once if together), checks each reports schema version
// latest and that inspect sees herald's tables at that version, then starts
// `serve` on the database and has it send a notification.
func runMigrateThriceThenServe(t *testing.T, dir, database string, together bool, latest int, inspect func() ([]string, int)) {
	t.Helper()
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "herald.yaml")
	writeFile(t, cfg, fmt.Sprintf(`listen: %s
database: %s
api_keys: [{key: k, tenant: t}]
providers: [{name: hook-sim, type: sim, channel: webhook}]
kinds:
  - {name: ping, category: transactional, channels: [webhook], templates: {webhook: {title: "t", body: "b"}}}
poll_interval: 100ms
`, addr, database))
	wantOut := regexp.MustCompile(fmt.Sprintf(`^database \S+ is at schema version %d\n$`, latest))
	results := make([]cliResult, 3)
	if together {
		bin := heraldBinary(t)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); results[i], errs[i] = execCLI(bin, dir, "migrate", "--config", cfg) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	} else {
		results[0] = runCLI(t, dir, "migrate", "--config", cfg)
		results[1] = runCLI(t, dir, "migrate", "--config", cfg)
	}
	results[2] = runCLI(t, dir, "migrate", "--config", cfg)
	for i, r := range results {
		if r.code != 0 || !wantOut.MatchString(r.stdout) {
			t.Fatalf("herald migrate (run %d): want exit 0 and %q, got\n%s", i+1, wantOut, r)
		}
	}
	tables, version := inspect()
	for _, name := range heraldTables {
		if !slices.Contains(tables, name) {
			t.Errorf("after herald migrate, table %s is missing (tables: %v)", name, tables)
		}
	}
	if version != latest {
		t.Errorf("schema_migrations is at version %d, want %d", version, latest)
	}

	srv := newServer(t, cfg, addr)
	srv.start()
	addr = srv.addr // start moves herald if another process took the port
	id := mustAccept(t, addr, "k", "after-migrate", map[string]any{"recipient": "r", "event_id": "e", "kind": "ping"})
	awaitDeliveries(t, addr, "k", id, map[string]string{"webhook": "PROVIDER_ACCEPTED"})
	if code := srv.stop(60 * time.Second); code != 0 {
		t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
	}
	if _, v := inspect(); v != latest {
		t.Errorf("after serve, schema_migrations is at version %d, want %d", v, latest)
	}
}

const parkedConfig = `listen: $LISTEN
database: sqlite:$DB
api_keys: [{key: k1, tenant: t1}, {key: k2, tenant: t2}]
providers: [{name: hook, type: webhook, channel: webhook, url: "$SINK", timeout: 10s}]
poll_interval: 100ms
kinds:
  - {name: ping, category: transactional, channels: [webhook], templates: {webhook: {title: "Ping", body: "Ping {{.n}}"}}}
`

// followupKind is a kind the application knows before herald's
// configuration does.
var followupKind = config.Kind{
	Name: "visit.followup", Category: "transactional", Channels: []string{"webhook"},
	Templates: map[string]config.Template{"webhook": {Title: "Follow-up", Body: "Follow-up {{.n}}"}},
}

// parkedRow is one line of `herald parked list`.
type parkedRow struct{ messageID, tenant, lane, channel, reason, parkedAt string }

// parkedList runs `herald parked list` with args and parses its table.
func parkedList(t *testing.T, dir, cfg string, args ...string) []parkedRow {
	t.Helper()
	r := runCLI(t, dir, append([]string{"parked", "list", "--config", cfg}, args...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) < 2 || !slices.Equal(strings.Fields(lines[0]), []string{"MESSAGE_ID", "TENANT", "LANE", "CHANNEL", "REASON", "PARKED_AT"}) {
		t.Fatalf("herald parked list %v: want exit 0, a header, rows and a count, got\n%s", args, r)
	}
	var rows []parkedRow
	for _, line := range lines[1 : len(lines)-1] {
		f := strings.Fields(line)
		if len(f) != 6 {
			t.Fatalf("herald parked list %v: row %q does not have 6 fields\n%s", args, line, r)
		}
		rows = append(rows, parkedRow{f[0], f[1], f[2], f[3], f[4], f[5]})
	}
	if want := fmt.Sprintf("%d parked", len(rows)); lines[len(lines)-1] != want {
		t.Fatalf("herald parked list %v: last line %q, want %q", args, lines[len(lines)-1], want)
	}
	return rows
}

// TestCLIParkedListAndRequeue parks messages on the db transport the way it
// happens in production — an application enqueues a kind (package herald,
// in its own transaction) that the running herald's configuration does not
// have yet — then lists them with `herald parked list` (fields, --tenant,
// --limit), fixes the configuration, requeues them with `herald parked
// requeue` (one by id, --all --tenant, --all) and checks each is then sent
// exactly once.
func TestCLIParkedListAndRequeue(t *testing.T) {
	t.Parallel()
	sink, sinkURL := newScriptedSink(t, func(sinkCall, int) sinkAnswer { return sinkAnswer{status: http.StatusOK} })
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "herald.db")
	cfg := filepath.Join(dir, "herald.yaml")
	writeConfig := func(addr string, kinds ...config.Kind) {
		t.Helper()
		c := strings.NewReplacer("$LISTEN", addr, "$DB", dbPath, "$SINK", sinkURL).Replace(parkedConfig)
		for _, k := range kinds {
			c += fmt.Sprintf("  - {name: %s, category: %s, channels: [webhook], templates: {webhook: {title: %q, body: %q}}}\n",
				k.Name, k.Category, k.Templates["webhook"].Title, k.Templates["webhook"].Body)
		}
		writeFile(t, cfg, c)
	}
	addr := freeAddr(t)
	writeConfig(addr)
	if r := runCLI(t, dir, "migrate", "--config", cfg); r.code != 0 {
		t.Fatalf("herald migrate:\n%s", r)
	}
	srv := newServer(t, cfg, addr)
	srv.start()
	addr = srv.addr // start moves herald if another process took the port
	started := time.Now()

	app, err := herald.NewClient(herald.Options{Kinds: []config.Kind{followupKind}})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqlite.DSN(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	type parked struct{ id, tenant, key string }
	var all []parked
	for i, tenant := range []string{"t1", "t1", "t2"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		e, err := app.EnqueueSQLiteTx(ctx, tx, herald.Intent{
			Tenant: tenant, Recipient: "patient-7", EventID: fmt.Sprintf("visit-%d", i), Kind: followupKind.Name,
			Params: map[string]any{"n": i}, DedupKey: fmt.Sprintf("visit-%d:followup", i),
		})
		if err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback() // the enqueue failed; the test fails on err below
		}
		cancel()
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		all = append(all, parked{e.ID, tenant, map[string]string{"t1": "k1", "t2": "k2"}[tenant]})
	}
	for _, p := range all {
		awaitDeliveries(t, addr, p.key, p.id, map[string]string{"webhook": "PARKED/UNKNOWN_KIND"})
	}

	// list: every tenant, one tenant, a limit.
	rows := parkedList(t, dir, cfg)
	if len(rows) != len(all) {
		t.Fatalf("herald parked list shows %d rows, want %d: %+v", len(rows), len(all), rows)
	}
	for _, p := range all {
		i := slices.IndexFunc(rows, func(r parkedRow) bool { return r.messageID == p.id+".webhook" })
		if i < 0 {
			t.Fatalf("herald parked list does not show %s.webhook: %+v", p.id, rows)
		}
		r := rows[i]
		at, err := time.Parse(time.RFC3339, r.parkedAt)
		if r.tenant != p.tenant || r.lane != "transactional" || r.channel != "webhook" || r.reason != "UNKNOWN_KIND" ||
			err != nil || at.Before(started.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
			t.Errorf("herald parked list row %+v, want tenant %s, lane transactional, channel webhook, reason UNKNOWN_KIND, parked_at now (RFC 3339)", r, p.tenant)
		}
	}
	if rows := parkedList(t, dir, cfg, "--tenant", "t2"); len(rows) != 1 || rows[0].messageID != all[2].id+".webhook" {
		t.Errorf("herald parked list --tenant t2: %+v, want only %s.webhook", rows, all[2].id)
	}
	if rows := parkedList(t, dir, cfg, "--limit", "2"); len(rows) != 2 {
		t.Errorf("herald parked list --limit 2: %d rows, want 2: %+v", len(rows), rows)
	}

	// Fix the cause: herald's configuration learns the kind.
	if code := srv.stop(60 * time.Second); code != 0 {
		t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
	}
	addr = freeAddr(t)
	writeConfig(addr, followupKind)
	srv = newServer(t, cfg, addr)
	srv.start()
	addr = srv.addr // start moves herald if another process took the port

	requeue := func(want string, args ...string) {
		t.Helper()
		r := runCLI(t, dir, append([]string{"parked", "requeue", "--config", cfg}, args...)...)
		if r.code != 0 || r.stdout != want+"\n" {
			t.Fatalf("herald parked requeue %v: want exit 0 and %q, got\n%s", args, want, r)
		}
	}
	sent := func(p parked) {
		t.Helper()
		d := awaitDeliveries(t, addr, p.key, p.id, map[string]string{"webhook": "PROVIDER_ACCEPTED"})
		if n := sink.count(p.id + ".webhook"); n != 1 {
			t.Fatalf("%s.webhook was sent %d times after its requeue, want once (delivery %+v)", p.id, n, d)
		}
	}
	requeue("requeued 1", all[0].id+".webhook")
	sent(all[0])
	if r := runCLI(t, dir, "parked", "requeue", all[0].id+".webhook", "--config", cfg); r.code != 1 || !strings.Contains(r.stderr, "is not parked") {
		t.Errorf("requeueing %s.webhook again: want exit 1 and \"is not parked\", got\n%s", all[0].id, r)
	}
	requeue("requeued 1", "--all", "--tenant", "t1")
	sent(all[1])
	if rows := parkedList(t, dir, cfg); len(rows) != 1 || rows[0].tenant != "t2" {
		t.Fatalf("after requeueing t1's, herald parked list shows %+v, want only t2's", rows)
	}
	requeue("requeued 1", "--all")
	sent(all[2])
	if rows := parkedList(t, dir, cfg); len(rows) != 0 {
		t.Fatalf("after requeueing all, herald parked list shows %+v", rows)
	}
	// Once herald has exited nothing more can be sent: each message was
	// sent exactly once, and nothing else was.
	if code := srv.stop(60 * time.Second); code != 0 {
		t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
	}
	calls, per := sink.snapshot()
	if len(calls) != len(all) || len(per) != len(all) {
		t.Fatalf("the sink had %d calls for %d message ids, want one for each of %d: %v", len(calls), len(per), len(all), per)
	}
}
