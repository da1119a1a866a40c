package postgres

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/internal/testpg"
)

var updateBaseline = flag.Bool("update-baseline", false,
	"write baseline/NNNN_baseline.sql from a schema migrated step by step to the last migration")

// TestTheBaselineIsTheMigrationsApplied: a schema migrated step by step
// and one that got the baseline (and the migrations after it) dump alike,
// tables, indexes, functions, triggers, storage options and rows, with
// every version recorded; and the second got the baseline (its versions
// recorded by one transaction), not the migrations one by one.
//
// With -update-baseline it writes the baseline from the first schema, at
// the last migration, and asks to be run again:
//
//	go test ./store/postgres -run TestTheBaselineIsTheMigrationsApplied -update-baseline
func TestTheBaselineIsTheMigrationsApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stepwise, fromBaseline := testpg.Schema(t), testpg.Schema(t)
	limits := defaultMigrateLimits
	limits.stepwise = true
	if _, err := migrateWith(ctx, migrateConn(t, stepwise, uniqueName("stepwise")), limits); err != nil {
		t.Fatal(err)
	}
	if *updateBaseline {
		writeBaseline(t, stepwise)
		t.Fatal("wrote the baseline; run the test again without -update-baseline to check it")
	}
	if _, err := Migrate(ctx, fromBaseline); err != nil {
		t.Fatal(err)
	}
	list, err := migrationList()
	if err != nil {
		t.Fatal(err)
	}
	b, err := readBaseline(list)
	if err != nil {
		t.Fatal(err)
	}
	at := fmt.Sprintf(`SELECT count(DISTINCT applied_at) FROM schema_migrations WHERE version <= %d`, b.version)
	if n := queryInt(t, fromBaseline, at); n != 1 {
		t.Fatalf("migrations 1 to %d were recorded at %d times, want 1: the empty schema did not get the baseline", b.version, n)
	}
	if n := queryInt(t, stepwise, at); n < 2 {
		t.Fatalf("the stepwise schema recorded migrations 1 to %d at %d times: it got the baseline", b.version, n)
	}
	versions := `SELECT count(*) FROM schema_migrations`
	if got, want := queryInt(t, fromBaseline, versions), queryInt(t, stepwise, versions); got != want {
		t.Fatalf("%d migrations recorded from the baseline, %d step by step", got, want)
	}
	want, got := dumpSchema(t, stepwise), dumpSchema(t, fromBaseline)
	if !bytes.Equal(got, want) {
		t.Fatalf("the baseline differs from the migrations applied one by one; regenerate it (see the test's comment):\n%s", firstDifference(want, got))
	}
}

// schemaOf returns the search_path schema of a testpg.Schema URL.
func schemaOf(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

// pgDump runs pg_dump on the schema of rawURL with args and returns its
// output, the schema's name written as SCHEMA and pg_dump's per-run
// \restrict lines left out. A machine without pg_dump skips the test, or
// fails it under CI=true.
func pgDump(t *testing.T, rawURL string, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("pg_dump")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pg_dump not found (CI=true): %v", err)
		}
		t.Skipf("pg_dump not found: %v", err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("search_path")
	q.Del("search_path")
	u.RawQuery = q.Encode()
	cmd := exec.Command(bin, append([]string{"--dbname", u.String(), "--schema", schema}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump: %v: %s", err, stderr.String())
	}
	var kept [][]byte
	for _, line := range bytes.SplitAfter(out, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte(`\restrict `)) && !bytes.HasPrefix(line, []byte(`\unrestrict `)) {
			kept = append(kept, line)
		}
	}
	return bytes.ReplaceAll(bytes.Join(kept, nil), []byte(schema), []byte("SCHEMA"))
}

// dumpSchema is everything of a schema but the times schema_migrations
// recorded.
func dumpSchema(t *testing.T, rawURL string) []byte {
	t.Helper()
	return pgDump(t, rawURL, "--column-inserts", "--exclude-table-data", schemaOf(t, rawURL)+".schema_migrations")
}

// writeBaseline writes the schema of rawURL, without schema_migrations (the
// migrator makes and fills it), as baseline/NNNN_baseline.sql.
func writeBaseline(t *testing.T, rawURL string) {
	t.Helper()
	dump := pgDump(t, rawURL, "--no-owner", "--no-privileges", "--column-inserts",
		"--exclude-table", schemaOf(t, rawURL)+".schema_migrations")
	var body strings.Builder
	blank := true
	for _, line := range strings.Split(string(dump), "\n") {
		switch {
		case strings.HasPrefix(line, "--"), strings.HasPrefix(line, "SET "),
			strings.HasPrefix(line, "SELECT pg_catalog.set_config('search_path'"),
			strings.HasPrefix(line, "CREATE SCHEMA SCHEMA;"):
			continue
		case line == "":
			if blank {
				continue
			}
			blank = true
		default:
			blank = false
		}
		body.WriteString(strings.ReplaceAll(line, "SCHEMA.", "") + "\n")
	}
	latest := latestVersion(t)
	old, err := filepath.Glob("baseline/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	header := fmt.Sprintf(`-- The schema migrations 1 to %d leave, for an empty schema in their place
-- (store/postgres/migrate.go). Generated from a schema migrated step by step:
--   go test ./store/postgres -run TestTheBaselineIsTheMigrationsApplied -update-baseline
-- Do not edit it; that test fails when it and the migrations disagree.

`, latest)
	name := filepath.Join("baseline", fmt.Sprintf("%04d_baseline.sql", latest))
	if err := os.WriteFile(name, []byte(header+strings.TrimRight(body.String(), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", name)
}

// firstDifference shows the first line where want and got part, with a
// few lines around it.
func firstDifference(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	from := max(0, i-3)
	excerpt := func(lines []string) string {
		return strings.Join(lines[from:min(len(lines), i+4)], "\n")
	}
	return fmt.Sprintf("line %d, step by step:\n%s\nfrom the baseline:\n%s", i+1, excerpt(w), excerpt(g))
}

// TestARefusedBaselineFallsBackToTheMigrations: when the server refuses the
// baseline's SQL, nothing of it stays, and the empty schema gets the
// migrations one by one.
func TestARefusedBaselineFallsBackToTheMigrations(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	limits := defaultMigrateLimits
	limits.baselineSQL = `CREATE TABLE outbox (id integer); SELECT 1/0;`
	v, err := migrateWith(context.Background(), migrateConn(t, url, uniqueName("refused")), limits)
	if err != nil || v != latestVersion(t) {
		t.Fatalf("migrate with a refused baseline = %d, %v; want %d", v, err, latestVersion(t))
	}
	if n := queryInt(t, url, `SELECT count(DISTINCT applied_at) FROM schema_migrations`); n < 2 {
		t.Fatalf("the migrations were recorded at %d times: not one by one", n)
	}
	setup(t, url, Options{MustExist: true})
}
