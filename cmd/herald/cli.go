package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/heraldhq/herald/config"
)

// command is one herald command, or a group of subcommands (sub).
type command struct {
	name    string // as typed after "herald": "serve", "list"
	parent  *command
	args    string // its arguments, for the usage: "[--config FILE]"
	summary string
	run     func(c *command, args []string, stdout, stderr io.Writer) error
	sub     []*command
}

// path is the command as typed after "herald": "parked list".
func (c *command) path() string {
	if c.parent == nil || c.parent.name == "" {
		return c.name
	}
	return c.parent.path() + " " + c.name
}

// lookup returns c's subcommand name, or nil.
func (c *command) lookup(name string) *command {
	for _, s := range c.sub {
		if s.name == name {
			return s
		}
	}
	return nil
}

// link sets the parent of c's subcommands, all the way down.
func (c *command) link() *command {
	for _, s := range c.sub {
		s.parent = c
		s.link()
	}
	return c
}

// usage is how c is used: one line per command it runs, and for the whole
// of herald the summaries and the footer.
func (c *command) usage() string {
	var b strings.Builder
	if c.sub == nil {
		fmt.Fprintf(&b, "usage: herald %s\n", strings.TrimSpace(c.path()+" "+c.args))
		return b.String()
	}
	if c.name == "" {
		b.WriteString("usage: herald <command> [flags]\n\n")
	} else {
		b.WriteString("usage:\n")
	}
	for _, s := range c.sub {
		if s.sub == nil {
			fmt.Fprintf(&b, "  herald %s\n      %s\n", strings.TrimSpace(s.path()+" "+s.args), s.summary)
			continue
		}
		for _, ss := range s.sub {
			fmt.Fprintf(&b, "  herald %s\n      %s\n", strings.TrimSpace(ss.path()+" "+ss.args), ss.summary)
		}
	}
	if c.name == "" {
		b.WriteString("\n" + usageFooter)
	}
	return b.String()
}

// cliError ends herald with status code and one line "herald: err", then
// cmd's usage when cmd is set (a usage mistake).
type cliError struct {
	code int
	err  error
	cmd  *command
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

// usageErrorf is a mistake on cmd's command line: exit status 2.
func usageErrorf(cmd *command, format string, a ...any) error {
	return &cliError{code: 2, err: fmt.Errorf(format, a...), cmd: cmd}
}

// helpRequest asks for cmd's help on stdout (exit status 0); fs, when set,
// holds cmd's flags.
type helpRequest struct {
	cmd *command
	fs  *flag.FlagSet
}

func (h *helpRequest) Error() string { return "help requested" }

func (h *helpRequest) text() string {
	var b strings.Builder
	b.WriteString(h.cmd.usage())
	if h.cmd.summary != "" && h.cmd.sub == nil {
		fmt.Fprintf(&b, "\n%s.\n", strings.ToUpper(h.cmd.summary[:1])+h.cmd.summary[1:])
	}
	if h.fs == nil {
		return b.String()
	}
	type line struct{ flag, usage string }
	var lines []line
	width := 0
	h.fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		l := line{flag: strings.TrimSpace("--" + f.Name + " " + name), usage: usage}
		if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(usage, "default") {
			l.usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		width = max(width, len(l.flag))
		lines = append(lines, l)
	})
	if len(lines) > 0 {
		b.WriteString("\nflags:\n")
	}
	for _, l := range lines {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, l.flag, l.usage)
	}
	return b.String()
}

// newFlags returns an empty flag set for cmd whose errors parse returns
// instead of printing.
func newFlags(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet("herald "+cmd.path(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// configFlag adds --config to fs.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "read the configuration from `FILE` (default: the development defaults)")
}

// parse parses args into fs and returns the positional arguments; flags may
// come before, between or after them, and "--" ends the flags.
func parse(cmd *command, fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return nil, &helpRequest{cmd: cmd, fs: fs}
		case err != nil:
			// The flag package names flags with one dash; herald's usage
			// writes two (both work).
			msg := strings.NewReplacer(": -", ": --", "flag -", "flag --").Replace(err.Error())
			return nil, usageErrorf(cmd, "%s: %s", cmd.path(), msg)
		}
		rest := fs.Args()
		switch {
		case len(rest) == 0:
			return pos, nil
		case len(rest) < len(args) && args[len(args)-len(rest)-1] == "--":
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseNoArgs is parse for a command that takes no positional argument.
func parseNoArgs(cmd *command, fs *flag.FlagSet, args []string) error {
	pos, err := parse(cmd, fs, args)
	if err == nil && len(pos) > 0 {
		err = usageErrorf(cmd, "%s: unexpected argument %q", cmd.path(), pos[0])
	}
	return err
}

// databaseLabel names a configured database for people: a postgres URL
// without its passwords (config.RedactURL: the userinfo's, and
// password= and sslpassword= in the query); a sqlite path as written and, when it is relative,
// the file it resolves to from the working directory.
func databaseLabel(database string) string {
	if path, ok := strings.CutPrefix(database, "sqlite:"); ok {
		abs, err := filepath.Abs(path)
		if err != nil || abs == path {
			return database
		}
		return fmt.Sprintf("%s (%s)", database, abs)
	}
	return config.RedactURL(database)
}

// row writes one line of a table to tw: its columns, each shown (a tab
// in a value would move the columns after it).
func row(tw io.Writer, cols ...string) {
	for i, c := range cols {
		cols[i] = shown(c)
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
}

// shown is s as a table prints it: a control or format character (a tab,
// an escape that starts a terminal sequence, a right-to-left override that
// makes "x\u202egnp.exe" read as "xexe.png") as its \u escape, and a byte
// that is not UTF-8 as its \x escape, so a name or an id in the store
// cannot rewrite what an operator reads.
func shown(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
