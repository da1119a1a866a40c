package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/store"
)

// keysCommands are the subcommands of herald keys: the operator's side of
// the stored API keys (package apikeys; a tenant's admin key has the same
// through /v1/admin/keys). Each opens the existing database, and writes
// its audit entry as "cli:<os user>".
var keysCommands = []*command{
	{name: "create", args: "--tenant T --name NAME [--scopes send,read,admin] [--expires-in DURATION] [--config FILE]",
		summary: "create an API key and print it (this once: only its hash is kept)", run: keysCreate},
	{name: "list", args: "[--tenant T] [--config FILE]",
		summary: "list API keys (never the keys themselves)", run: keysList},
	{name: "revoke", args: "KEY_ID [--tenant T] [--config FILE]",
		summary: "revoke an API key, at once in every process", run: keysRevoke},
}

func keysCreate(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	tenant := fs.String("tenant", "", "the key's tenant `T` (required)")
	name := fs.String("name", "", "the key's `NAME`, shown in the audit log (required)")
	scopes := fs.String("scopes", "send,read", "what the key may do: a comma-separated `LIST` of send, read, admin")
	expiresIn := fs.Duration("expires-in", 0, "the key expires after `DURATION` (default: never)")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	switch {
	case *tenant == "" && *name == "":
		return usageErrorf(cmd, "%s: --tenant and --name are required", cmd.path())
	case *tenant == "":
		return usageErrorf(cmd, "%s: --tenant is required", cmd.path())
	case *name == "":
		return usageErrorf(cmd, "%s: --name is required", cmd.path())
	case *expiresIn < 0:
		return usageErrorf(cmd, "%s: --expires-in must not be negative", cmd.path())
	}
	if _, err := apikeys.ParseScopes(strings.Split(*scopes, ",")); err != nil {
		return usageErrorf(cmd, "%s: --scopes: %v", cmd.path(), err)
	}
	s, closeSession, err := openSession(*path, false, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	now := time.Now()
	p := apikeys.CreateParams{Tenant: *tenant, Name: *name, Scopes: strings.Split(*scopes, ","), CreatedBy: "cli:" + osUser(), Now: now}
	if *expiresIn > 0 {
		p.ExpiresAt = now.Add(*expiresIn).UTC()
	}
	row, key, err := apikeys.Create(s.ctx, s.store, p)
	switch {
	case errors.Is(err, apikeys.ErrInvalid):
		return usageErrorf(cmd, "%s: %s", cmd.path(), apikeys.InvalidDetail(err))
	case err != nil:
		return fmt.Errorf("create the key: %w", err)
	}
	cliAudit(s.ctx, s.store, s.logger, row.Tenant, audit.KeyCreate, row.ID, map[string]any{"name": row.Name, "scopes": row.Scopes})
	fmt.Fprintf(stdout, "created key %s (tenant %s, scopes %s)\n", row.ID, row.Tenant, strings.Join(row.Scopes, ","))
	fmt.Fprintf(stdout, "%s\n", key)
	fmt.Fprintln(stdout, "the key is shown this once: herald keeps only its hash")
	return nil
}

func keysList(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	tenant := fs.String("tenant", "", "only tenant `T`'s keys (default: every tenant's)")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	s, closeSession, err := openSession(*path, false, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	rows, err := s.store.APIKeyList(s.ctx, *tenant)
	if err != nil {
		return fmt.Errorf("list the keys: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY_ID\tTENANT\tNAME\tSCOPES\tCREATED_AT\tEXPIRES_AT\tREVOKED_AT")
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, k := range rows {
		row(tw, k.ID, k.Tenant, k.Name, strings.Join(k.Scopes, ","), at(k.CreatedAt), at(k.ExpiresAt), at(k.RevokedAt))
	}
	return tw.Flush()
}

func keysRevoke(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	tenant := fs.String("tenant", "", "only if the key is tenant `T`'s")
	pos, err := parse(cmd, fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf(cmd, "%s: give one KEY_ID", cmd.path())
	}
	s, closeSession, err := openSession(*path, false, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	row, revoked, err := s.store.APIKeyRevoke(s.ctx, *tenant, pos[0])
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("no key %s", pos[0])
	case err != nil:
		return fmt.Errorf("revoke the key: %w", err)
	}
	if !revoked { // nothing changed: nothing to audit
		fmt.Fprintf(stdout, "key %s (tenant %s) was already revoked at %s\n", row.ID, row.Tenant, row.RevokedAt.UTC().Format(time.RFC3339))
		return nil
	}
	cliAudit(s.ctx, s.store, s.logger, row.Tenant, audit.KeyRevoke, row.ID, nil)
	fmt.Fprintf(stdout, "revoked key %s (tenant %s) at %s\n", row.ID, row.Tenant, row.RevokedAt.UTC().Format(time.RFC3339))
	return nil
}

// cliAudit writes the audit entry of a CLI action through the audit log's
// own write (audit.Log.Append): the actor is "cli:" and the OS user;
// detail, when not nil, is the entry's figures.
func cliAudit(ctx context.Context, st store.Audit, logger *slog.Logger, tenant, action, target string, detail any) {
	who := "cli:" + osUser()
	(&audit.Log{Store: st, Logger: logger}).Append(ctx, store.AuditEntry{Tenant: tenant, ActorKey: who, ActorName: who,
		Action: action, Target: target}, detail)
}
