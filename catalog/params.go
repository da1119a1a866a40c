package catalog

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"text/template"
	tparse "text/template/parse"

	"github.com/heraldhq/herald/heraldtype"
)

// Param is a top-level request param that a kind's templates read, as
// GET /v1/kinds lists it.
type Param struct {
	Name string `json:"name"`
	// Required: some template of the kind reads it on every render — in an
	// action, or in the condition of an if, with or range, outside any such
	// block's body — so a request without it is refused (422). Otherwise it
	// is read only inside a block's body, and needed only when that body
	// runs (a request that reaches it without the param is refused, naming
	// it).
	Required bool `json:"required"`
}

// Params returns the top-level params the kind's templates read, by name.
//
// They are found by walking the parsed templates (title and body, every
// channel) for field references on the params: {{.amount}}, {{.card.last4}}
// (param "card"), {{$.amount}}, and the same inside pipelines, function
// arguments and the conditions of if, with and range, and inside templates
// called with the params as their data ({{template "name" .}}, block). A
// reference inside a with or range body, where dot is the block's value, is
// not a param ({{range .items}}{{.name}}{{end}} reads "items" only); use
// $.name there to read a param. Params read only through index (index .
// "key") or the whole map ({{.}}) are not found.
func (k *Kind) Params() []Param { return slices.Clone(k.params) }

// templateParams walks the templates of one kind and merges what it finds.
func templateParams(ts ...*template.Template) []Param {
	w := walker{found: map[string]bool{}}
	for _, t := range ts {
		w.tmpl, w.calling = t, map[string]bool{}
		if t.Tree != nil {
			w.node(t.Tree.Root, true, false)
		}
	}
	out := make([]Param, 0, len(w.found))
	for _, name := range slices.Sorted(maps.Keys(w.found)) {
		out = append(out, Param{Name: name, Required: w.found[name]})
	}
	return out
}

// walker collects param references: found maps a name to whether some
// reference to it runs on every render.
type walker struct {
	tmpl    *template.Template
	found   map[string]bool
	calling map[string]bool // templates being walked, against recursion
}

func (w *walker) add(name string, conditional bool) {
	w.found[name] = w.found[name] || !conditional
}

// node walks n; root says dot is the params, conditional that n runs only
// inside a block's body.
func (w *walker) node(n tparse.Node, root, conditional bool) {
	switch n := n.(type) {
	case *tparse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			w.node(c, root, conditional)
		}
	case *tparse.ActionNode:
		w.pipe(n.Pipe, root, conditional)
	case *tparse.IfNode:
		w.pipe(n.Pipe, root, conditional)
		w.node(n.List, root, true)
		w.node(n.ElseList, root, true)
	case *tparse.WithNode:
		w.pipe(n.Pipe, root, conditional)
		w.node(n.List, false, true)
		w.node(n.ElseList, root, true)
	case *tparse.RangeNode:
		w.pipe(n.Pipe, root, conditional)
		w.node(n.List, false, true)
		w.node(n.ElseList, root, true)
	case *tparse.TemplateNode:
		w.pipe(n.Pipe, root, conditional)
		called := w.tmpl.Lookup(n.Name)
		if called == nil || called.Tree == nil || w.calling[n.Name] || !passesParams(n.Pipe, root) {
			return
		}
		w.calling[n.Name] = true
		w.node(called.Tree.Root, true, conditional)
		delete(w.calling, n.Name)
	}
}

// passesParams reports whether a template call's data is the params: . at
// the root, or $.
func passesParams(p *tparse.PipeNode, root bool) bool {
	if p == nil || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return false
	}
	switch a := p.Cmds[0].Args[0].(type) {
	case *tparse.DotNode:
		return root
	case *tparse.VariableNode:
		return len(a.Ident) == 1 && a.Ident[0] == "$"
	}
	return false
}

func (w *walker) pipe(p *tparse.PipeNode, root, conditional bool) {
	if p == nil {
		return
	}
	for _, c := range p.Cmds {
		for _, a := range c.Args {
			w.arg(a, root, conditional)
		}
	}
}

func (w *walker) arg(a tparse.Node, root, conditional bool) {
	switch a := a.(type) {
	case *tparse.FieldNode:
		if root {
			w.add(a.Ident[0], conditional)
		}
	case *tparse.VariableNode:
		if len(a.Ident) > 1 && a.Ident[0] == "$" {
			w.add(a.Ident[1], conditional)
		}
	case *tparse.ChainNode:
		if _, dot := a.Node.(*tparse.DotNode); dot && root && len(a.Field) > 0 {
			w.add(a.Field[0], conditional)
			return
		}
		w.arg(a.Node, root, conditional)
	case *tparse.PipeNode:
		w.pipe(a, root, conditional)
	}
}

// MissingParamsError names every param the kind's templates need that a
// request lacks, by path ("amount", "card.last4").
type MissingParamsError struct {
	Params []string
}

func (e *MissingParamsError) Error() string {
	return "missing params " + quoteList(e.Params)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = `"` + n + `"`
	}
	return strings.Join(q, ", ")
}

// maxRenders bounds the renders Check makes per channel while it looks
// for missing params.
const maxRenders = 100

// Check renders every channel with params. When params lack some the
// templates need, it returns a *MissingParamsError naming them all (sorted,
// by their deepest path: "card.last4" rather than "card"): each render
// stops at the first missing param, so Check fills in an empty string (an
// empty map where fields of it are read) and renders again, until the
// channel renders or fails for another reason. Those are the params this request needs: a param read only
// in a branch that the given params (or a filled-in empty string) do not
// take is not among them. Without missing params it returns the first
// other error, as Render does.
func (k *Kind) Check(params map[string]any) error {
	var missing []string
	filled := params
	for _, u := range k.units() {
		for range maxRenders {
			_, _, err := u.tx.render(u.ch, u.i, filled, k.renderedMax)
			var m *MissingParamError
			if !errors.As(err, &m) {
				if err != nil && len(missing) == 0 {
					return err
				}
				break
			}
			if slices.Contains(missing, m.Param) {
				// Filling it in did not help (a param read relative to a
				// with or range block's dot): report what is known.
				break
			}
			// A path below one already missing names it better
			// ("card.last4" for "card").
			missing = slices.DeleteFunc(missing, func(p string) bool { return strings.HasPrefix(m.Param, p+".") })
			missing = append(missing, m.Param)
			// An empty map where the template reads fields of the param,
			// so that the render can go on to them.
			var empty any = ""
			if m.hasFields {
				empty = map[string]any{}
			}
			filled = withPath(filled, strings.Split(m.Param, "."), empty)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return &MissingParamsError{Params: missing}
	}
	return nil
}

// unit is one text of a kind: a channel's pair for one locale.
type unit struct {
	ch heraldtype.Channel
	tx *texts
	i  int
}

// units lists every text of k, channel by channel, locale by locale.
func (k *Kind) units() []unit {
	var out []unit
	for _, ch := range k.Channels {
		tx := k.tmpl[ch]
		for i := range tx.pairs {
			out = append(out, unit{ch, tx, i})
		}
	}
	return out
}

// withPath returns a copy of params with value at path, copying every map
// on the way so that params itself is not changed.
func withPath(params map[string]any, path []string, value any) map[string]any {
	out := maps.Clone(params)
	if out == nil {
		out = map[string]any{}
	}
	if len(path) == 1 {
		out[path[0]] = value
		return out
	}
	inner, _ := out[path[0]].(map[string]any)
	out[path[0]] = withPath(inner, path[1:], value)
	return out
}

// missingPath names the param a failed field chain lacks: the chain's
// fields (from the error's "at <.card.last4>") down to the first one that
// params does not have, if that is the key the template missed; else the
// key alone. hasFields: the chain reads fields of that param.
func missingPath(chain, key string, params map[string]any) (path string, hasFields bool) {
	chain = strings.TrimPrefix(strings.TrimPrefix(chain, "$"), ".")
	if chain == "" || strings.ContainsAny(chain, " ()|") {
		return key, false
	}
	fields := strings.Split(chain, ".")
	var cur any = params
	for i, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			break
		}
		v, present := m[f]
		if !present {
			if f == key {
				return strings.Join(fields[:i+1], "."), i+1 < len(fields)
			}
			break
		}
		cur = v
	}
	return key, false
}
