package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/settle"
	"github.com/heraldhq/herald/store"
)

// unknownCommands are the subcommands of herald unknown: what a person
// does about an UNKNOWN delivery that no report or look-up will settle
// (package settle, "A person's word").
var unknownCommands = []*command{
	{name: "list", args: "[--config FILE] [--tenant T] [--provider P] [--limit N]",
		summary: "list UNKNOWN deliveries, by provider and message id, those a look-up left for a person included", run: unknownList},
	{name: "settle", args: "MESSAGE_ID --as delivered|failed [--config FILE] [--tenant T]",
		summary: "record how an UNKNOWN delivery ended, as a person found out (audited)", run: unknownSettle},
}

// unknownList prints the UNKNOWN deliveries a person may settle: every
// tenant's and provider's, or --tenant's and --provider's, at most
// --limit, by provider and message id, with each one's reason (a
// LOOKUP_… reason: a status look-up could not settle it) and when it last
// changed (it became UNKNOWN, or a look-up marked it).
func unknownList(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	tenant := fs.String("tenant", "", "only tenant `T`'s deliveries")
	prov := fs.String("provider", "", "only provider `P`'s deliveries (its configured name)")
	limit := fs.Int("limit", 100, "list at most `N`")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 10000 {
		return usageErrorf(cmd, "%s: --limit must be 1..10000, not %d", cmd.path(), *limit)
	}
	s, closeSession, err := openSession(*path, false, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	if *prov != "" && !slices.ContainsFunc(s.cfg.Providers, func(p config.Provider) bool { return p.Name == *prov }) {
		// Listed all the same: a provider since removed from the config
		// may have left UNKNOWNs.
		fmt.Fprintf(stderr, "herald: note: no provider %q is configured; listing its deliveries all the same\n", *prov)
	}
	// One more than asked says whether there are more.
	entries, err := s.store.DeliveryUnknownList(s.ctx, store.UnknownListParams{Tenant: *tenant, Provider: *prov, Limit: *limit + 1})
	if err != nil {
		return err
	}
	more := len(entries) > *limit
	entries = entries[:min(len(entries), *limit)]
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE_ID\tTENANT\tPROVIDER\tCHANNEL\tREASON\tATTEMPTS\tUPDATED_AT")
	for _, e := range entries {
		row(tw, e.MessageID, e.Tenant, dash(e.Provider), string(e.Channel), dash(e.Reason), strconv.Itoa(e.Attempts),
			e.Since.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case more:
		fmt.Fprintf(stdout, "%d unknown shown; there are more (raise --limit, or narrow with --tenant or --provider)\n", len(entries))
	default:
		fmt.Fprintf(stdout, "%d unknown\n", len(entries))
	}
	return nil
}

// unknownSettle moves one UNKNOWN delivery to DELIVERED(SETTLED_DELIVERED)
// or PERMANENT_FAILURE(SETTLED_FAILED), as POST
// /v1/deliveries/{message_id}/settle does for a tenant's admin, and writes
// the audit entry under the delivery's tenant, so that the tenant's admin
// sees it. --tenant makes sure the message is that tenant's. Exit status
// 0 when it moved the delivery or found it settled so already (then it
// records nothing), 1 when there is no such delivery, it is not UNKNOWN
// (the message names its state) or the store failed, 2 for a usage
// mistake.
func unknownSettle(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	as := fs.String("as", "", "`RESULT`: what the delivery came to, delivered or failed (required)")
	tenant := fs.String("tenant", "", "only if the message is `TENANT`'s")
	pos, err := parse(cmd, fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf(cmd, "%s: give one MESSAGE_ID", cmd.path())
	}
	result := settle.Result(*as)
	if _, _, ok := result.Moves(); !ok {
		return usageErrorf(cmd, "%s: --as is delivered or failed, not %q", cmd.path(), *as)
	}
	s, closeSession, err := openSession(*path, false, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	out, err := settle.ByPerson(s.ctx, s.store, *tenant, pos[0], result)
	switch {
	case errors.Is(err, store.ErrNotFound) && *tenant != "":
		return fmt.Errorf("%s: no delivery of tenant %s has that message id", pos[0], *tenant)
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%s: no delivery has that message id", pos[0])
	case errors.Is(err, settle.ErrNotUnknown):
		return fmt.Errorf("%s: only an UNKNOWN delivery is settled by a person; this one is %s", pos[0], out.From)
	case err != nil:
		return fmt.Errorf("settle %s: %w", pos[0], err)
	}
	state, reason, _ := result.Moves()
	if !out.Moved {
		fmt.Fprintf(stdout, "%s: already %s(%s) (tenant %s)\n", pos[0], state, reason, out.Tenant)
		return nil
	}
	cliAudit(s.ctx, s.store, s.logger, out.Tenant, audit.DeliverySettle, pos[0], map[string]int{string(result): 1})
	fmt.Fprintf(stdout, "%s: %s(%s), was UNKNOWN (tenant %s)\n", pos[0], state, reason, out.Tenant)
	return nil
}
