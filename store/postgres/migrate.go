package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies pending migrations to the database at url (in the first
// schema of its search_path) and returns the schema version. Processes that
// migrate at once are serialised by an advisory lock; each version is applied
// once, in its own transaction.
func Migrate(ctx context.Context, url string) (version int, err error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return 0, fmt.Errorf("parse postgres url: %w", err)
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

type migration struct {
	version int
	name    string // file name under migrations/
}

func migrationList() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]migration, 0, len(names))
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a version number", base)
		}
		out = append(out, migration{version: v, name: base})
	}
	return out, nil
}

func migrate(ctx context.Context, conn *pgx.Conn) (int, error) {
	list, err := migrationList()
	if err != nil {
		return 0, err
	}
	db, schema, err := where(ctx, conn)
	if err != nil {
		return 0, err
	}
	key := lockKey("migrate", db, schema)
	for _, m := range list {
		if err := applyMigration(ctx, conn, key, m); err != nil {
			return 0, err
		}
	}
	var v int
	if err := conn.QueryRow(ctx, qMigrationVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

func applyMigration(ctx context.Context, conn *pgx.Conn, key int64, m migration) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Held until this transaction ends; a second process waits here and
		// then finds the version applied.
		if _, err := tx.Exec(ctx, qMigrateLock, key); err != nil {
			return fmt.Errorf("migration %d: lock: %w", m.version, err)
		}
		if _, err := tx.Exec(ctx, qMigrationsTable); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
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
