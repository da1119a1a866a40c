package e2e

// The CLI commands the README documents, run as a user runs them: `herald
// version`, `herald migrate` on SQLite and PostgreSQL, `herald parked
// list|requeue` on the db transport, and what bad usage answers.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// TestCLIInstall: `go install ./cmd/herald` from a clone, as the README
// says, installs a herald whose `herald version` names the build: the
// module's version, which Go stamps from the checkout (a pseudo-version
// until the repository has a release tag), not "dev".
func TestCLIInstall(t *testing.T) {
	t.Parallel()
	skipShort(t, "go install builds herald once more")
	gobin := t.TempDir()
	install := exec.Command("go", "install", "./cmd/herald")
	install.Dir = ".."
	// -buildvcs=auto is go's default; the machine's GOFLAGS may turn it off.
	install.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-buildvcs=auto")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/herald: %v\n%s", err, out)
	}
	r, err := execCLI(filepath.Join(gobin, "herald"), t.TempDir(), "version")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^herald v\d+\.\d+\.\d+\S*\n$`)
	if exec.Command("git", "-C", "..", "rev-parse", "HEAD").Run() != nil {
		want = regexp.MustCompile(`^herald dev\n$`) // not a checkout: nothing to stamp
	}
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Fatalf("installed herald version: want exit 0 and %s, got\n%s", want, r)
	}
}

// TestCLIHelp: help is asked for, so it goes to stdout with exit 0; each
// command's help lists its own flags and no other's.
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args          []string
		want, notWant []string
	}{
		{[]string{"help"}, []string{"usage: herald <command>", "herald serve [--config FILE]", "herald migrate [--config FILE]",
			"herald parked list [--config FILE] [--tenant T] [--limit N]", "herald parked requeue (--all | MESSAGE_ID) [--config FILE] [--tenant T]",
			"herald version", "HERALD_DATABASE"}, nil},
		{[]string{"--help"}, []string{"usage: herald <command>"}, nil},
		{[]string{"-h"}, []string{"usage: herald <command>"}, nil},
		{[]string{"help", "parked"}, []string{"herald parked list [--config FILE] [--tenant T] [--limit N]"}, []string{"herald serve"}},
		{[]string{"parked", "--help"}, []string{"herald parked requeue (--all | MESSAGE_ID)"}, []string{"herald serve"}},
		{[]string{"serve", "--help"}, []string{"usage: herald serve [--config FILE]", "--config FILE"}, []string{"--tenant"}},
		{[]string{"parked", "list", "-h"}, []string{"usage: herald parked list", "--config FILE", "--tenant T", "--limit N"}, []string{"--all"}},
		{[]string{"help", "parked", "requeue"}, []string{"usage: herald parked requeue", "--all", "--tenant T"}, []string{"--limit"}},
	} {
		t.Run(strings.Join(append([]string{"herald"}, tc.args...), " "), func(t *testing.T) {
			r := runCLI(t, dir, tc.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("want exit 0 and help on stdout only, got\n%s", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("the help does not say %q:\n%s", w, r.stdout)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(r.stdout, w) {
					t.Errorf("the help says %q, which is not this command's:\n%s", w, r.stdout)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "herald.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("asking for help created a database (stat: %v)", err)
	}
}

// TestCLIBadUsage: every mistake on the command line exits 2, writes
// nothing to stdout, says what was wrong on one first line "herald: …" of
// stderr and then, for a usage mistake, how the command is used. None of
// them opens, let alone creates, the database.
func TestCLIBadUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "herald.yaml")
	writeFile(t, cfg, "database: sqlite:"+filepath.Join(dir, "herald.db")+"\n")
	for _, tc := range []struct {
		args []string
		// first is a regexp the first line of stderr must match.
		first string
		// usage is how the second line of stderr starts ("" when the
		// mistake is not one of usage: then stderr is one line).
		usage string
	}{
		{[]string{}, `^herald: no command given$`, "usage: herald <command>"},
		{[]string{"bogus"}, `^herald: unknown command "bogus"$`, "usage: herald <command>"},
		{[]string{"serve", "extra"}, `^herald: serve: unexpected argument "extra"$`, "usage: herald serve [--config FILE]"},
		{[]string{"serve", "--config"}, `^herald: serve: flag needs an argument: --config$`, "usage: herald serve"},
		{[]string{"migrate", "extra", "--config", cfg}, `^herald: migrate: unexpected argument "extra"$`, "usage: herald migrate [--config FILE]"},
		{[]string{"migrate", "--bogus"}, `^herald: migrate: flag provided but not defined: --bogus$`, "usage: herald migrate"},
		{[]string{"migrate", "--config", filepath.Join(dir, "missing.yaml")}, `^herald: .*missing\.yaml.*no such file`, ""},
		{[]string{"parked"}, `^herald: parked: no subcommand given$`, "usage:"},
		{[]string{"parked", "bogus"}, `^herald: parked: unknown subcommand "bogus"$`, "usage:"},
		{[]string{"parked", "list", "extra", "--config", cfg}, `^herald: parked list: unexpected argument "extra"$`,
			"usage: herald parked list [--config FILE] [--tenant T] [--limit N]"},
		{[]string{"parked", "list", "--all", "--config", cfg}, `^herald: parked list: flag provided but not defined: --all$`, "usage: herald parked list"},
		{[]string{"parked", "list", "--limit", "x", "--config", cfg}, `^herald: parked list: invalid value "x" for flag --limit`, "usage: herald parked list"},
		{[]string{"parked", "list", "--limit", "0", "--config", cfg}, `^herald: parked list: --limit must be at least 1, not 0$`, "usage: herald parked list"},
		{[]string{"parked", "requeue", "--config", cfg}, `^herald: parked requeue: give either --all or one MESSAGE_ID$`, "usage: herald parked requeue (--all | MESSAGE_ID)"},
		{[]string{"parked", "requeue", "--all", "ntf_1.sms", "--config", cfg}, `^herald: parked requeue: give either --all or one MESSAGE_ID$`, "usage: herald parked requeue"},
		{[]string{"parked", "requeue", "ntf_1.sms", "ntf_2.sms", "--config", cfg}, `^herald: parked requeue: give either --all or one MESSAGE_ID$`, "usage: herald parked requeue"},
		{[]string{"version", "extra"}, `^herald: version: unexpected argument "extra"$`, "usage: herald version"},
		{[]string{"help", "bogus"}, `^herald: help: unknown command "bogus"$`, "usage: herald help"},
	} {
		name := strings.ReplaceAll(strings.Join(append([]string{"herald"}, tc.args...), " "), dir+string(filepath.Separator), "")
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, dir, tc.args...)
			first, rest, _ := strings.Cut(r.stderr, "\n")
			if r.code != 2 || r.stdout != "" || !regexp.MustCompile(tc.first).MatchString(first) {
				t.Fatalf("want exit 2, empty stdout and a first stderr line matching %s; got\n%s", tc.first, r)
			}
			if tc.usage == "" && rest != "" || tc.usage != "" && !strings.HasPrefix(rest, tc.usage) {
				t.Fatalf("after the first line, want the usage starting %q (none when empty); got\n%s", tc.usage, r)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "herald.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a mistake on the command line created the database (stat: %v)", err)
	}
}

// TestCLIReadingCommandsCreateNoDatabase: `herald parked list|requeue` run
// where there is no database (no --config, another directory) say so and
// create none; on a file without herald's schema they say to migrate; on a
// migrated one they say which database they opened. Before, they created
// ./herald.db, migrated it and answered "0 parked".
func TestCLIReadingCommandsCreateNoDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.db")
	readers := [][]string{{"parked", "list"}, {"parked", "requeue", "--all"}, {"parked", "requeue", "ntf_1.sms"}}
	for _, args := range readers {
		r := runCLI(t, dir, args...)
		want := regexp.MustCompile(`^herald: database sqlite:\./herald\.db \(` + regexp.QuoteMeta(path) + `\) does not exist: create it with herald migrate, or name yours with --config FILE or HERALD_DATABASE\n$`)
		if r.code != 1 || r.stdout != "" || !want.MatchString(r.stderr) {
			t.Errorf("herald %s with no database: want exit 1 and one line matching %s, got\n%s", strings.Join(args, " "), want, r)
		}
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Fatalf("herald %s with no database left %v in its directory (%v)", strings.Join(args, " "), entries, err)
		}
	}

	// A file that is not a herald database (here: empty) is not migrated
	// behind the user's back either.
	writeFile(t, path, "")
	for _, args := range readers {
		r := runCLI(t, dir, args...)
		want := regexp.MustCompile(`^herald: open database sqlite:\./herald\.db \(.*\): no herald schema in \./herald\.db: run herald migrate\n$`)
		if r.code != 1 || r.stdout != "" || !want.MatchString(r.stderr) {
			t.Errorf("herald %s on an empty file: want exit 1 and one line matching %s, got\n%s", strings.Join(args, " "), want, r)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}

	if r := runCLI(t, dir, "migrate"); r.code != 0 {
		t.Fatalf("herald migrate:\n%s", r)
	}
	opened := fmt.Sprintf("database sqlite:./herald.db (%s), transport db\n", path)
	if r := runCLI(t, dir, "parked", "list"); r.code != 0 || !strings.HasPrefix(r.stdout, opened) || !strings.HasSuffix(r.stdout, "\n0 parked\n") {
		t.Errorf("herald parked list on a migrated database: want exit 0, first line %q and \"0 parked\", got\n%s", opened, r)
	}
	if r := runCLI(t, dir, "parked", "requeue", "--all"); r.code != 0 || r.stdout != opened+"requeued 0\n" {
		t.Errorf("herald parked requeue --all on a migrated database: want exit 0 and %q, got\n%s", opened+"requeued 0\n", r)
	}
	if r := runCLI(t, dir, "parked", "requeue", "ntf_1.sms"); r.code != 1 || r.stdout != opened || r.stderr != "herald: ntf_1.sms is not parked\n" {
		t.Errorf("herald parked requeue of a message that is not parked: want exit 1, %q and \"herald: ntf_1.sms is not parked\", got\n%s", opened, r)
	}
}

// TestCLIMigrateSQLite: two `herald migrate --config FILE` at once create
// the schema in a new SQLite file, a third run changes nothing, and `serve`
// then runs on that database. (Two at once used to fail about one time in
// twenty with SQLITE_BUSY.)
func TestCLIMigrateSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "herald.db")
	runMigrateThriceThenServe(t, dir, "sqlite:"+path, latestMigration(t, "sqlite"), func() (tables []string, version int) {
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
// URL the README shows (sslmode, pool_max_conns; search_path and
// application_name, which it names), and the first two runs at once (the
// README: migrations are "serialised by an advisory lock, so several
// processes may start at once"). `herald migrate` used to refuse
// pool_max_conns.
func TestCLIMigratePostgres(t *testing.T) {
	t.Parallel()
	dbURL, readmeURL := readmePostgres(t)
	runMigrateThriceThenServe(t, t.TempDir(), readmeURL, latestMigration(t, "postgres"), func() (tables []string, version int) {
		var list string
		if err := pgQuery(dbURL, `SELECT coalesce(string_agg(table_name::text, ',' ORDER BY table_name), '') FROM information_schema.tables
WHERE table_schema = 'herald' AND table_type = 'BASE TABLE'`, nil, &list); err != nil {
			t.Fatalf("list tables: %v", err)
		}
		if err := pgQuery(dbURL, `SELECT max(version)::int FROM herald.schema_migrations`, nil, &version); err != nil {
			t.Fatalf("read schema_migrations: %v", err)
		}
		return strings.Split(list, ","), version
	})
}

// readmePostgres creates a fresh database with a schema "herald" and
// returns its plain URL and a URL with the parameters of the README's
// example: sslmode and pool_max_conns (and pool_min_conns, another pool_*
// one), search_path (the schema herald works in) and application_name.
// sslmode=prefer stands for the README's verify-full: the test server need
// not have a certificate.
func readmePostgres(t *testing.T) (dbURL, readmeURL string) {
	t.Helper()
	dbURL = testpg.Database(t)
	testpg.Exec(t, dbURL, "CREATE SCHEMA herald")
	return dbURL, testpg.WithParams(dbURL, "sslmode", "prefer", "pool_max_conns", "16", "pool_min_conns", "1",
		"search_path", "herald", "application_name", "herald-readme")
}

// TestCLIServeBanner: `herald serve` says where it listens, its version and
// database on lines no one can read as a mode; only a start without a
// configuration says it runs on development defaults. With a production
// config it used to print "herald dev listening on …" ("dev" was the
// version).
func TestCLIServeBanner(t *testing.T) {
	t.Parallel()
	t.Run("NoConfigSaysDevelopmentDefaults", func(t *testing.T) {
		t.Parallel()
		db := "sqlite:" + filepath.Join(t.TempDir(), "herald.db")
		addr := freeAddr(t)
		// --config "" is no configuration; the environment keeps the
		// default ./herald.db out of the source tree.
		srv := newServer(t, "", addr, "HERALD_LISTEN="+addr, "HERALD_DATABASE="+db)
		srv.start()
		if code := srv.stop(60 * time.Second); code != 0 {
			t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
		}
		checkBanner(t, srv, db, true)
	})
	t.Run("ConfigSaysNothingOfDevelopment", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		db := "sqlite:" + filepath.Join(dir, "herald.db")
		addr := freeAddr(t)
		cfg := filepath.Join(dir, "herald.yaml")
		writeFile(t, cfg, fmt.Sprintf("listen: %s\ndatabase: %s\napi_keys: [{key: k, tenant: t}]\n", addr, db))
		srv := newServer(t, cfg, addr)
		srv.start()
		if code := srv.stop(60 * time.Second); code != 0 {
			t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
		}
		checkBanner(t, srv, db, false)
		// This config has no kinds: the banner says so, and what it means.
		if !strings.Contains(srv.logs.String(), "\nkinds: none: every notification is refused (422 unknown kind)") {
			t.Errorf("herald serve with no kinds does not say so:\n%s", srv.logs.String())
		}
	})
}

// checkBanner checks what the stopped server srv printed at start: where it
// listened and its version, its database (as configured, password hidden)
// and transport, and the development defaults if and only if dev.
func checkBanner(t *testing.T, srv *server, database string, dev bool) {
	t.Helper()
	out := srv.logs.String()
	lines := strings.Split(out, "\n")
	listening := regexp.MustCompile(`^herald listening on http://` + regexp.QuoteMeta(srv.addr) + ` \(version \S+\)$`)
	i := slices.IndexFunc(lines, listening.MatchString)
	if i < 0 || i+1 == len(lines) || lines[i+1] != "database "+database+", transport db" {
		t.Fatalf("herald serve's banner: want a line matching %s, then %q; got\n%s", listening, "database "+database+", transport db", out)
	}
	if regexp.MustCompile(`\bdev listening\b`).MatchString(out) {
		t.Errorf("herald serve's banner reads as a dev mode:\n%s", out)
	}
	for _, w := range []string{"no --config: development defaults, simulated providers on every channel", "API key: dev-key (tenant dev)"} {
		if said := slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) }); said != dev {
			t.Errorf("herald serve (development defaults: %v) says %q: %v\n%s", dev, w, said, out)
		}
	}
	// The kinds as loaded, with a config file too.
	want := "kinds: "
	if dev {
		want = "kinds: appointment.reminder (transactional: sms); "
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) }) {
		t.Errorf("herald serve does not list its kinds (want a line starting %q):\n%s", want, out)
	}
}

// herald's tables, on both drivers.
var heraldTables = []string{"deliveries", "delivery_attempts", "idempotency_keys", "notifications", "outbox", "profiles", "schema_migrations"}

// runMigrateThriceThenServe runs `herald migrate` on database three times,
// the first two at once, checks each reports schema version latest and that
// inspect sees herald's tables at that version, then starts `serve` on the
// database, has it send a notification and checks its banner.
func runMigrateThriceThenServe(t *testing.T, dir, database string, latest int, inspect func() ([]string, int)) {
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
	wantOut := fmt.Sprintf("database %s is at schema version %d\n", database, latest)
	results := make([]cliResult, 3)
	bin := heraldBinary(t)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { results[i], errs[i] = execCLI(bin, dir, "migrate", "--config", cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	results[2] = runCLI(t, dir, "migrate", "--config", cfg)
	for i, r := range results {
		if r.code != 0 || r.stdout != wantOut {
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
	checkBanner(t, srv, database, false)
	if _, v := inspect(); v != latest {
		t.Errorf("after serve, schema_migrations is at version %d, want %d", v, latest)
	}
}

const parkedConfig = `listen: $LISTEN
database: $DATABASE
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

// TestCLIParkedListAndRequeue parks messages on the db transport the way it
// happens in production — an application enqueues a kind (package herald,
// in its own transaction) that the running herald's configuration does not
// have yet — then lists them with `herald parked list` (fields, --tenant,
// --limit), fixes the configuration, requeues them with `herald parked
// requeue` (one by id, --all --tenant, --all) and checks each is then sent
// exactly once: on SQLite, and on PostgreSQL with the README's URL.
func TestCLIParkedListAndRequeue(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "herald.db")
		runParkedListAndRequeue(t, "sqlite:"+path, sqliteEnqueue(path))
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		_, readmeURL := readmePostgres(t)
		runParkedListAndRequeue(t, readmeURL, postgresEnqueue(readmeURL))
	})
}

// sqliteEnqueue enqueues into herald's SQLite file at path the way an
// application does: in its own transaction, on a connection opened with
// sqlite.DSN.
func sqliteEnqueue(path string) enqueueFunc {
	return func(t *testing.T, c *herald.Client, in herald.Intent) string {
		t.Helper()
		db, err := sql.Open("sqlite", sqlite.DSN(path))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }() // a no-op after the commit
		e, err := c.EnqueueSQLiteTx(ctx, tx, in)
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		return e.ID
	}
}

// postgresEnqueue enqueues into herald's PostgreSQL database at url the way
// an application does, through a pgxpool (which takes every URL herald
// takes, pool_* parameters included).
func postgresEnqueue(url string) enqueueFunc {
	return func(t *testing.T, c *herald.Client, in herald.Intent) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		e, err := c.Enqueue(ctx, pool, in)
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		return e.ID
	}
}

// runParkedListAndRequeue is TestCLIParkedListAndRequeue on database, into
// which enqueue writes as an application does.
func runParkedListAndRequeue(t *testing.T, database string, enqueue enqueueFunc) {
	sink, sinkURL := newScriptedSink(t, func(sinkCall, int) sinkAnswer { return sinkAnswer{status: http.StatusOK} })
	dir := t.TempDir()
	cfg := filepath.Join(dir, "herald.yaml")
	writeConfig := func(addr string, kinds ...config.Kind) {
		t.Helper()
		c := strings.NewReplacer("$LISTEN", addr, "$DATABASE", database, "$SINK", sinkURL).Replace(parkedConfig)
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
	type parked struct{ id, tenant, key string }
	var all []parked
	for i, tenant := range []string{"t1", "t1", "t2"} {
		id := enqueue(t, app, herald.Intent{
			Tenant: tenant, Recipient: "patient-7", EventID: fmt.Sprintf("visit-%d", i), Kind: followupKind.Name,
			Params: map[string]any{"n": i}, DedupKey: fmt.Sprintf("visit-%d:followup", i),
		})
		all = append(all, parked{id, tenant, map[string]string{"t1": "k1", "t2": "k2"}[tenant]})
	}
	for _, p := range all {
		awaitDeliveries(t, addr, p.key, p.id, map[string]string{"webhook": "PARKED/UNKNOWN_KIND"})
	}

	// list: every tenant, one tenant, a limit.
	opened := "database " + database + ", transport db\n"
	rows := listParked(t, dir, cfg, opened)
	if len(rows) != len(all) {
		t.Fatalf("herald parked list shows %d rows, want %d: %+v", len(rows), len(all), rows)
	}
	for _, p := range all {
		i := slices.IndexFunc(rows, func(r parkedListRow) bool { return r.messageID == p.id+".webhook" })
		if i < 0 {
			t.Fatalf("herald parked list does not show %s.webhook: %+v", p.id, rows)
		}
		r := rows[i]
		at, err := time.Parse(time.RFC3339, r.parkedAt)
		if r.tenant != p.tenant || r.kind != followupKind.Name || r.lane != "transactional" || r.channel != "webhook" || r.reason != "UNKNOWN_KIND" ||
			err != nil || at.Before(started.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
			t.Errorf("herald parked list row %+v, want tenant %s, kind %s, lane transactional, channel webhook, reason UNKNOWN_KIND, parked_at now (RFC 3339)", r, p.tenant, followupKind.Name)
		}
	}
	if rows := listParked(t, dir, cfg, opened, "--tenant", "t2"); len(rows) != 1 || rows[0].messageID != all[2].id+".webhook" {
		t.Errorf("herald parked list --tenant t2: %+v, want only %s.webhook", rows, all[2].id)
	}
	if rows := listParked(t, dir, cfg, opened, "--limit", "2"); len(rows) != 2 {
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
		if r.code != 0 || r.stdout != opened+want+"\n" {
			t.Fatalf("herald parked requeue %v: want exit 0 and %q, got\n%s", args, opened+want+"\n", r)
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
	if r := runCLI(t, dir, "parked", "requeue", all[0].id+".webhook", "--config", cfg); r.code != 1 || r.stderr != "herald: "+all[0].id+".webhook is not parked\n" {
		t.Errorf("requeueing %s.webhook again: want exit 1 and \"is not parked\", got\n%s", all[0].id, r)
	}
	requeue("requeued 1", "--all", "--tenant", "t1")
	sent(all[1])
	if rows := listParked(t, dir, cfg, opened); len(rows) != 1 || rows[0].tenant != "t2" {
		t.Fatalf("after requeueing t1's, herald parked list shows %+v, want only t2's", rows)
	}
	requeue("requeued 1", "--all")
	sent(all[2])
	if rows := listParked(t, dir, cfg, opened); len(rows) != 0 {
		t.Fatalf("after requeueing all, herald parked list shows %+v", rows)
	}
	// Each requeue that moved a message is in the audit log, as the API's
	// are, under the tenant of the messages it moved (the last was given
	// no --tenant); the one that found nothing is not.
	cli := "cli:" + osUser(t)
	wantAudited(t, database, cli+" parked.requeue "+all[0].id+".webhook @t1", cli+" parked.requeue  @t1", cli+" parked.requeue  @t2")
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
