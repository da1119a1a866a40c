package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// openExisting opens cfg's database for a command that reads or mends rows:
// it creates nothing and migrates nothing, and says so when there is no
// database or no herald schema in it.
func openExisting(ctx context.Context, cfg *config.Config, logger *slog.Logger) (store.Store, error) {
	driver, dsn, err := cfg.DatabaseDriver()
	if err != nil {
		return nil, &cliError{code: 2, err: err}
	}
	var st store.Store
	switch driver {
	case "sqlite":
		var s *sqlite.Store
		if s, err = sqlite.Open(ctx, dsn, sqlite.Options{MustExist: true, Logger: logger}); err == nil {
			st = s
		}
	case "postgres":
		var s *postgres.Store
		if s, err = postgres.Open(ctx, dsn, postgres.Options{MustExist: true, Logger: logger}); err == nil {
			st = s
		}
	default:
		err = fmt.Errorf("database driver %q is not available in this build", driver)
	}
	switch label := databaseLabel(cfg.Database); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("database %s does not exist: create it with herald migrate, or name yours with --config FILE or %s",
			label, config.EnvDatabase)
	case err != nil:
		return nil, fmt.Errorf("open database %s: %w", label, err)
	}
	return st, nil
}

// session is what a one-shot command works with: its configuration, the
// existing database opened on it, a logger on stderr at warn level, and a
// context that SIGTERM and SIGINT cancel.
type session struct {
	ctx    context.Context
	cfg    *config.Config
	store  store.Store
	logger *slog.Logger
}

// openSession loads the configuration at path, opens its existing
// database (openExisting) and says which ("database …, transport …") on
// stdout, or on stderr when the command prints JSON (asJSON) so that
// stdout holds only the JSON. close releases the store and the signal
// handlers.
func openSession(path string, asJSON bool, stdout, stderr io.Writer) (s *session, close func(), err error) {
	cfg, err := load(path)
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := openExisting(ctx, cfg, logger)
	if err != nil {
		stop()
		return nil, nil, err
	}
	info := stdout
	if asJSON {
		info = stderr
	}
	fmt.Fprintf(info, "database %s, transport %s\n", databaseLabel(cfg.Database), cfg.Transport)
	return &session{ctx: ctx, cfg: cfg, store: st, logger: logger}, func() { st.Close(); stop() }, nil
}

// report is what a one-shot command prints: for a person, or as JSON.
type report interface {
	WriteText(w io.Writer) error
}

// printReport prints rep on w, as indented JSON with asJSON.
func printReport(w io.Writer, rep report, asJSON bool) error {
	var err error
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(w)
	}
	if err != nil {
		return fmt.Errorf("print the report: %w", err)
	}
	return nil
}
