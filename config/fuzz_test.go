package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
)

// namesAKey matches one part of a config error that says where the problem
// is: a key path of the file that starts with a top-level key of Config
// (providers[0].url, kinds[1].templates.sms, rabbitmq.prefix), after the
// line for a decoding error; "unknown key" with its path; the file itself
// when it is not a mapping; or, for bytes that are not YAML, the YAML
// parser's own message.
var namesAKey = func() *regexp.Regexp {
	var keys []string
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		if tag := ct.Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
			keys = append(keys, regexp.QuoteMeta(tag))
		}
	}
	path := `(` + strings.Join(keys, "|") + `)([.\[].*?)?`
	return regexp.MustCompile(`^(` +
		`(line \d+: )?` + path + `: .+` +
		`|line \d+: (unknown|duplicate) key ".*"( \(first at line \d+\))?` +
		`|line \d+: the file must be a mapping of keys to values .+` +
		`|line \d+: a key must be a name, not .+` +
		`|yaml: .+` +
		`)$`)
}()

// FuzzConfig feeds any bytes to the config loader's steps (Parse, then
// WithDefaults and Validate, as Load runs them): it never panics, and every
// error starts with "config: " and names the key it is about (or the line,
// for YAML that does not parse). A config it accepts validates again
// unchanged. Seeds: testdata/fuzz/FuzzConfig.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(base))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := config.Parse(raw)
		if err == nil {
			if err = c.WithDefaults().Validate(); err == nil {
				if err := c.WithDefaults().Validate(); err != nil {
					t.Fatalf("a valid config is refused after WithDefaults again: %v", err)
				}
				return
			}
		}
		msg := err.Error()
		rest, ok := strings.CutPrefix(msg, "config: ")
		if !ok {
			t.Fatalf("error %q does not start with \"config: \"", msg)
		}
		problems := []string{rest}
		if pe, ok := errors.AsType[*config.ParseError](err); ok {
			problems = pe.Problems
		}
		for _, p := range problems {
			if !namesAKey.MatchString(p) {
				t.Fatalf("error %q: %q names no key\ninput:\n%s", msg, p, raw)
			}
		}
	})
}

// namesAKindsKey is namesAKey for a kinds file, whose one key is kinds.
var namesAKindsKey = regexp.MustCompile(`^(` +
	`(line \d+: )?kinds([.\[].*?)?: .+` +
	`|line \d+: (unknown|duplicate) key ".*"( \(first at line \d+\))?` +
	`|line \d+: the file must be a mapping of keys to values .+` +
	`|line \d+: a key must be a name, not .+` +
	`|yaml: .+` +
	`)$`)

// FuzzKindsFile feeds any bytes to LoadKinds as a kinds file: it never
// panics; every error names the file and then the key it is about (or the
// line); and kinds it accepts compile in the catalog, as herald serve and
// herald.NewClient compile them, so the file's check refuses every
// template the catalog would.
func FuzzKindsFile(f *testing.F) {
	f.Add([]byte(kindsText))
	f.Add([]byte("kinds:\n  - {name: a, category: alert, channels: [sms], templates: {sms: {title: \"{{.x}}\", body: \"{{if .y}}{{end}}\"}}}\n"))
	path := filepath.Join(f.TempDir(), "kinds.yaml")
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		kinds, err := config.LoadKinds(path)
		if err == nil {
			if _, err := catalog.New(kinds); err != nil {
				t.Fatalf("LoadKinds accepted kinds the catalog refuses: %v\ninput:\n%s", err, raw)
			}
			return
		}
		msg := err.Error()
		rest, ok := strings.CutPrefix(msg, "config: "+path+": ")
		if !ok {
			t.Fatalf("error %q does not start with \"config: %s: \"", msg, path)
		}
		problems := []string{rest}
		if pe, ok := errors.AsType[*config.ParseError](err); ok {
			problems = pe.Problems
		}
		for _, p := range problems {
			if !namesAKindsKey.MatchString(p) {
				t.Fatalf("error %q: %q names no key\ninput:\n%s", msg, p, raw)
			}
		}
	})
}
