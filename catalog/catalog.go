// Package catalog holds the configured notification kinds and renders their
// templates. Intake renders every channel once to refuse a request whose
// params a template cannot fill (422, naming every missing param); the
// sender renders again at send time. Kind.Params lists the params a kind's
// templates read (GET /v1/kinds).
package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/locale"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// Kind is a compiled kind.
type Kind struct {
	Name     string
	Lane     heraldtype.Lane
	Channels []heraldtype.Channel
	// Fallback: the channels are a fallback chain (policy first, package
	// fallback), not sends made at once.
	Fallback bool
	tmpl     map[heraldtype.Channel]*texts
	params   []Param
	// renderedMax caps each rendered text (Catalog.Limit); 0 is the
	// process's cap.
	renderedMax int
	// tenants are the only tenants that may send it (config.Kind.Tenants);
	// nil: every tenant.
	tenants map[string]bool
}

// For reports whether tenant may send the kind: to any other it does not
// exist.
func (k *Kind) For(tenant string) bool { return k.tenants == nil || k.tenants[tenant] }

// texts are a channel's compiled pairs, one per locale key ("" for a
// template without locales), in key order.
type texts struct {
	locales []string
	pairs   []pair
}

type pair struct{ title, body *template.Template }

// Catalog maps kind names to compiled kinds.
type Catalog struct {
	kinds map[string]*Kind
	// SendAtHorizon is how far ahead of now Validate takes a send_at.
	// Defaults to DefaultSendAtHorizon.
	SendAtHorizon time.Duration
	// limits are this catalog's own caps (Limit); zero fields are the
	// process's (SetLimits).
	limits Limits
}

// New compiles every kind's templates; an error names the kind and channel.
func New(kinds []config.Kind) (*Catalog, error) {
	c := &Catalog{kinds: make(map[string]*Kind, len(kinds))}
	for _, k := range kinds {
		ck := &Kind{Name: k.Name, Lane: heraldtype.Lane(k.Category), Fallback: k.FirstAvailable(), tmpl: map[heraldtype.Channel]*texts{}}
		if len(k.Tenants) > 0 {
			ck.tenants = make(map[string]bool, len(k.Tenants))
			for _, t := range k.Tenants {
				ck.tenants[t] = true
			}
		}
		var all []*template.Template
		for _, ch := range k.Channels {
			tx := &texts{}
			byLocale := k.Templates[ch].Texts()
			for _, loc := range slices.Sorted(maps.Keys(byLocale)) {
				t := byLocale[loc]
				at := ch
				if loc != "" {
					at = ch + "." + loc
				}
				title, err := parse(k.Name+"/"+at+"/title", t.Title)
				if err != nil {
					return nil, fmt.Errorf("config: kinds %q templates.%s.title: %w", k.Name, at, err)
				}
				body, err := parse(k.Name+"/"+at+"/body", t.Body)
				if err != nil {
					return nil, fmt.Errorf("config: kinds %q templates.%s.body: %w", k.Name, at, err)
				}
				tx.locales = append(tx.locales, locale.Normalize(loc))
				tx.pairs = append(tx.pairs, pair{title, body})
				all = append(all, title, body)
			}
			ck.Channels = append(ck.Channels, heraldtype.Channel(ch))
			ck.tmpl[heraldtype.Channel(ch)] = tx
		}
		ck.params = templateParams(all...)
		c.kinds[k.Name] = ck
	}
	return c, nil
}

func parse(name, text string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Funcs(funcs).Parse(text)
}

// Kind returns the named kind, or nil.
func (c *Catalog) Kind(name string) *Kind { return c.kinds[name] }

// Kinds returns every kind, by name.
func (c *Catalog) Kinds() []*Kind {
	out := make([]*Kind, 0, len(c.kinds))
	for _, n := range slices.Sorted(maps.Keys(c.kinds)) {
		out = append(out, c.kinds[n])
	}
	return out
}

// Names returns every kind's name.
func (c *Catalog) Names() []string {
	out := make([]string, 0, len(c.kinds))
	for n := range c.kinds {
		out = append(out, n)
	}
	return out
}

// ErrNoTemplate is returned when the kind has no template for a channel.
var ErrNoTemplate = errors.New("no template for channel")

// MissingParamError says which param a template referenced that the request lacks.
type MissingParamError struct {
	Channel heraldtype.Channel
	// Param is the param's path: "amount", or "card.last4" when the request
	// has card but card lacks last4. A param read relative to a with or
	// range block's dot is named by its key alone.
	Param string
	// hasFields: the template reads fields of the param (.card.last4
	// without card).
	hasFields bool
}

func (e *MissingParamError) Error() string {
	return fmt.Sprintf("template for channel %s needs param %q", e.Channel, e.Param)
}

// RenderError is a template that failed for a reason other than a missing param.
type RenderError struct {
	Channel heraldtype.Channel
	Err     error
}

func (e *RenderError) Error() string {
	return fmt.Sprintf("template for channel %s: %v", e.Channel, e.Err)
}

func (e *RenderError) Unwrap() error { return e.Err }

// noEntry matches text/template's error for a missing map key: the field
// chain it was evaluating, and the key.
var noEntry = regexp.MustCompile(`at <([^>]*)>: map has no entry for key "([^"]*)"`)

// Render fills the channel's title and body with params, in the text
// for a recipient whose profile language is lang (locale.Pick; "" for
// none: the kind's default).
func (k *Kind) Render(ch heraldtype.Channel, lang string, params map[string]any) (title, body string, err error) {
	tx, ok := k.tmpl[ch]
	if !ok {
		return "", "", ErrNoTemplate
	}
	return tx.render(ch, locale.Pick(tx.locales, lang), params, k.renderedMax)
}

// render fills text i; max caps each of title and body (0: the
// process's cap).
func (tx *texts) render(ch heraldtype.Channel, i int, params map[string]any, max int) (title, body string, err error) {
	p := tx.pairs[i]
	if params == nil {
		params = map[string]any{}
	}
	if title, err = execute(ch, p.title, params, max); err != nil {
		return "", "", err
	}
	if body, err = execute(ch, p.body, params, max); err != nil {
		return "", "", err
	}
	return title, body, nil
}

// Inbox renders the kind's inbox texts, one per locale, for intake's
// inbox write (the store keeps the one the recipient's language picks,
// read in the same transaction); nil when the kind has no inbox channel.
// raw are the params as stored.
func (k *Kind) Inbox(raw json.RawMessage) ([]store.InboxText, error) {
	if _, ok := k.tmpl[heraldtype.ChannelInbox]; !ok {
		return nil, nil
	}
	params, err := DecodeParams(raw)
	if err != nil {
		return nil, err
	}
	return k.inbox(params)
}

// inbox is Inbox on decoded params.
func (k *Kind) inbox(params map[string]any) ([]store.InboxText, error) {
	tx, ok := k.tmpl[heraldtype.ChannelInbox]
	if !ok {
		return nil, nil
	}
	out := make([]store.InboxText, len(tx.pairs))
	for i := range tx.pairs {
		title, body, err := tx.render(heraldtype.ChannelInbox, i, params, k.renderedMax)
		if err != nil {
			return nil, err
		}
		out[i] = store.InboxText{Locale: tx.locales[i], Title: title, Body: body}
	}
	return out, nil
}

func execute(ch heraldtype.Channel, t *template.Template, params map[string]any, max int) (string, error) {
	if max <= 0 {
		max = int(renderedMax.Load())
	}
	b := capped{max: max}
	if err := t.Execute(&b, wrap(params)); err != nil {
		if m := noEntry.FindStringSubmatch(err.Error()); m != nil {
			path, hasFields := missingPath(m[1], m[2], params)
			return "", &MissingParamError{Channel: ch, Param: path, hasFields: hasFields}
		}
		return "", &RenderError{Channel: ch, Err: err}
	}
	if bytes.Contains(b.b, []byte(printedWhole)) {
		return "", &RenderError{Channel: ch, Err: errPrintedWhole}
	}
	return string(b.b), nil
}

// object and list are a param's JSON object and array while a template
// runs (wrap): text/template reads their fields, indexes, ranges over and
// measures them as it does a map[string]any and an []any, but printing
// one whole ({{.card}}, {{.}}, print) writes printedWhole, which execute
// refuses (errPrintedWhole), rather than sending Go's map[last4:1234].
type (
	object map[string]any
	list   []any
)

// printedWhole is what an object or a list prints: no param can hold a
// NUL (validate refuses it at the edge), so a rendered text holding it
// printed one whole.
const printedWhole = "\x00herald: printed whole\x00"

var errPrintedWhole = errors.New("an object or list printed whole (print its fields, or range over it)")

func (object) String() string { return printedWhole }
func (list) String() string   { return printedWhole }

// wrap returns v with every JSON object in it an object and every array a
// list; a value with none is not copied.
func wrap(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if !nested(x) {
			return object(x)
		}
		out := make(object, len(x))
		for k, e := range x {
			out[k] = wrap(e)
		}
		return out
	case []any:
		out := make(list, len(x))
		for i, e := range x {
			out[i] = wrap(e)
		}
		return out
	}
	return v
}

// nested reports whether m holds an object or an array.
func nested(m map[string]any) bool {
	for _, e := range m {
		switch e.(type) {
		case map[string]any, []any:
			return true
		}
	}
	return false
}

// DecodeParams decodes a JSON object of params, keeping numbers exact.
// Empty input is an empty map. A null value counts as absent, so a template
// that needs it fails as a missing param instead of printing "<no value>".
func DecodeParams(raw []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return nil, fmt.Errorf("params must be a JSON object, not %s", validate.JSONValue(typ.Value))
		}
		return nil, fmt.Errorf("params must be a JSON object: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	dropNulls(m)
	return m, nil
}

func dropNulls(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			dropNulls(v)
		}
	}
}
