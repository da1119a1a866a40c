package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/store"
)

// auditCommands are the subcommands of herald audit: the operator's read
// of the audit log (package audit), every tenant's entries and the
// operator's own, which GET /v1/admin/audit (one tenant's) does not show.
var auditCommands = []*command{
	{name: "list", args: "[--tenant T] [--limit N] [--before ID] [--json] [--config FILE]",
		summary: "list audit entries, newest first", run: auditList},
}

func auditList(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	tenant := fs.String("tenant", "", "only tenant `T`'s entries (default: every entry)")
	limit := fs.Int("limit", 100, "list at most `N` entries")
	before := fs.Int64("before", 0, "only entries older than entry `ID` (the next page)")
	asJSON := fs.Bool("json", false, "print the entries as JSON lines")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 10000 || *before < 0 {
		return usageErrorf(cmd, "%s: --limit must be 1..10000 and --before not negative", cmd.path())
	}
	s, closeSession, err := openSession(*path, *asJSON, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	entries, err := s.store.AuditList(s.ctx, store.AuditListParams{Tenant: *tenant, Before: *before, Limit: *limit})
	if err != nil {
		return fmt.Errorf("list the audit log: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, e := range entries {
			if err := enc.Encode(e); err != nil {
				return fmt.Errorf("print the audit log: %w", err)
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAT\tTENANT\tACTOR\tACTION\tTARGET\tREMOTE\tDETAIL")
	for _, e := range entries {
		row(tw, strconv.FormatInt(e.ID, 10), e.At.UTC().Format(time.RFC3339), dash(e.Tenant),
			e.ActorKey+" ("+e.ActorName+")", e.Action, dash(e.Target), dash(e.Remote), e.Detail)
	}
	return tw.Flush()
}
