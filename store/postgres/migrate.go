package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	migrationfile "github.com/heraldhq/herald/store/internal/migration"
)

//go:embed migrations/*.sql
var migrations embed.FS

// baselines holds one file, baseline/NNNN_baseline.sql: the schema
// migrations 1 to NNNN leave, as one script generated from a schema
// migrated step by step (baseline_test.go). An empty schema gets it in one
// transaction in place of those migrations, and then the migrations after
// NNNN one by one: 40 ms against 100 ms for the 34 migrations on the
// development machine, and fewer dead catalog rows, which is most of what
// a fresh test schema costs. TestTheBaselineIsTheMigrationsApplied holds
// it equal to the migrations: a schema migrated step by step and one from
// the baseline must dump alike (pg_dump), rows included. A new migration
// needs no new baseline; regenerate it when the migrations after it grow
// many (the test's comment gives the command).
//
//go:embed baseline/*.sql
var baselines embed.FS

// ErrNotMigrated is what Open with Options.MustExist returns (wrapped) when
// the database lacks herald's schema or has an older one than this build's.
var ErrNotMigrated = errors.New("run herald migrate")

// Migrate applies pending migrations to the database at url (in the first
// schema of its search_path) and returns the schema version. It takes every
// URL Open takes, pool_* parameters included. Processes that migrate at once
// are serialised by an advisory lock; each version is applied once, in its
// own transaction, but for an empty schema's baseline, which applies the
// versions it stands for in one.
func Migrate(ctx context.Context, url string) (version int, err error) {
	cfg, err := connConfig(url)
	if err != nil {
		return 0, err
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "herald migrate"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrate(ctx, conn)
}

// connConfig parses url for one connection the way Open parses it for its
// pool: pgxpool's parser takes the pool_* parameters out, where pgx's own
// would send them to the server as runtime parameters, which it refuses.
func connConfig(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx redacts the password from the URL it quotes.
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	return cfg.ConnConfig, nil
}

// migration is one embedded migration file.
type migration struct {
	version int
	name    string // file name under migrations/
}

func migrationList() ([]migration, error) {
	files, err := migrationfile.List(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	out := make([]migration, len(files))
	for i, f := range files {
		out[i] = migration{version: f.Version, name: f.Name}
	}
	return out, nil
}

// A migration's DDL takes its table's strongest lock, and while it waits
// for it (behind a long transaction that wrote the table), every other
// statement on that table queues behind the migration: intake, claims and
// result writes would stall for as long as that transaction lasts. So a
// migration waits at most lockTimeout for any one lock (lock_timeout: a
// table's or a row's; set after the advisory lock that serialises
// migrators, which still waits without limit); one that gives up, or that
// PostgreSQL ends to break a deadlock, rolls back, lets the queue through,
// and is tried again after retryWait, up to attempts times, before Migrate
// fails naming the wait.
//
// The bound applies from migration boundedFrom on. lock_timeout covers
// every wait of the transaction, so a migration that changes several
// tables takes all its locks first (LOCK TABLE …, as 27 does): a wait can
// then only come before any of its work, and giving up costs nothing.
// Migrations 25 and 26 rewrite tables one after the other for minutes on
// a large database; a late wait would throw that work away and repeat it,
// so they keep waiting without limit, as they were written.
type migrateLimits struct {
	lockTimeout time.Duration
	retryWait   time.Duration
	attempts    int
	boundedFrom int
	// stepwise applies every migration one by one even to an empty schema,
	// never the baseline: how the baseline's test makes the schema it
	// compares the baseline with.
	stepwise bool
	// baselineSQL, when set, stands for the embedded baseline's SQL: how a
	// test makes the server refuse it.
	baselineSQL string
}

var defaultMigrateLimits = migrateLimits{lockTimeout: 5 * time.Second, retryWait: time.Second, attempts: 30, boundedFrom: 27}

func migrate(ctx context.Context, conn *pgx.Conn) (int, error) {
	return migrateWith(ctx, conn, defaultMigrateLimits)
}

func migrateWith(ctx context.Context, conn *pgx.Conn, limits migrateLimits) (int, error) {
	list, err := migrationList()
	if err != nil {
		return 0, err
	}
	db, schema, err := where(ctx, conn)
	if err != nil {
		return 0, err
	}
	key := lockKey("migrate", db, schema)
	applied, err := appliedVersions(ctx, conn)
	if err != nil {
		return 0, err
	}
	if len(applied) == 0 && !limits.stepwise {
		b, err := readBaseline(list)
		if err != nil {
			return 0, err
		}
		if limits.baselineSQL != "" {
			b.body = limits.baselineSQL
		}
		// A server that refuses the baseline's own SQL (one older than the
		// PostgreSQL it was generated on, say) rolled it back whole: the
		// schema gets the migrations one by one, as before there was one.
		// Any other failure (the lock, the connection) is the migration's.
		if err := applyBaseline(ctx, conn, key, list, b); err != nil && !errors.Is(err, errBaselineRefused) {
			return 0, err
		}
		if applied, err = appliedVersions(ctx, conn); err != nil {
			return 0, err
		}
	}
	for _, m := range list {
		// Read before the lock: a version once applied stays applied, so
		// skipping it here is safe, and a schema already migrated (every
		// start) costs one query, not a transaction per migration.
		if applied[m.version] {
			continue
		}
		if err := applyPatiently(ctx, conn, key, m, limits); err != nil {
			return 0, notOwner(err, applied, list[len(list)-1].version)
		}
	}
	var v int
	if err := conn.QueryRow(ctx, qMigrationVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// applyPatiently applies m, trying again while it gives up waiting for a
// lock or loses a deadlock (migrateLimits).
func applyPatiently(ctx context.Context, conn *pgx.Conn, key int64, m migration, limits migrateLimits) error {
	if m.version < limits.boundedFrom {
		return applyMigration(ctx, conn, key, m, 0)
	}
	for attempt := 1; ; attempt++ {
		err := applyMigration(ctx, conn, key, m, limits.lockTimeout)
		if code := sqlState(err); err == nil || (code != pgLockNotAvailable && code != pgDeadlockDetected) {
			return err
		}
		if attempt >= limits.attempts {
			return fmt.Errorf("migration %d (%s) gave up after %d tries, each waiting at most %s for a lock (on a table or a row it changes, "+
				"held by a transaction that did not end; see pg_stat_activity and pg_locks) or ended by a deadlock; nothing of it was applied, "+
				"run herald migrate again: %w", m.version, m.name, attempt, limits.lockTimeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migration %d: %w", m.version, ctx.Err())
		case <-time.After(limits.retryWait):
		}
	}
}

// beginMigration starts a migrating transaction (what names it in errors):
// the advisory lock that serialises migrators, held until tx ends (a second
// process waits here and then finds the versions applied), then
// lock_timeout for the rest of tx unless lockTimeout is 0, and
// schema_migrations made if it is not there.
func beginMigration(ctx context.Context, tx pgx.Tx, key int64, lockTimeout time.Duration, what string) error {
	if _, err := tx.Exec(ctx, qMigrateLock, key); err != nil {
		return fmt.Errorf("%s: lock: %w", what, err)
	}
	if lockTimeout > 0 {
		if _, err := tx.Exec(ctx, qLockTimeout, fmt.Sprint(lockTimeout.Milliseconds())); err != nil {
			return fmt.Errorf("%s: set lock_timeout: %w", what, err)
		}
	}
	if _, err := tx.Exec(ctx, qMigrationsTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	return nil
}

func applyMigration(ctx context.Context, conn *pgx.Conn, key int64, m migration, lockTimeout time.Duration) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := beginMigration(ctx, tx, key, lockTimeout, fmt.Sprintf("migration %d", m.version)); err != nil {
			return err
		}
		var applied bool
		if err := tx.QueryRow(ctx, qMigrationApplied, m.version).Scan(&applied); err != nil {
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
		if applied {
			return nil
		}
		body, err := migrations.ReadFile("migrations/" + m.name)
		if err != nil {
			return err
		}
		// No arguments: pgx sends it as a simple query, several statements.
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, qMigrationRecord, m.version, m.name); err != nil {
			return fmt.Errorf("migration %d: record: %w", m.version, err)
		}
		return nil
	})
}

// appliedVersions returns the versions schema_migrations records, none
// when the table does not exist.
func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, qMigrationsExist).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	applied := map[int]bool{}
	if !exists {
		return applied, nil
	}
	rows, err := conn.Query(ctx, qMigrationVersions)
	if err != nil {
		return nil, fmt.Errorf("read schema versions: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("read schema versions: %w", err)
	}
	for _, v := range versions {
		applied[int(v)] = true
	}
	return applied, nil
}

// errBaselineRefused marks the server's refusal of the baseline's SQL.
var errBaselineRefused = errors.New("the server refused the baseline")

// baseline is the embedded baseline: the schema migrations 1 to version
// leave.
type baseline struct {
	version int
	body    string
}

func readBaseline(list []migration) (baseline, error) {
	files, err := migrationfile.List(baselines, "baseline")
	if err != nil {
		return baseline{}, fmt.Errorf("baseline: %w", err)
	}
	if len(files) != 1 {
		return baseline{}, fmt.Errorf("baseline: %d files in baseline/, want one", len(files))
	}
	f := files[0]
	if f.Version > list[len(list)-1].version {
		return baseline{}, fmt.Errorf("baseline %s is past the last migration, %d", f.Name, list[len(list)-1].version)
	}
	body, err := baselines.ReadFile("baseline/" + f.Name)
	if err != nil {
		return baseline{}, err
	}
	return baseline{version: f.Version, body: string(body)}, nil
}

// applyBaseline gives an empty schema the baseline in one transaction, and
// records the migrations it stands for as applied (each at the one
// time). A schema that has any relation of its own but schema_migrations,
// or any migration recorded, is left to the migrations one by one;
// another process that migrates at once waits for the lock and then finds
// the versions applied.
func applyBaseline(ctx context.Context, conn *pgx.Conn, key int64, list []migration, b baseline) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := beginMigration(ctx, tx, key, 0, "baseline"); err != nil {
			return err
		}
		var empty bool
		if err := tx.QueryRow(ctx, qSchemaEmpty).Scan(&empty); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		if !empty {
			return nil
		}
		// No arguments: pgx sends it as a simple query, several statements.
		if _, err := tx.Exec(ctx, b.body); err != nil {
			if sqlState(err) != "" { // the server's refusal
				return fmt.Errorf("baseline %d: %w: %w", b.version, errBaselineRefused, err)
			}
			return fmt.Errorf("baseline %d: %w", b.version, err)
		}
		var versions []int32
		var names []string
		for _, m := range list {
			if m.version <= b.version {
				versions, names = append(versions, int32(m.version)), append(names, m.name)
			}
		}
		if _, err := tx.Exec(ctx, qMigrationRecordMany, versions, names); err != nil {
			return fmt.Errorf("baseline %d: record: %w", b.version, err)
		}
		return nil
	})
}

// Reading the schema version without creating anything.
const (
	qMigrationsExist = `SELECT EXISTS (SELECT 1 FROM pg_tables
WHERE schemaname = current_schema() AND tablename = 'schema_migrations')`
	qMigrationVersions = `SELECT version FROM schema_migrations`
)

// The baseline's SQL.
const (
	// qSchemaEmpty: no migration recorded, and no relation (table, index,
	// sequence, view) in the current schema but schema_migrations.
	qSchemaEmpty = `SELECT NOT EXISTS (SELECT 1 FROM schema_migrations)
   AND NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = current_schema() AND c.relname NOT IN ('schema_migrations', 'schema_migrations_pkey'))`
	qMigrationRecordMany = `INSERT INTO schema_migrations (version, name) SELECT * FROM unnest($1::integer[], $2::text[])`
)

// warnNewerSchema logs a warning when the database's schema, at version
// v (as checkSchema or migrate read it), is past this build's last
// migration: a newer herald migrated it (a rollback, or this process
// beside newer ones during a deploy). This herald runs on what it knows;
// the operator should know it is behind.
func warnNewerSchema(ctx context.Context, logger *slog.Logger, v int) error {
	list, err := migrationList()
	if err != nil {
		return err
	}
	if latest := list[len(list)-1].version; v > latest && logger != nil {
		logger.LogAttrs(ctx, slog.LevelWarn, "postgres: the database's schema is newer than this herald's: a newer herald migrated it; "+
			"run that version, or this one only while the newer rolls out", slog.Int("schema_version", v), slog.Int("herald_schema_version", latest))
	}
	return nil
}

// checkSchema fails, changing nothing, unless the current schema holds
// herald's schema at this build's version or a later one.
func checkSchema(ctx context.Context, conn *pgx.Conn) (int, error) {
	list, err := migrationList()
	if err != nil {
		return 0, err
	}
	_, schema, err := where(ctx, conn)
	if err != nil {
		return 0, err
	}
	var exists bool
	if err := conn.QueryRow(ctx, qMigrationsExist).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, fmt.Errorf("no herald schema in schema %q: %w", schema, ErrNotMigrated)
	}
	var v int
	if err := conn.QueryRow(ctx, qMigrationVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if want := list[len(list)-1].version; v < want {
		return 0, fmt.Errorf("schema %q is at version %d, this herald needs %d: %w", schema, v, want, ErrNotMigrated)
	}
	return v, nil
}

// notOwner explains a migration the database refused for want of
// privilege (42501): a runtime role without the right to change the
// schema, started on a schema behind this herald. A plain "permission
// denied for schema public" sent operators looking for the wrong fault.
func notOwner(err error, applied map[int]bool, want int) error {
	if sqlState(err) != pgInsufficientPrivilege {
		return err
	}
	at := 0
	for v := range applied {
		at = max(at, v)
	}
	return fmt.Errorf("the schema is at version %d and this herald needs %d, and this database role may not change it: "+
		"run `herald migrate` as the schema's owner first (docs/postgresql.md, \"A role for running, a role for migrating\"): %w", at, want, err)
}
