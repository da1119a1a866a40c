// Command herald runs the herald notification service.
//
//	herald serve   [--config FILE]   run API, dispatchers, senders and sweeps
//	herald migrate [--config FILE]   apply database migrations and exit
//	herald parked list|requeue|discard   list, requeue or discard parked messages
//	herald reconcile [--config FILE] [--json]   run one reconciliation; exit 1 if anything is unaccounted for
//	herald inbox recount [--tenant T] [--recipient R] [--json]   repair the unread counters that drifted
//	herald keys create|list|revoke   create (shown once), list or revoke API keys
//	herald audit list [--tenant T]   the audit log of admin actions, newest first
//	herald campaign send --kind K --recipients FILE.csv   one kind to many recipients, through a running herald's API
//	herald version                   print the version
//
// Every command takes the same configuration and database URLs as serve.
// Commands other than serve and migrate never create a database: they open
// an existing, migrated one and say which. A mistake on the command line is
// one line "herald: …" on stderr, the command's usage, and exit status 2;
// any other failure is one line "herald: …" and exit status 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// version is set at build time with -ldflags "-X main.version=…"; without
// it herald reports the module version or VCS revision Go stamped into the
// binary (see versionFrom).
var version = ""

// commands are herald's commands, in the order the usage lists them.
var commands = []*command{
	{name: "serve", args: "[--config FILE]", summary: "run herald: the API, dispatchers, senders and sweeps", run: serve},
	{name: "migrate", args: "[--config FILE]", summary: "apply the database migrations and exit", run: migrate},
	{name: "parked", summary: "list, requeue or discard parked messages", sub: parkedCommands},
	{name: "unknown", summary: "settle an UNKNOWN delivery as a person found it ended", sub: unknownCommands},
	{name: "reconcile", args: "[--config FILE] [--json]",
		summary: "account for every accepted notification: run one reconciliation, print its report; exit 1 if anything is unaccounted for",
		run:     reconcileCmd},
	{name: "inbox", summary: "look after the recipient inbox", sub: inboxCommands},
	{name: "keys", summary: "create, list or revoke API keys", sub: keysCommands},
	{name: "data", summary: "look after the personal data stored sealed (personal_data.keys)", sub: dataCommands},
	{name: "audit", summary: "read the audit log of admin actions", sub: auditCommands},
	{name: "campaign", summary: "send one kind to many recipients through a running herald (HERALD_URL, HERALD_API_KEY)", sub: campaignCommands},
	{name: "version", summary: "print herald's version", run: printVersion},
	{name: "help", args: "[COMMAND]", summary: "print this help, or a command's", run: help},
}

// root is herald itself: the command whose subcommands are commands.
var root *command

func init() { root = (&command{sub: commands}).link() }

const usageFooter = `Without --config herald runs on its development defaults (database sqlite:./herald.db).
HERALD_DATABASE, HERALD_LISTEN, HERALD_TRANSPORT and HERALD_RABBITMQ_URL override the config.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command args names and returns herald's exit status.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(root, args, stdout, stderr)
	var help *helpRequest
	var cli *cliError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.text())
		return 0
	case errors.As(err, &cli):
		fmt.Fprintf(stderr, "herald: %s\n", oneLine(cli.err))
		if cli.cmd != nil {
			fmt.Fprint(stderr, cli.cmd.usage())
		}
		return cli.code
	}
	fmt.Fprintf(stderr, "herald: %s\n", oneLine(err))
	return 1
}

// dispatch runs the subcommand of parent that args name.
func dispatch(parent *command, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		if parent.name == "" {
			return usageErrorf(parent, "no command given")
		}
		return usageErrorf(parent, "%s: no subcommand given", parent.name)
	}
	c := parent.lookup(args[0])
	switch {
	case c == nil && parent.name == "" && isHelpFlag(args[0]):
		c = parent.lookup("help")
	case c == nil && parent.name == "" && (args[0] == "--version" || args[0] == "-v"):
		c = parent.lookup("version")
	case c == nil && isHelpFlag(args[0]):
		return &helpRequest{cmd: parent}
	case c == nil && parent.name == "":
		return usageErrorf(parent, "unknown command %q", args[0])
	case c == nil:
		return usageErrorf(parent, "%s: unknown subcommand %q", parent.name, args[0])
	}
	if c.sub != nil {
		return dispatch(c, args[1:], stdout, stderr)
	}
	return c.run(c, args[1:], stdout, stderr)
}

func isHelpFlag(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// loadConfig parses the --config flag (the only flag of cmd) and loads the
// configuration it names, or the development defaults, with load (load or
// loadServe).
func loadConfig(cmd *command, args []string, load func(string) (*config.Config, error)) (*config.Config, error) {
	fs := newFlags(cmd)
	path := configFlag(fs)
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return nil, err
	}
	return load(*path)
}

// loadServe loads the configuration at path with every provider's
// credentials, for serve; a bad one is exit status 2.
func loadServe(path string) (*config.Config, error) {
	return configured(config.Load(path, os.Getenv))
}

// load loads the configuration at path for a command that calls no
// provider: their credentials are not read (config.LoadForTools), so the
// operator's shell needs none of them. A bad one is exit status 2.
func load(path string) (*config.Config, error) {
	cfg, err := configured(config.LoadForTools(path, os.Getenv))
	if err == nil && path == "" && os.Getenv("HERALD_DATABASE") != "" {
		// A database named without its config: the kinds, graces and
		// policies are the development defaults, which a reconcile, for
		// one, judges that database's rows by.
		fmt.Fprintf(os.Stderr, "herald: note: no --config: the development defaults (kinds, graces, policies) apply to HERALD_DATABASE, "+
			"with transport %s; pass your config with --config FILE\n", cfg.Transport)
	}
	return cfg, err
}

// configured makes a configuration that did not load exit status 2.
func configured(cfg *config.Config, err error) (*config.Config, error) {
	if err != nil {
		return nil, &cliError{code: 2, err: err}
	}
	return cfg, nil
}

func serve(cmd *command, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(cmd, args, loadServe)
	if err != nil {
		return err
	}
	level, _ := cfg.SlogLevel() // checked by the config's validation
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// Bound first: a port already taken stops serve before the database
	// is opened or migrated.
	l, ml, err := app.Bind(cfg)
	if err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, app.Options{Logger: logger, Listener: l, MetricsListener: ml})
	if err != nil {
		l.Close()
		if ml != nil {
			ml.Close()
		}
		return err
	}
	addr, err := a.Listen()
	if err != nil {
		a.Close()
		return err
	}
	fmt.Fprintf(stdout, "herald listening on http://%s (version %s)\n", addr, versionString())
	fmt.Fprintf(stdout, "database %s, transport %s\n", databaseLabel(cfg.Database), cfg.Transport)
	if cfg.Dev {
		fmt.Fprintf(stdout, "no --config: development defaults, simulated providers on every channel\n")
		fmt.Fprintf(stdout, "API key: %s (tenant %s)\n", config.DevAPIKey, config.DevTenant)
	}
	// The kinds as loaded, with a config file too: a kinds_file that is
	// not the one meant, or a config with none, shows here.
	names := make([]string, 0, len(cfg.Kinds))
	for _, k := range cfg.Kinds {
		names = append(names, fmt.Sprintf("%s (%s: %s)", k.Name, k.Category, strings.Join(k.Channels, ", ")))
	}
	sort.Strings(names)
	if len(names) == 0 {
		fmt.Fprintf(stdout, "kinds: none: every notification is refused (422 unknown kind) until the config lists some (kinds: or kinds_file:)\n")
	} else {
		fmt.Fprintf(stdout, "kinds: %s\n", strings.Join(names, "; "))
	}
	a.WarmUp(ctx)
	return a.Run(ctx)
}

func migrate(cmd *command, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(cmd, args, load)
	if err != nil {
		return err
	}
	driver, dsn, err := cfg.DatabaseDriver()
	if err != nil {
		return &cliError{code: 2, err: err}
	}
	ctx := context.Background()
	var v int
	switch driver {
	case "sqlite":
		v, err = sqlite.Migrate(ctx, dsn)
	case "postgres":
		v, err = postgres.Migrate(ctx, dsn)
	default:
		err = fmt.Errorf("database driver %q is not available in this build", driver)
	}
	if err != nil {
		return fmt.Errorf("migrate database %s: %w", databaseLabel(cfg.Database), err)
	}
	fmt.Fprintf(stdout, "database %s is at schema version %d\n", databaseLabel(cfg.Database), v)
	return nil
}

func printVersion(cmd *command, args []string, stdout, stderr io.Writer) error {
	if err := parseNoArgs(cmd, newFlags(cmd), args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "herald", versionString())
	return nil
}

func help(cmd *command, args []string, stdout, stderr io.Writer) error {
	c := root
	for _, name := range args {
		next := c.lookup(name)
		if next == nil {
			return usageErrorf(cmd, "help: unknown command %q", strings.Join(args, " "))
		}
		c = next
	}
	if c.run != nil && c.sub == nil && c != root {
		// A command's flags are known to the command: ask it.
		return c.run(c, []string{"--help"}, stdout, stderr)
	}
	return &helpRequest{cmd: c}
}

func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return versionFrom(version, bi)
}

// versionFrom is the version herald reports: the one set with -ldflags,
// else the module version Go stamped into the binary (v1.2.0 for go install
// …@v1.2.0, a pseudo-version such as v0.0.0-20261201144919-2169cb619ce2+dirty
// for go build or go install in a clone), else dev-REVISION from the VCS
// stamp, else "dev" (go run, or a build without VCS stamping).
func versionFrom(ldflags string, bi *debug.BuildInfo) string {
	if ldflags != "" {
		return ldflags
	}
	if bi == nil {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "dev"
	}
	v := "dev-" + rev[:min(12, len(rev))]
	if modified == "true" {
		v += "+dirty"
	}
	return v
}

// oneLine joins the lines of err's message (pgx writes one per address it
// tried) into one.
func oneLine(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.ReplaceAll(strings.Join(parts, "; "), ":; ", ": ")
}
