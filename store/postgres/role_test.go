package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// A runtime role with the grants docs/postgresql.md lists runs herald on a
// schema its owner migrated; on a schema behind this herald it cannot
// migrate, and the error says so and what to do, not only "permission
// denied for schema".
func TestARuntimeRoleOnASchemaBehindSaysToMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := testpg.Schema(t)
	latest, err := Migrate(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(owner)
	if err != nil {
		t.Fatal(err)
	}
	schema := pgx.Identifier{u.Query().Get("search_path")}.Sanitize()
	role := "herald_rt_" + testenv.RandomSuffix()
	quoted := pgx.Identifier{role}.Sanitize()
	testpg.Exec(t, owner, "CREATE ROLE "+quoted+" LOGIN")
	t.Cleanup(func() { testpg.Exec(t, owner, "DROP OWNED BY "+quoted+"; DROP ROLE "+quoted) })
	testpg.Exec(t, owner, strings.NewReplacer("{s}", schema, "{r}", quoted).Replace(`GRANT USAGE ON SCHEMA {s} TO {r};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r};
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {s} TO {r}`))
	u.User = url.User(role)
	runtime := u.String()

	if v, err := Migrate(ctx, runtime); err != nil || v != latest {
		t.Fatalf("the runtime role on a migrated schema: version %d, %v; want %d", v, err, latest)
	}
	testpg.Exec(t, owner, "DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)")
	_, err = Migrate(ctx, runtime)
	if err == nil || !strings.Contains(err.Error(), "run `herald migrate` as the schema's owner") ||
		!strings.Contains(err.Error(), "the schema is at version") || !strings.Contains(err.Error(), "SQLSTATE 42501") {
		t.Fatalf("the runtime role on a schema behind: %v", err)
	}
}
