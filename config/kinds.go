package config

import (
	"errors"
	"fmt"
	"github.com/heraldhq/herald/validate"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/locale"
)

// kindsDoc is what a kinds file holds: the config file's kinds key on its
// own, so a list can move between the two files unchanged.
type kindsDoc struct {
	Kinds []Kind `yaml:"kinds"`
}

// LoadKinds reads a kinds file: a YAML document whose one key, kinds, holds
// the list the config file's kinds key would. It is decoded as strictly and
// checked as the config file's kinds are (ValidateKinds, with no providers
// to check the channels against), and an error names the file and the key:
// "config: kinds.yaml: kinds[1].category: …". herald serve reads the file
// named by kinds_file; an application enqueueing with the Go library reads
// the same file (herald.Options.KindsFile), so both know the same kinds.
func LoadKinds(path string) ([]Kind, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: read kinds file: %w", err)
	}
	var doc kindsDoc
	if err := decodeStrict(raw, &doc, "kinds"); err != nil {
		if pe, ok := errors.AsType[*ParseError](err); ok {
			pe.File = path
		}
		return nil, err
	}
	if len(doc.Kinds) == 0 {
		return nil, fmt.Errorf("config: %s: kinds: at least one kind is required", path)
	}
	if err := ValidateKinds(doc.Kinds, nil); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	if err := ValidateChannelPolicies(doc.Kinds); err != nil { // channelpolicy.go
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return doc.Kinds, nil
}

// readKindsFile loads KindsFile, relative to dir (the config file's
// directory), into Kinds.
func (c *Config) readKindsFile(dir string) error {
	if c.KindsFile == "" {
		return nil
	}
	if c.Kinds != nil {
		// One place for the kinds: with two, herald and the applications
		// that read only the file could know different kinds. An empty
		// list beside the file is refused too: it reads as "no kinds".
		return errors.New("config: kinds_file: not together with kinds (keep every kind in the kinds file)")
	}
	path := c.KindsFile
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	kinds, err := LoadKinds(path)
	if err != nil {
		return err
	}
	c.Kinds, c.kindsFrom = kinds, path
	return nil
}

func (c *Config) validateKinds() error {
	if c.KindsFile != "" && c.kindsFrom == "" {
		return fmt.Errorf("config: kinds_file: %q was not read (config.Load reads it)", c.KindsFile)
	}
	served := map[string]bool{}
	for _, p := range c.Providers {
		served[p.Channel] = true
	}
	if err := ValidateKinds(c.Kinds, func(ch string) bool { return served[ch] }); err != nil {
		if c.kindsFrom != "" {
			return fmt.Errorf("config: %s: %w", c.kindsFrom, err)
		}
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// ValidateKinds checks kinds as the config file's kinds are checked: names,
// categories, channels, a template per channel that parses as a Go
// text/template. served, when not nil, must report a provider for every
// channel used. Errors name the key (kinds[2].category).
func ValidateKinds(kinds []Kind, served func(channel string) bool) error {
	names := map[string]bool{}
	for i, k := range kinds {
		key := fmt.Sprintf("kinds[%d]", i)
		if k.Name == "" {
			return fmt.Errorf("%s.name: required", key)
		}
		if names[k.Name] {
			return fmt.Errorf("%s.name: duplicate kind %q", key, k.Name)
		}
		names[k.Name] = true
		if !heraldtype.Lane(k.Category).Valid() {
			return fmt.Errorf("%s.category: %q is not one of alert, transactional, marketing, internal", key, k.Category)
		}
		if len(k.Channels) == 0 {
			return fmt.Errorf("%s.channels: at least one channel is required", key)
		}
		seen := map[string]bool{}
		for j, ch := range k.Channels {
			if !heraldtype.Channel(ch).KindChannel() {
				return fmt.Errorf("%s.channels[%d]: %q is not one of %s, inbox", key, j, ch, heraldtype.ChannelNames())
			}
			if seen[ch] {
				return fmt.Errorf("%s.channels[%d]: %q is listed twice", key, j, ch)
			}
			seen[ch] = true
			// The inbox is herald's own: no provider serves it.
			if served != nil && heraldtype.Channel(ch) != heraldtype.ChannelInbox && !served(ch) {
				return fmt.Errorf("%s.channels[%d]: no provider serves channel %q", key, j, ch)
			}
			t, ok := k.Templates[ch]
			if !ok {
				return fmt.Errorf("%s.templates.%s: missing (every channel needs a template)", key, ch)
			}
			if err := checkLocalized(fmt.Sprintf("%s.templates.%s", key, ch), t); err != nil {
				return err
			}
		}
		for ch := range k.Templates {
			if !seen[ch] {
				return fmt.Errorf("%s.templates.%s: channel %q is not in channels", key, ch, ch)
			}
		}
		tenants := map[string]bool{}
		for j, t := range k.Tenants {
			switch {
			case t == "" || strings.TrimSpace(t) != t || !validate.Printable(t):
				return fmt.Errorf("%s.tenants[%d]: a tenant name, without spaces around it", key, j)
			case tenants[t]:
				return fmt.Errorf("%s.tenants[%d]: %q is listed twice", key, j, t)
			}
			tenants[t] = true
		}
	}
	return nil
}

// checkLocalized checks a template's pairs: each locale key a BCP 47 tag
// or "default" (each key once, in any case), each text a template.
func checkLocalized(key string, t Template) error {
	if t.Locales != nil && len(t.Locales) == 0 {
		return fmt.Errorf("%s: at least one locale", key)
	}
	seen := map[string]string{}
	texts := t.Texts()
	for _, loc := range slices.Sorted(maps.Keys(texts)) {
		p := texts[loc]
		at := key
		if loc != "" {
			at = key + "." + loc
			if !locale.Valid(loc) {
				return fmt.Errorf("%s: %q is not a language tag (ko, en, en-GB) or default", at, loc)
			}
			if other, dup := seen[locale.Normalize(loc)]; dup {
				return fmt.Errorf("%s: the same locale as %q", at, other)
			}
			seen[locale.Normalize(loc)] = loc
		}
		for _, f := range []struct{ field, text string }{{"title", p.Title}, {"body", p.Body}} {
			if err := checkTemplate(f.text); err != nil {
				return fmt.Errorf("%s.%s: %w", at, f.field, err)
			}
		}
	}
	return nil
}

// catalogFuncs stands for the functions package catalog adds to
// text/template's own (catalog/funcs.go: printf, eq, ne, lt, le, gt and ge
// replace builtins; json is new): a template that calls one parses here.
var catalogFuncs = template.FuncMap{"json": func(any) (string, error) { return "", nil }}

// checkTemplate parses text as package catalog compiles it (text/template
// and catalog's functions), so a template that cannot parse is refused
// with the key that holds it, here and not only when the catalog is built.
func checkTemplate(text string) error {
	if _, err := template.New("t").Funcs(catalogFuncs).Parse(text); err != nil {
		// "template: t:1: unexpected …" → "line 1: unexpected …"
		msg := strings.TrimPrefix(err.Error(), "template: t:")
		return fmt.Errorf("not a Go template: line %s", msg)
	}
	return nil
}
