package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/parked"
)

// parkedCommands are the subcommands of herald parked. Each opens the
// configured database without creating or migrating it (openParked) and
// works through the transport's parked.Service: the parking queue for
// rabbitmq, the PARKED deliveries for db. The CLI is the operator: it sees
// every tenant's messages and those that name no tenant (shown with tenant
// "-"), unless --tenant or --untenanted narrows it. A new one is an entry
// here and its function below.
var parkedCommands = []*command{
	{name: "list", args: "[--config FILE] [--tenant T] [--limit N] [--untenanted]",
		summary: "list parked messages, oldest first", run: parkedList},
	{name: "requeue", args: "(--all | MESSAGE_ID) [--config FILE] [--tenant T]",
		summary: "requeue parked messages (each keeps its message id)", run: parkedRequeue},
	{name: "discard", args: "MESSAGE_ID --reason TEXT [--config FILE] [--tenant T]",
		summary: "discard a parked message that can never be sent (audited, with the reason)", run: parkedDiscard},
}

// parkedFlags are the flags every parked subcommand takes.
type parkedFlags struct {
	config, tenant *string
}

func newParkedFlags(cmd *command) (*flag.FlagSet, parkedFlags) {
	fs := newFlags(cmd)
	return fs, parkedFlags{
		config: configFlag(fs),
		tenant: fs.String("tenant", "", "only tenant `T`'s messages (default: every tenant's, and those that name none)"),
	}
}

// scope is the operator's scope the flags select.
func (f parkedFlags) scope() parked.Scope { return parked.Operator(*f.tenant) }

func parkedList(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs, f := newParkedFlags(cmd)
	limit := fs.Int("limit", 100, "list at most `N` messages")
	untenanted := fs.Bool("untenanted", false, "only the messages that name no tenant (a body that is not a job)")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	if *limit < 1 {
		return usageErrorf(cmd, "%s: --limit must be at least 1, not %d", cmd.path(), *limit)
	}
	scope := f.scope()
	if *untenanted {
		if *f.tenant != "" {
			return usageErrorf(cmd, "%s: give --tenant or --untenanted, not both", cmd.path())
		}
		scope = parked.Untenanted()
	}
	return withParked(f, stdout, stderr, func(ctx context.Context, svc parked.Service, _ recorder) error {
		entries, err := svc.List(ctx, scope, *limit)
		if err != nil {
			return fmt.Errorf("list parked: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MESSAGE_ID\tTENANT\tKIND\tLANE\tCHANNEL\tREASON\tPARKED_AT")
		for _, e := range entries {
			row(tw, e.MessageID, dash(e.Tenant), dash(e.Kind), dash(string(e.Lane)), dash(string(e.Channel)), e.Reason,
				e.ParkedAt.UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d parked\n", len(entries))
		return nil
	})
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
	return withParked(f, stdout, stderr, func(ctx context.Context, svc parked.Service, record recorder) error {
		done, err := svc.Requeue(ctx, f.scope(), messageID)
		record(audit.ParkedRequeue, messageID, done, "requeued")
		n := done.Total()
		switch {
		case errors.Is(err, parked.ErrNotFound):
			return fmt.Errorf("%s is not parked", messageID)
		case err != nil:
			return fmt.Errorf("requeue: %w (requeued %d before the error)", err, n)
		}
		fmt.Fprintf(stdout, "requeued %d\n", n)
		return nil
	})
}

func parkedDiscard(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs, f := newParkedFlags(cmd)
	reason := fs.String("reason", "", "why it can never be sent, kept in the audit (required, at most 500 characters)")
	pos, err := parse(cmd, fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf(cmd, "%s: give one MESSAGE_ID", cmd.path())
	}
	d := parked.Discard{MessageID: pos[0], Reason: *reason, Actor: "cli:" + osUser()}
	if err := d.Validate(); err != nil {
		detail, _ := strings.CutPrefix(err.Error(), parked.ErrReason.Error()+": ")
		return usageErrorf(cmd, "%s: --reason: %s", cmd.path(), detail)
	}
	return withParked(f, stdout, stderr, func(ctx context.Context, svc parked.Service, record recorder) error {
		done, err := svc.Discard(ctx, f.scope(), d)
		// Recorded even when removing a parked copy failed after it. The
		// reason stays in the discards' record, which erasure can rewrite;
		// the append-only audit log keeps none of a person's words.
		record(audit.ParkedDiscard, d.MessageID, done, "discarded")
		switch {
		case errors.Is(err, parked.ErrNotFound):
			return fmt.Errorf("%s is not parked", d.MessageID)
		case err != nil:
			return fmt.Errorf("discard: %w", err)
		}
		fmt.Fprintf(stdout, "discarded %s\n", d.MessageID)
		return nil
	})
}

// osUser names the person running the CLI for the discard audit: the OS
// user name, or the user id when it has none.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid-" + strconv.Itoa(os.Getuid())
}

// recorder writes the audit entries of a parked action done (cliAudit):
// one for each tenant whose messages it moved, under that tenant, so
// that the tenant's admin sees it too; with figure, the entry's detail is
// that tenant's count under that name.
type recorder func(action, target string, done parked.Done, figure string)

// withParked loads the configuration, opens its existing database and
// prints which ("database …, transport …"), and runs fn with the
// transport's parked-message service and the audit's recorder, within 5
// minutes; it returns the error of whichever failed.
func withParked(f parkedFlags, stdout, stderr io.Writer, fn func(ctx context.Context, svc parked.Service, record recorder) error) error {
	cfg, err := load(*f.config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := openExisting(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Fprintf(stdout, "database %s, transport %s\n", databaseLabel(cfg.Database), cfg.Transport)
	if *f.config == "" && os.Getenv("HERALD_DATABASE") != "" && os.Getenv("HERALD_TRANSPORT") == "" {
		// A deployment's database with the development default's
		// transport, which no one chose.
		fmt.Fprintln(stderr, "herald: note: transport db: parked messages are read from the database alone; "+
			"on a rabbitmq deployment they are in the broker: pass --config FILE (or HERALD_TRANSPORT=rabbitmq)")
	}
	record := func(action, target string, done parked.Done, figure string) {
		for _, tenant := range done.Tenants() {
			var detail any
			if figure != "" {
				detail = map[string]int{figure: done[tenant]}
			}
			cliAudit(ctx, st, logger, tenant, action, target, detail)
		}
	}
	return fn(ctx, app.Parked(cfg, st, logger), record)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
