package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/parked"
)

// parkedCommands are the subcommands of herald parked. Each opens the
// configured database without creating or migrating it (openParked) and
// works through the transport's parked.Service: the parking queue for
// rabbitmq, the PARKED deliveries for db. A new one is an entry here and its
// function below.
var parkedCommands = []*command{
	{name: "list", args: "[--config FILE] [--tenant T] [--limit N]",
		summary: "list parked messages, oldest first", run: parkedList},
	{name: "requeue", args: "(--all | MESSAGE_ID) [--config FILE] [--tenant T]",
		summary: "requeue parked messages (each keeps its message id)", run: parkedRequeue},
}

// parkedFlags are the flags every parked subcommand takes.
type parkedFlags struct {
	config, tenant *string
}

func newParkedFlags(cmd *command) (*flag.FlagSet, parkedFlags) {
	fs := newFlags(cmd)
	return fs, parkedFlags{
		config: configFlag(fs),
		tenant: fs.String("tenant", "", "only tenant `T`'s messages (default: every tenant)"),
	}
}

func parkedList(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs, f := newParkedFlags(cmd)
	limit := fs.Int("limit", 100, "list at most `N` messages")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	if *limit < 1 {
		return usageErrorf(cmd, "%s: --limit must be at least 1, not %d", cmd.path(), *limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	svc, closeStore, err := openParked(ctx, f, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	entries, err := svc.List(ctx, *f.tenant, *limit)
	if err != nil {
		return fmt.Errorf("list parked: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE_ID\tTENANT\tLANE\tCHANNEL\tREASON\tPARKED_AT")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.MessageID, dash(e.Tenant), dash(string(e.Lane)), dash(string(e.Channel)),
			e.Reason, e.ParkedAt.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d parked\n", len(entries))
	return nil
}

func parkedRequeue(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs, f := newParkedFlags(cmd)
	all := fs.Bool("all", false, "requeue every parked message (of --tenant, if given)")
	pos, err := parse(cmd, fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 || (len(pos) == 1) == *all {
		return usageErrorf(cmd, "%s: give either --all or one MESSAGE_ID", cmd.path())
	}
	messageID := ""
	if len(pos) == 1 {
		messageID = pos[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	svc, closeStore, err := openParked(ctx, f, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	n, err := svc.Requeue(ctx, *f.tenant, messageID)
	switch {
	case errors.Is(err, parked.ErrNotFound):
		return fmt.Errorf("%s is not parked", messageID)
	case err != nil:
		return fmt.Errorf("requeue: %w (requeued %d before the error)", err, n)
	}
	fmt.Fprintf(stdout, "requeued %d\n", n)
	return nil
}

// openParked loads the configuration, opens its existing database and
// prints which ("database …, transport …"), and returns the transport's
// parked-message service and what closes it.
func openParked(ctx context.Context, f parkedFlags, stdout, stderr io.Writer) (parked.Service, func() error, error) {
	cfg, err := load(*f.config)
	if err != nil {
		return nil, nil, err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := openExisting(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(stdout, "database %s, transport %s\n", databaseLabel(cfg.Database), cfg.Transport)
	return app.Parked(cfg, st, logger), st.Close, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
