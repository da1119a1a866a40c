package main

import (
	"fmt"
	"io"

	"github.com/heraldhq/herald/app"
)

// reconcileCmd runs one reconciliation on the configured database, as the
// leader of `herald serve` runs it every reconcile_interval (package
// reconcile): it counts every accepted notification's planned sends,
// repairs only what cannot have had an external effect, alerts the rest
// (logged on stderr), keeps the report like a scheduled run and prints it:
// for a person, or with --json as the JSON GET /v1/ops/reconcile serves
// (then the database line goes to stderr, so stdout is the report alone).
// Exit status 0 when nothing is unaccounted for (unowned is 0 after the
// repairs), 1 otherwise or when the run fails, 2 for a usage mistake.
func reconcileCmd(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	s, closeSession, err := openSession(*path, *asJSON, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	rec, err := app.Reconciler(s.cfg, s.store, app.ReconcileOptions{RunBy: "cli " + osUser(), Logger: s.logger})
	if err != nil {
		return &cliError{code: 2, err: err}
	}
	rep, err := rec.Run(s.ctx)
	if err != nil {
		return err
	}
	if err := printReport(stdout, rep, *asJSON); err != nil {
		return err
	}
	if !rep.Accounted() {
		return &cliError{code: 1, err: fmt.Errorf("%d planned sends are unaccounted for (see unowned in the report)", rep.Unowned)}
	}
	return nil
}
