package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/settle"
	"github.com/heraldhq/herald/store"
)

// unknownCommands are the subcommands of herald unknown: what a person
// does about an UNKNOWN delivery that no report or look-up will settle
// (package settle, "A person's word").
var unknownCommands = []*command{
	{name: "settle", args: "MESSAGE_ID --as delivered|failed [--config FILE] [--tenant T]",
		summary: "record how an UNKNOWN delivery ended, as a person found out (audited)", run: unknownSettle},
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
