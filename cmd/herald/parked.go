package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/parked"
)

const parkedUsage = `usage:
  herald parked list    [--config FILE] [--tenant T] [--limit N]
  herald parked requeue (--all | MESSAGE_ID) [--config FILE] [--tenant T]
`

// parkedCmd lists or requeues parked messages of the configured transport:
// the parking queue for rabbitmq, PARKED deliveries for db.
func parkedCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "requeue") {
		fmt.Fprint(stderr, parkedUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("parked "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (default: built-in development config)")
	tenant := fs.String("tenant", "", "only this tenant's messages (default: every tenant)")
	limit := fs.Int("limit", 100, "list at most this many")
	all := fs.Bool("all", false, "requeue every parked message")
	// Flags may come before or after the message id.
	var pos []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	messageID := ""
	switch {
	case sub == "list" && len(pos) > 0:
		fmt.Fprintf(stderr, "herald parked list: unexpected argument %q\n%s", pos[0], parkedUsage)
		return 2
	case sub == "requeue" && (len(pos) > 1 || (len(pos) == 1) == *all):
		fmt.Fprintf(stderr, "herald parked requeue: give either --all or one MESSAGE_ID\n%s", parkedUsage)
		return 2
	case sub == "requeue" && len(pos) == 1:
		messageID = pos[0]
	}
	cfg, err := config.Load(*path, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", oneLine(err))
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	svc, closeStore, err := app.OpenParked(ctx, cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", oneLine(err))
		return 1
	}
	defer closeStore()
	if sub == "list" {
		entries, err := svc.List(ctx, *tenant, *limit)
		if err != nil {
			fmt.Fprintf(stderr, "herald: list parked: %v\n", oneLine(err))
			return 1
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MESSAGE_ID\tTENANT\tLANE\tCHANNEL\tREASON\tPARKED_AT")
		for _, e := range entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.MessageID, dash(e.Tenant), dash(string(e.Lane)), dash(string(e.Channel)),
				e.Reason, e.ParkedAt.UTC().Format(time.RFC3339))
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d parked\n", len(entries))
		return 0
	}
	n, err := svc.Requeue(ctx, *tenant, messageID)
	if errors.Is(err, parked.ErrNotFound) {
		fmt.Fprintf(stderr, "herald: %s is not parked\n", messageID)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "herald: requeue: %v (requeued %d before the error)\n", oneLine(err), n)
		return 1
	}
	fmt.Fprintf(stdout, "requeued %d\n", n)
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
