package main

import (
	"io"

	"github.com/heraldhq/herald/recount"
)

// inboxCommands are the subcommands of herald inbox.
var inboxCommands = []*command{
	{name: "recount", args: "[--config FILE] [--tenant T] [--recipient R] [--json]",
		summary: "recompute the unread counters from the inbox items and repair those that drifted", run: inboxRecount},
}

// inboxRecount recomputes the unread counters (package recount) of every
// tenant, one tenant (--tenant) or one recipient (--tenant and
// --recipient) on the configured database, as POST /v1/ops/inbox/recount
// does, and prints what it found: for a person, or with --json the JSON
// that route answers (then the database line goes to stderr). Exit status
// 0 when it ran (whether or not it repaired anything), 1 when it failed,
// 2 for a usage mistake.
func inboxRecount(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	tenant := fs.String("tenant", "", "recount only `TENANT`'s counters")
	recipient := fs.String("recipient", "", "recount only `RECIPIENT`'s counter (with --tenant)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	if *recipient != "" && *tenant == "" {
		return usageErrorf(cmd, "%s: --recipient needs --tenant", cmd.path())
	}
	s, closeSession, err := openSession(*path, *asJSON, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	rep, err := recount.Run(s.ctx, s.store, recount.Params{Tenant: *tenant, Recipient: *recipient}, nil, s.logger)
	if err != nil {
		return err
	}
	return printReport(stdout, rep, *asJSON)
}
