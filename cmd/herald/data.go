package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
)

// dataCommands are the subcommands of herald data.
var dataCommands = []*command{
	{name: "rekey", args: "[--config FILE] [--page N] [--json]",
		summary: "seal every stored address, device token and params with the first personal_data key (after a rotation, or to seal rows stored before keys were set)", run: dataRekey},
}

// rekeyReport is what herald data rekey prints.
type rekeyReport struct {
	Key    string             `json:"key"`
	Fields []seal.FieldReport `json:"fields"`
}

// WriteText prints one line per field and what is left to do.
func (r rekeyReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "sealing with key %s\n", r.Key)
	fmt.Fprintf(&b, "%-28s %9s %9s %9s %7s %10s\n", "field", "scanned", "current", "sealed", "raced", "unreadable")
	unreadable := map[string]int{}
	for _, f := range r.Fields {
		fmt.Fprintf(&b, "%-28s %9d %9d %9d %7d %10d\n", f.Field, f.Scanned, f.Current, f.Sealed, f.Raced, f.Unreadable)
		for id, n := range f.UnreadableKeys {
			unreadable[id] += n
		}
	}
	if len(unreadable) == 0 {
		b.WriteString("every value is sealed with the first key: keys after it may be removed\n")
	} else {
		for id, n := range unreadable {
			if id == "" {
				fmt.Fprintf(&b, "%d values do not open (corrupt)\n", n)
				continue
			}
			fmt.Fprintf(&b, "%d values are sealed with key %q, which the config does not list: add it after the first and run again\n", n, id)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// dataRekey runs seal.Rekey on the configured database (safe while herald
// runs: every swap is compare-and-set, and a stopped run is simply run
// again). Exit status 0 when every value ended sealed with the first key,
// 1 when it failed or some values did not open, 2 for a usage mistake.
func dataRekey(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	path := configFlag(fs)
	page := fs.Int("page", 500, "rows per read and per swap transaction")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	if *page < 1 || *page > 10000 {
		return usageErrorf(cmd, "%s: --page must be 1..10000", cmd.path())
	}
	s, closeSession, err := openSession(*path, *asJSON, stdout, stderr)
	if err != nil {
		return err
	}
	defer closeSession()
	ring, err := app.Keyring(s.cfg)
	if err != nil {
		return err
	}
	if ring == nil {
		return errors.New("personal_data.keys is empty: there is no key to seal with")
	}
	st, ok := s.store.(store.Sealed)
	if !ok {
		return errors.New("this store keeps no sealed fields")
	}
	fields, err := seal.Rekey(s.ctx, st, ring, seal.RekeyOptions{Page: *page})
	rep := rekeyReport{Key: ring.Current(), Fields: fields}
	if perr := printReport(stdout, rep, *asJSON); perr != nil {
		return perr
	}
	if err != nil {
		return fmt.Errorf("rekey stopped (run it again to go on): %w", err)
	}
	for _, f := range fields {
		if f.Unreadable > 0 {
			return errors.New("some values do not open with the configured keys")
		}
	}
	return nil
}
