// Command herald runs the herald notification service.
//
//	herald serve   [--config FILE]   run API, dispatchers, senders and sweeps
//	herald migrate [--config FILE]   apply database migrations and exit
//	herald parked list|requeue       list or requeue parked messages
//	herald version                   print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = ""

const usage = `usage: herald <command> [flags]

commands:
  serve   [--config FILE]   run herald (API, dispatchers, senders, sweeps)
  migrate [--config FILE]   apply database migrations and exit
  parked  list [--config FILE] [--tenant T]
  parked  requeue (--all | MESSAGE_ID) [--config FILE] [--tenant T]
                            list or requeue parked messages
  version                   print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "migrate":
		return migrate(args[1:], stdout, stderr)
	case "parked":
		return parkedCmd(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "herald", versionString())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "herald: unknown command %q\n%s", args[0], usage)
	return 2
}

func loadConfig(name string, args []string, stderr io.Writer) (*config.Config, bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (default: built-in development config)")
	if err := fs.Parse(args); err != nil {
		return nil, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "herald %s: unexpected argument %q\n", name, fs.Arg(0))
		return nil, false
	}
	cfg, err := config.Load(*path, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", oneLine(err))
		return nil, false
	}
	return cfg, true
}

func serve(args []string, stdout, stderr io.Writer) int {
	cfg, ok := loadConfig("serve", args, stderr)
	if !ok {
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	a, err := app.New(ctx, cfg, app.Options{Logger: logger})
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", oneLine(err))
		return 1
	}
	addr, err := a.Listen()
	if err != nil {
		a.Close()
		fmt.Fprintf(stderr, "herald: %v\n", oneLine(err))
		return 1
	}
	fmt.Fprintf(stdout, "herald %s listening on http://%s\n", versionString(), addr)
	fmt.Fprintf(stdout, "database %s, transport %s\n", redact(cfg.Database), cfg.Transport)
	if cfg.Dev {
		fmt.Fprintf(stdout, "no --config: development defaults, simulated providers on every channel\n")
		fmt.Fprintf(stdout, "API key: %s (tenant %s)\n", config.DevAPIKey, config.DevTenant)
		names := make([]string, 0, len(cfg.Kinds))
		for _, k := range cfg.Kinds {
			names = append(names, fmt.Sprintf("%s (%s: %s)", k.Name, k.Category, strings.Join(k.Channels, ", ")))
		}
		sort.Strings(names)
		fmt.Fprintf(stdout, "kinds: %s\n", strings.Join(names, "; "))
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", oneLine(err))
		return 1
	}
	return 0
}

func migrate(args []string, stdout, stderr io.Writer) int {
	cfg, ok := loadConfig("migrate", args, stderr)
	if !ok {
		return 2
	}
	driver, dsn, err := cfg.DatabaseDriver()
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 2
	}
	ctx := context.Background()
	var v int
	switch driver {
	case "sqlite":
		v, err = sqlite.Migrate(ctx, dsn)
	case "postgres":
		v, err = postgres.Migrate(ctx, dsn)
	default:
		err = errors.New("database driver " + driver + " is not available in this build")
	}
	if err != nil {
		fmt.Fprintf(stderr, "herald: migrate: %v\n", oneLine(err))
		return 1
	}
	fmt.Fprintf(stdout, "database %s is at schema version %d\n", redact(cfg.Database), v)
	return 0
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// redact hides a password in a database URL. A sqlite: path is shown as
// written (url would percent-encode it).
func redact(dsn string) string {
	if !strings.HasPrefix(dsn, "postgres") {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable database URL)"
	}
	return u.Redacted()
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
