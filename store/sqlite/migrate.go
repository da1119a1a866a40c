package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	moderncsqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/heraldhq/herald/store/internal/migration"
)

//go:embed migrations/*.sql
var migrations embed.FS

// ErrNotMigrated is what Open with Options.MustExist returns (wrapped) when
// the file lacks herald's schema or has an older one than this build's.
var ErrNotMigrated = errors.New("run herald migrate")

// Migrate applies pending migrations to the database at path (creating the
// file if needed) and returns the schema version. Processes that migrate one
// file at once wait for each other (busy timeout); each version is applied
// once, in its own transaction.
func Migrate(ctx context.Context, path string) (int, error) {
	if err := setWAL(ctx, path, false); err != nil {
		return 0, err
	}
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return 0, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	return migrate(ctx, db)
}

// busyTimeout is how long a connection waits for another's lock (dsn's
// busy_timeout pragma).
const busyTimeout = 10 * time.Second

// setWAL puts the file at path (created unless mustExist) in WAL mode, once,
// before connections with dsn's pragmas open it. On a new file the switch to
// WAL is a write in rollback-journal mode: two processes making it at once
// can deadlock, and SQLite then answers SQLITE_BUSY at once instead of
// calling the busy handler. setWAL retries for as long as the busy timeout
// would have waited. On a file already in WAL mode it changes nothing.
func setWAL(ctx context.Context, path string, mustExist bool) error {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	if mustExist {
		q.Set("mode", "rw")
	}
	db, err := sql.Open("sqlite", fileURI(path, q))
	if err != nil {
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	defer db.Close()
	deadline := time.Now().Add(busyTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		var mode string
		err := db.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
		var e *moderncsqlite.Error
		switch {
		case err == nil && mode != "wal":
			return fmt.Errorf("set WAL mode on sqlite %s: the file stays in %s mode", path, mode)
		case err == nil:
			return nil
		case !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline):
			return fmt.Errorf("set WAL mode on sqlite %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("set WAL mode on sqlite %s: %w", path, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Migrations and the schema version.
const (
	qMigrationsTable  = `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`
	qMigrationsExist  = `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`
	qMigrationApplied = `SELECT count(*) FROM schema_migrations WHERE version = ?`
	qMigrationRecord  = `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`
	qMigrationVersion = `SELECT coalesce(max(version), 0) FROM schema_migrations`
)

// migrate applies the pending migrations on db, which must open its write
// transactions with BEGIN IMMEDIATE (dsn does).
func migrate(ctx context.Context, db *sql.DB) (int, error) {
	list, err := migration.List(migrations, "migrations")
	if err != nil {
		return 0, err
	}
	for _, m := range list {
		if err := applyMigration(ctx, db, m); err != nil {
			return 0, err
		}
	}
	var v int
	if err := db.QueryRowContext(ctx, qMigrationVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// applyMigration applies m unless it is recorded, in one BEGIN IMMEDIATE
// transaction that creates schema_migrations too: the write lock is taken
// (waiting out the busy timeout) before anything is read. Created outside a
// transaction, schema_migrations could fail at once with SQLITE_BUSY when
// another process migrated the new file at the same time.
func applyMigration(ctx context.Context, db *sql.DB, m migration.File) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %d: begin: %w", m.Version, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, qMigrationsTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, qMigrationApplied, m.Version).Scan(&n); err != nil {
		return fmt.Errorf("migration %d: %w", m.Version, err)
	}
	if n > 0 {
		return nil
	}
	body, err := migrations.ReadFile("migrations/" + m.Name)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, string(body)); err != nil {
		return fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, qMigrationRecord, m.Version, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("migration %d: record: %w", m.Version, err)
	}
	return tx.Commit()
}

// warnNewerSchema logs a warning when the schema, at version v (as
// checkSchema or migrate read it), is past this build's last migration: a
// newer herald migrated the file (a rollback). This herald runs on what
// it knows; the operator should know it is behind.
func warnNewerSchema(ctx context.Context, logger *slog.Logger, v int) error {
	list, err := migration.List(migrations, "migrations")
	if err != nil {
		return err
	}
	if latest := list[len(list)-1].Version; v > latest && logger != nil {
		logger.LogAttrs(ctx, slog.LevelWarn, "sqlite: the database's schema is newer than this herald's: a newer herald migrated it; "+
			"run that version", slog.Int("schema_version", v), slog.Int("herald_schema_version", latest))
	}
	return nil
}

// checkSchema fails, changing nothing, unless the file at path holds
// herald's schema at this build's version or a later one.
func checkSchema(ctx context.Context, db *sql.DB, path string) (int, error) {
	list, err := migration.List(migrations, "migrations")
	if err != nil {
		return 0, err
	}
	var n, v int
	if err := db.QueryRowContext(ctx, qMigrationsExist).Scan(&n); err != nil {
		return 0, fmt.Errorf("read schema version of %s: %w", path, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("no herald schema in %s: %w", path, ErrNotMigrated)
	}
	if err := db.QueryRowContext(ctx, qMigrationVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version of %s: %w", path, err)
	}
	if want := list[len(list)-1].Version; v < want {
		return 0, fmt.Errorf("%s is at schema version %d, this herald needs %d: %w", path, v, want, ErrNotMigrated)
	}
	return v, nil
}
