package postgres

import (
	"context"
	"errors"
	"github.com/heraldhq/herald/store/storetest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testpg"
)

// readmeParams are the URL parameters the README shows or names (sslmode,
// pool_max_conns, search_path, application_name) and the other pool_*
// parameters pgxpool takes: every one of them Open takes, Migrate takes too.
var readmeParams = []string{
	"sslmode", "prefer", "pool_max_conns", "16", "pool_min_conns", "1", "pool_max_conn_lifetime", "1h",
	"pool_max_conn_idle_time", "30m", "pool_health_check_period", "1m", "application_name", "herald-readme",
}

func TestMigrateTakesEveryURLOpenTakes(t *testing.T) {
	t.Parallel()
	url := testpg.WithParams(testpg.Schema(t), readmeParams...)
	latest := latestVersion(t)
	if v, err := Migrate(context.Background(), url); err != nil || v != latest {
		t.Fatalf("Migrate(README's parameters) = %d, %v; want %d", v, err, latest)
	}
	s := setup(t, url, Options{MustExist: true})
	if got := s.pool.Config().MaxConns; got != 16 {
		t.Errorf("pool_max_conns %d, want 16", got)
	}
}

// TestOpenMustExist: with MustExist, Open neither creates nor migrates a
// schema; it opens one at this build's version.
func TestOpenMustExist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("EmptySchemaIsNotMigrated", func(t *testing.T) {
		t.Parallel()
		url := testpg.WithParams(testpg.Schema(t), readmeParams...)
		s, err := Open(ctx, url, Options{MustExist: true})
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, ErrNotMigrated) {
			t.Fatalf("Open(MustExist) on an empty schema: %v, want ErrNotMigrated", err)
		}
		if n := queryInt(t, url, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`); n != 0 {
			t.Fatalf("Open(MustExist) left %d tables in the empty schema", n)
		}
	})
	t.Run("OlderSchemaIsNotMigrated", func(t *testing.T) {
		t.Parallel()
		url := testpg.Schema(t)
		if _, err := Migrate(ctx, url); err != nil {
			t.Fatal(err)
		}
		testpg.Exec(t, url, `DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)`)
		behind := queryInt(t, url, qMigrationVersion)
		s, err := Open(ctx, url, Options{MustExist: true})
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, ErrNotMigrated) {
			t.Fatalf("Open(MustExist) on a schema one version behind: %v, want ErrNotMigrated", err)
		}
		if v := queryInt(t, url, qMigrationVersion); v != behind {
			t.Fatalf("Open(MustExist) moved the schema to version %d, want it left at %d", v, behind)
		}
	})
	t.Run("MigratedSchemaOpens", func(t *testing.T) {
		t.Parallel()
		url := testpg.Schema(t)
		if _, err := Migrate(ctx, url); err != nil {
			t.Fatal(err)
		}
		if err := setup(t, url, Options{MustExist: true}).Ping(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func latestVersion(t *testing.T) int {
	t.Helper()
	list, err := migrationList()
	if err != nil {
		t.Fatal(err)
	}
	return list[len(list)-1].version
}

// queryInt runs sql, which returns one integer, on a connection to url.
func queryInt(t *testing.T, url, sql string) int {
	t.Helper()
	ctx := context.Background()
	cfg, err := connConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestMigration27StartsTheCampaignCountsFromTheSends: a schema from before
// migration 27, whose campaign counts were counted from the sends when
// read, starts the kept counts from what its sends' rows give, and keeps
// them from there.
func TestMigration27StartsTheCampaignCountsFromTheSends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	s := setup(t, url, Options{})
	c := storetest.MakeCampaignCounts(t, s, time.Now())
	s.Close()
	// Back to the schema before migration 27, its rows kept.
	testpg.Exec(t, url, undoMigration27)
	if _, err := Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	storetest.CheckCampaignCountsMigrated(t, setup(t, url, Options{MustExist: true}), c, time.Now())
}

// undoMigration28 takes a schema back to before migration 28: its campaign
// counts moved by migration 27's row trigger again.
const undoMigration28 = `DROP FUNCTION campaign_count_deliveries CASCADE;
CREATE TRIGGER campaign_count_delivery_update AFTER UPDATE OF state ON deliveries
FOR EACH ROW WHEN (NEW.campaign_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION campaign_count_delivery();
DELETE FROM schema_migrations WHERE version = 28;`

// undoMigration27 takes a schema back to before migration 27 (the campaign
// counts), keeping its rows; the migrations after it undone first.
const undoMigration27 = undoMigration28 + `
DROP TABLE campaign_counts;
DROP FUNCTION campaign_count_delivery, campaign_count_outbox, campaign_of_delivery CASCADE;
ALTER TABLE deliveries DROP COLUMN campaign_id;
ALTER TABLE outbox DROP COLUMN campaign_counted;
DROP FUNCTION campaign_count, campaign_outcome;
DELETE FROM schema_migrations WHERE version = 27;`
