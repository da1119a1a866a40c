package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store/storetest"
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
// counts moved by migration 27's row triggers again. Migration 36, which
// rewrites 28's function and moves the inserts' counts per statement too,
// is undone with it (it is applied again after 28).
const undoMigration28 = `DROP FUNCTION campaign_count_deliveries, campaign_count_deliveries_insert CASCADE;
CREATE TRIGGER campaign_count_delivery_insert AFTER INSERT ON deliveries
FOR EACH ROW WHEN (NEW.campaign_id IS NOT NULL AND NEW.state <> 'SENDING')
EXECUTE FUNCTION campaign_count_delivery();
CREATE TRIGGER campaign_count_delivery_update AFTER UPDATE OF state ON deliveries
FOR EACH ROW WHEN (NEW.campaign_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION campaign_count_delivery();
DELETE FROM schema_migrations WHERE version IN (28, 36);`

// undoMigration27 takes a schema back to before migration 27 (the campaign
// counts), keeping its rows; the migrations after it undone first.
const undoMigration27 = undoMigration28 + `
DROP TABLE campaign_counts;
DROP FUNCTION campaign_count_delivery, campaign_count_outbox, campaign_of_delivery CASCADE;
ALTER TABLE deliveries DROP COLUMN campaign_id;
ALTER TABLE outbox DROP COLUMN campaign_counted;
DROP FUNCTION campaign_count, campaign_outcome;
DELETE FROM schema_migrations WHERE version = 27;`

// undoMigration29 takes a schema back to before migration 29 (drafts'
// deadlines).
const undoMigration29 = `DROP INDEX campaigns_draft;
ALTER TABLE campaigns DROP COLUMN ended_reason, DROP COLUMN draft_expires_at;
DELETE FROM schema_migrations WHERE version = 29;`

// migrateConn opens a connection to url named app (pg_stat_activity's
// application_name), closed at the test's end.
func migrateConn(t *testing.T, url, app string) *pgx.Conn {
	t.Helper()
	cfg, err := connConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// heldCampaigns takes url's schema back to before migration 29, with a
// draft, and returns a transaction that holds a row of campaigns (as a
// long page, or a fan-out batch, would): migration 29 waits for it.
func heldCampaigns(t *testing.T, url string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	id, _ := draftCampaign(t, setup(t, url, Options{}), 1)
	testpg.Exec(t, url, undoMigration29)
	holder, err := migrateConn(t, url, uniqueName("holder")).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Rollback(ctx) })
	if _, err := holder.Exec(ctx, `UPDATE campaigns SET total = total WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	return holder
}

// migrateInBackground runs migrateWith on conn and reports its end. A test
// that ends first (a failure) cancels it and waits for it before conn is
// closed, so the close does not race the migration's use of conn.
func migrateInBackground(t *testing.T, conn *pgx.Conn, limits migrateLimits) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_, err := migrateWith(ctx, conn, limits)
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return done
}

// freeAndMigrated commits holder and fails the test unless the migration
// reporting on done then ends without an error.
func freeAndMigrated(t *testing.T, holder pgx.Tx, done <-chan error) {
	t.Helper()
	if err := holder.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Recv(t, done, "the migration"); err != nil {
		t.Fatalf("migrate once the table is free: %v", err)
	}
}

// waitingForLock waits until the backend named app waits for a lock, the
// same statement for longer than least; it fails the test if done reports
// first.
func waitingForLock(t *testing.T, url, app string, least time.Duration, done <-chan error) {
	t.Helper()
	testenv.WaitFor(t, "the migration waiting for its lock", testenv.Patience, func() bool {
		select {
		case err := <-done:
			t.Fatalf("the migration ended while it should wait for its lock: %v", err)
		default:
		}
		return queryInt(t, url, fmt.Sprintf(`SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s'
AND wait_event_type = 'Lock' AND clock_timestamp() - query_start >= interval '%d milliseconds'`, app, least.Milliseconds())) > 0
	})
}

// TestAMigrationWaitingForALockLetsTheTableBeUsed: a migration whose table
// a long transaction holds (migration 29's ALTER TABLE campaigns, behind a
// transaction that wrote a campaign) gives up each wait after its lock
// timeout and tries again, so statements on the table are not queued
// behind it for as long as that transaction lasts; once the transaction
// ends, the migration is applied. Out of attempts, it fails naming the
// wait and applies nothing.
func TestAMigrationWaitingForALockLetsTheTableBeUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	holder := heldCampaigns(t, url)
	connect := func(app string) *pgx.Conn { return migrateConn(t, url, app) }
	quick := migrateLimits{lockTimeout: 100 * time.Millisecond, retryWait: 20 * time.Millisecond, attempts: 3, boundedFrom: 27}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second) // without a lock timeout it would wait for the holder
	defer cancel()
	if _, err := migrateWith(mctx, connect(uniqueName("migrate")), quick); err == nil || !strings.Contains(err.Error(), "gave up after 3 tries, each waiting at most 100ms for a lock") {
		t.Fatalf("migrate behind the held table, 3 attempts: %v; want it to give up naming the wait", err)
	}
	if n := queryInt(t, url, `SELECT count(*) FROM schema_migrations WHERE version = 29`); n != 0 {
		t.Fatal("migration 29 recorded as applied after giving up")
	}

	quick.attempts = 1 << 20
	app := uniqueName("migrate")
	done := migrateInBackground(t, connect(app), quick)
	waitingForLock(t, url, app, 0, done)
	// Queued behind the migration's lock request now; without a lock
	// timeout it would wait for the holder, which ends only after it.
	rctx, cancelRead := context.WithTimeout(ctx, 5*time.Second)
	defer cancelRead()
	var n int
	if err := connect(uniqueName("reader")).QueryRow(rctx, `SELECT count(*) FROM campaigns`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("a read of campaigns while the migration waits = %d, %v; want it answered, not queued behind the migration", n, err)
	}
	freeAndMigrated(t, holder, done)
	if n := queryInt(t, url, `SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'campaigns' AND column_name = 'ended_reason'`); n != 1 {
		t.Fatal("migration 29's column is missing after the migration")
	}
	// The draft made before it was promised no deadline: it gets a full week from now.
	if n := queryInt(t, url, `SELECT count(*) FROM campaigns WHERE draft_expires_at > now() + interval '167 hours'`); n != 1 {
		t.Fatalf("%d drafts with a week to go after migration 29; want the one made before it", n)
	}
	// A draft an older herald creates beside the migrated schema (it does
	// not write the deadline) gets the default TTL too.
	testpg.Exec(t, url, `INSERT INTO campaigns (id, tenant, kind, lane, channels, steps, params, state, idempotency_key, request_hash, created_at)
VALUES ('cmp_old_build', 't1', 'k', 'marketing', '{webhook}', '{0}', '{}', 'DRAFT', 'cmp_old_build', 'h', now())`)
	if n := queryInt(t, url, `SELECT count(*) FROM campaigns WHERE id = 'cmp_old_build' AND draft_expires_at > now() + interval '167 hours'`); n != 1 {
		t.Fatal("a draft written without its deadline did not get the default TTL")
	}
}

// TestAMigrationLosingADeadlockIsTriedAgain: a migration that PostgreSQL
// ends to break a deadlock (40P01) rolls back and is tried again, as one
// that gave up its lock wait is. The cycle: a transaction holds a row of
// campaigns, migration 29 holds the migrators' advisory lock and waits for
// campaigns, then the transaction asks for that advisory lock. PostgreSQL
// checks a wait for a deadlock once, deadlock_timeout after it began, and
// ends the session whose check finds the cycle. So the migration's check
// comes late enough to find the holder waiting however slow the host (5 s,
// inside its 10 s lock timeout), and the holder's never comes in the test.
func TestAMigrationLosingADeadlockIsTriedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	holder := heldCampaigns(t, url)
	app := uniqueName("migrate")
	conn := migrateConn(t, url, app)
	db, schema, err := where(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET deadlock_timeout = '5s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SET deadlock_timeout = '10min'`); err != nil {
		t.Fatal(err)
	}
	done := migrateInBackground(t, conn, migrateLimits{lockTimeout: 10 * time.Second, retryWait: 20 * time.Millisecond, attempts: 3, boundedFrom: 27})
	waitingForLock(t, url, app, 0, done)
	if _, err := holder.Exec(ctx, qMigrateLock, lockKey("migrate", db, schema)); err != nil {
		t.Fatalf("the holder was the one ended by the deadlock (%v); the test wants the migration to be", err)
	}
	freeAndMigrated(t, holder, done) // tried again after losing the deadlock
	if n := queryInt(t, url, `SELECT count(*) FROM schema_migrations WHERE version = 29`); n != 1 {
		t.Fatal("migration 29 is not applied")
	}
}

// TestMigrationsBeforeTheBoundWaitWithoutLimit: a migration before
// boundedFrom (25 and 26 by default, which rewrite tables for minutes and
// would lose that work to a late wait) sets no lock timeout: behind a held
// table it waits past the bounded ones' timeout, in one attempt, until the
// table is free.
func TestMigrationsBeforeTheBoundWaitWithoutLimit(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	holder := heldCampaigns(t, url)
	app := uniqueName("migrate")
	done := migrateInBackground(t, migrateConn(t, url, app), migrateLimits{lockTimeout: 100 * time.Millisecond,
		retryWait: 20 * time.Millisecond, attempts: 1, boundedFrom: 30})
	waitingForLock(t, url, app, time.Second, done) // ten times the timeout it does not have
	freeAndMigrated(t, holder, done)
}

// A schema a newer herald migrated (past this build's last migration: a
// rollback, or this process beside newer ones during a deploy) is opened,
// migrating or not, with a warning that names both versions; a schema at
// this build's version opens without one.
func TestANewerSchemaIsWarnedOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	open := func(mustExist bool) string {
		t.Helper()
		var logs bytes.Buffer
		s, err := Open(ctx, url, Options{MustExist: mustExist, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return logs.String()
	}
	if logs := open(false); strings.Contains(logs, "newer") {
		t.Fatalf("a schema at this build's version warned: %s", logs)
	}
	latest := queryInt(t, url, qMigrationVersion)
	testpg.Exec(t, url, fmt.Sprintf(`INSERT INTO schema_migrations (version, name) VALUES (%d, 'from a newer herald')`, latest+1))
	for _, mustExist := range []bool{false, true} {
		want := fmt.Sprintf("schema_version=%d herald_schema_version=%d", latest+1, latest)
		if logs := open(mustExist); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "schema is newer than this herald's") ||
			!strings.Contains(logs, want) {
			t.Fatalf("opening (MustExist %v) a schema at version %d: %q; want a warning with %q", mustExist, latest+1, logs, want)
		}
	}
}
