// Package testpg gives tests a PostgreSQL to work in: the machine's server
// (HERALD_TEST_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/postgres),
// with a fresh schema or database per test that is dropped when the test ends.
//
// When the server cannot be reached, tests that need it are skipped with a
// one-line reason; with CI=true they fail instead, so a CI job cannot pass by
// skipping everything.
package testpg

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/internal/testenv"
)

// EnvURL names the environment variable that overrides DefaultURL.
const EnvURL = "HERALD_TEST_POSTGRES_URL"

// DefaultURL is the server tests use when EnvURL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var server = &testenv.Service{
	Name: "PostgreSQL", EnvURL: EnvURL, DefaultURL: DefaultURL,
	Probe: func(u string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, u)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		return err
	},
}

// BaseURL returns the server's URL (a postgres:// URL) from EnvURL or DefaultURL.
func BaseURL() string { return server.URL() }

// Require returns BaseURL if the server answers. Otherwise it ends the test:
// t.Skip, or t.Fatal when the environment has CI=true. The server is probed
// once per test binary.
func Require(t testing.TB) string {
	t.Helper()
	return server.Require(t)
}

// Schema creates a fresh, empty schema in the server's database and returns
// a URL whose connections work in it (search_path is set to it as a runtime
// parameter). The schema and everything in it are dropped when the test
// ends; register it before opening stores on it, so they close first.
func Schema(t testing.TB) string {
	t.Helper()
	base := Require(t)
	name := "h_" + testenv.RandomSuffix()
	adminExec(t, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		adminCleanup(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		if dropped.Add(1)%vacuumEvery == 0 && adminCleanup(t, vacuumCatalogs) {
			vacuumed.Add(1)
		}
	})
	return WithParams(base, "search_path", name)
}

// Every schema a test makes and drops leaves its catalog rows dead: about
// a thousand of pg_attribute's, and hundreds of pg_depend's and pg_class's.
// Where autovacuum is off (as on the development machine) they pile up
// for the whole test run, and every later schema's DDL grows dearer: a
// migration took 160 ms after one run of the suite against 97 ms once the
// catalogs were vacuumed. So every vacuumEvery-th schema this process
// drops, it vacuums the catalogs that DDL churns: a fraction of a second.
// It does not shorten them (TRUNCATE false), so it takes no lock that DDL
// waits for. It needs superuser or the database's owner, which the test
// server's user is; otherwise PostgreSQL skips them with a warning.
const (
	vacuumEvery    = 32
	vacuumCatalogs = `VACUUM (TRUNCATE false) pg_catalog.pg_attribute, pg_catalog.pg_depend, pg_catalog.pg_class, pg_catalog.pg_index,
pg_catalog.pg_type, pg_catalog.pg_attrdef, pg_catalog.pg_constraint, pg_catalog.pg_trigger, pg_catalog.pg_sequence,
pg_catalog.pg_proc, pg_catalog.pg_namespace, pg_catalog.pg_statistic`
)

// dropped counts the schemas this process has dropped; vacuumed, the
// times it vacuumed the catalogs.
var dropped, vacuumed atomic.Int64

// Database creates a fresh, empty database and returns its URL, for tests
// that need a whole database (several processes, several schemas). It is
// dropped (with any connections still open to it) when the test ends.
func Database(t testing.TB) string {
	t.Helper()
	base := Require(t)
	name := "herald_test_" + testenv.RandomSuffix()
	adminExec(t, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		adminCleanup(t, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testpg: %s is not a URL: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Exec runs sql (no parameters, several statements allowed) on a short-lived
// connection to rawURL and fails the test on error.
func Exec(t testing.TB, rawURL, sql string) {
	t.Helper()
	if err := execSQL(rawURL, sql); err != nil {
		t.Fatalf("testpg: %s: %v", sql, err)
	}
}

// TerminateBackends ends every server session whose application_name is
// appName (pg_terminate_backend), to simulate a dropped connection. It
// returns how many it ended.
func TerminateBackends(t testing.TB, appName string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		t.Fatalf("testpg: connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, appName).Scan(&n)
	if err != nil {
		t.Fatalf("testpg: terminate %q: %v", appName, err)
	}
	return n
}

// WithParams returns rawURL with the query parameters kv (name, value, …) set.
func WithParams(rawURL string, kv ...string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("testpg: %v", err))
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func execSQL(rawURL, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// The schemas' and databases' DDL (CREATE, DROP, the catalogs' VACUUM)
// runs on one small pool per test process, on the base URL, rather than on
// a connection of its own each time. A new session costs the server about
// 30 ms of CPU on the 2-core development machine (the fork and its page
// faults, the catalog caches filled again, the exit): two for every
// schema, with the conformance harness's one for each Exec and Query, were
// 869 of store/postgres's 2,367 sessions, about 26 s of the server's CPU in
// a package whose tests are bound by it. The pool is never closed: its
// sessions end with the process. One whose server went away
// (TestPostgresRestart) is pinged and replaced when next taken, as pgxpool
// does for a connection idle over a second.
var admin struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// adminPool returns the process's pool on the server's URL (BaseURL).
func adminPool() (*pgxpool.Pool, error) {
	admin.once.Do(func() {
		cfg, err := pgxpool.ParseConfig(BaseURL())
		if err != nil {
			admin.err = err
			return
		}
		// Enough for the tests a process runs at once (-parallel); one
		// DROP that waits for a lock holds only its own session.
		cfg.MaxConns = 4
		cfg.ConnConfig.RuntimeParams["application_name"] = "testpg"
		admin.pool, admin.err = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	return admin.pool, admin.err
}

// adminSQL runs sql (no parameters; one or more statements, each outside a
// transaction block, as Exec's short-lived connection does) on the pool.
func adminSQL(sql string) error {
	pool, err := adminPool()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// With no arguments pgx sends sql in the simple protocol: several
	// statements, and VACUUM, which no transaction block may hold.
	_, err = pool.Exec(ctx, sql)
	return err
}

func adminExec(t testing.TB, sql string) {
	t.Helper()
	if err := adminSQL(sql); err != nil {
		t.Fatalf("testpg: %s: %v", sql, err)
	}
}

// adminCleanup runs sql as adminSQL does, and reports whether it did; a
// failure fails the test without ending it.
func adminCleanup(t testing.TB, sql string) bool {
	if err := adminSQL(sql); err != nil {
		t.Errorf("testpg: cleanup: %s: %v", sql, err)
		return false
	}
	return true
}
