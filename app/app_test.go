package app_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
)

// testConfig is config.Dev() on database (a fresh SQLite file when it is
// ""), changed by edit, with its defaults filled and validated.
func testConfig(t *testing.T, database string, edit func(*config.Config)) *config.Config {
	t.Helper()
	cfg := config.Dev()
	cfg.Database = database
	if database == "" {
		cfg.Database = "sqlite:" + testsqlite.Path(t)
	}
	if edit != nil {
		edit(cfg)
	}
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	return cfg
}

// driverDatabase is a fresh database for driver: a PostgreSQL schema for
// "postgres", else "" (testConfig's fresh SQLite file).
func driverDatabase(t *testing.T, driver string) string {
	t.Helper()
	if driver == "postgres" {
		return testpg.Schema(t)
	}
	return ""
}

// transportConfig is testConfig for driver, one of "sqlite", "postgres",
// "sqlite+rabbitmq" and "postgres+rabbitmq": a fresh database, and for
// the last two a vhost of its own with the rabbitmq transport; claims
// poll every 20 ms. edit, when set, runs after that.
func transportConfig(t *testing.T, driver string, edit func(*config.Config)) *config.Config {
	t.Helper()
	database, mq := driverDatabase(t, driver), ""
	switch driver {
	case "postgres+rabbitmq":
		database, mq = testpg.Schema(t), testmq.VHost(t)
	case "sqlite+rabbitmq":
		mq = testmq.VHost(t)
	}
	return testConfig(t, database, func(c *config.Config) {
		if mq != "" {
			c.Transport, c.RabbitMQURL = "rabbitmq", mq
		}
		c.PollInterval = config.Duration(20 * time.Millisecond)
		if edit != nil {
			edit(c)
		}
	})
}

// newHerald builds herald on cfg with opts, listening on a port of its own
// (opts' Listener and, when unset, Logger are filled: a quiet one), and
// returns it and its base URL; runHerald runs it.
func newHerald(t *testing.T, cfg *config.Config, opts app.Options) (*app.App, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Listener = l
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a, err := app.New(context.Background(), cfg, opts)
	if err != nil {
		l.Close()
		t.Fatalf("app.New: %v", err)
	}
	return a, "http://" + l.Addr().String()
}

// runHerald runs a until stop (or the test's end).
func runHerald(t *testing.T, a *app.App) (stop func()) {
	t.Helper()
	return testenv.Start(t, func(ctx context.Context) {
		if err := a.Run(ctx); err != nil {
			t.Errorf("herald: %v", err)
		}
	})
}

// loadConfigFile writes text as dir's herald.yaml and loads it, with no
// environment.
func loadConfigFile(t *testing.T, dir, text string) *config.Config {
	t.Helper()
	path := filepath.Join(dir, "herald.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
