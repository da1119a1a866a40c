package testpg

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestUnreachableServerSkipsOrFails runs TestHelperRequire in a child
// process pointed at a closed port: without CI it skips, with CI=true it fails.
func TestUnreachableServerSkipsOrFails(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, ci string
		wantOK   bool
		want     string
	}{
		{"SkipsLocally", "", true, "--- SKIP: TestHelperRequire"},
		{"FailsInCI", "true", false, "--- FAIL: TestHelperRequire"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperRequire$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTPG_HELPER=1", "CI="+c.ci,
				EnvURL+"=postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the child did not finish within a minute:\n%s", out)
			}
			if (err == nil) != c.wantOK || !strings.Contains(string(out), c.want) {
				t.Fatalf("err %v, output:\n%s", err, out)
			}
			if !strings.Contains(string(out), "PostgreSQL unreachable at postgres://postgres@127.0.0.1:1/") {
				t.Errorf("the reason does not name the server:\n%s", out)
			}
		})
	}
}

func TestHelperRequire(t *testing.T) {
	if os.Getenv("TESTPG_HELPER") != "1" {
		t.Skip("run by TestUnreachableServerSkipsOrFails")
	}
	Require(t)
	t.Log("reached the server")
}

func TestSchemaIsFreshAndDropped(t *testing.T) {
	t.Parallel()
	var schema string
	t.Run("Use", func(t *testing.T) {
		u := Schema(t)
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		schema = parsed.Query().Get("search_path")
		Exec(t, u, "CREATE TABLE x (id int)") // lands in the fresh schema
		if n := count(t, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema); n != 1 {
			t.Fatalf("%d tables in %s, want 1", n, schema)
		}
	})
	if n := count(t, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema); n != 0 {
		t.Fatalf("schema %q still exists after its test", schema)
	}
}

func count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, Require(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDatabaseIsFreshAndDropped(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("Use", func(t *testing.T) {
		u := Database(t)
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		name = strings.TrimPrefix(parsed.Path, "/")
		Exec(t, u, "CREATE TABLE x (id int)")
	})
	if n := count(t, `SELECT count(*) FROM pg_database WHERE datname = $1`, name); n != 0 {
		t.Fatalf("database %q still exists after its test", name)
	}
}

// TestDroppedSchemasVacuumTheCatalogs: after vacuumEvery schemas dropped,
// this process has vacuumed the catalogs, and the server counts a vacuum of
// pg_attribute. Not parallel: no other test of this process drops schemas
// meanwhile.
func TestDroppedSchemasVacuumTheCatalogs(t *testing.T) {
	vacuums := `SELECT pg_stat_get_vacuum_count('pg_catalog.pg_attribute'::regclass)::int`
	before, ours := count(t, vacuums), vacuumed.Load()
	for i := range vacuumEvery {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			Exec(t, Schema(t), "CREATE TABLE x (a int, b text)")
		})
	}
	if got := vacuumed.Load(); got != ours+1 {
		t.Fatalf("%d vacuums of the catalogs after %d schemas dropped, want 1", got-ours, vacuumEvery)
	}
	if after := count(t, vacuums); after <= before {
		t.Fatalf("pg_attribute vacuumed %d times before %d schemas were dropped, %d after", before, vacuumEvery, after)
	}
}

// TestSchemasShareTheProcesssSessions: the DDL of schemas made and dropped
// one after another runs on the process's pool, not on a new session each
// (every session costs the server tens of milliseconds of CPU to start).
func TestSchemasShareTheProcesssSessions(t *testing.T) {
	t.Parallel()
	const n = 8
	Require(t)
	pool, err := adminPool()
	if err != nil {
		t.Fatal(err)
	}
	before := pool.Stat()
	for i := range n {
		t.Run(fmt.Sprint(i), func(t *testing.T) { Schema(t) })
	}
	after := pool.Stat()
	if got := after.AcquireCount() - before.AcquireCount(); got < 2*n {
		t.Fatalf("%d sessions taken from the pool for %d schemas made and dropped, want at least %d", got, n, 2*n)
	}
	// Other tests of this process may make schemas meanwhile: the pool
	// still starts at most its size in sessions.
	if got := after.NewConnsCount() - before.NewConnsCount(); got > int64(after.MaxConns()) {
		t.Fatalf("%d sessions started for %d schemas, want at most the pool's %d", got, n, after.MaxConns())
	}
}
