package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// wholeNumbers finds values written with a fraction for a whole-number
// setting: the YAML decoder truncates them without a word (burst: 2.7
// sets 2), so each is named by its line and path instead (3.0 and 1e2 are
// whole, and decode as such). It walks the
// document beside t, the type decoded into, and leaves alone what decodes
// itself (Duration, Secret). An alias is followed to its anchor and a
// merge key's mappings are walked as the mapping's own (a value anchored
// once and reached through *x is judged where it is used).
func wholeNumbers(raw []byte, t reflect.Type) []string {
	var doc yaml.Node
	if yaml.Unmarshal(raw, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	var out []string
	self := reflect.TypeFor[yaml.Unmarshaler]()
	var walk func(n *yaml.Node, t reflect.Type, path string)
	walk = func(n *yaml.Node, t reflect.Type, path string) {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Implements(self) || reflect.PointerTo(t).Implements(self) {
			return
		}
		switch t.Kind() {
		case reflect.Struct:
			if n.Kind != yaml.MappingNode {
				return
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				key := n.Content[i].Value
				if n.Content[i].ShortTag() == "!!merge" {
					walkMerged(n.Content[i+1], func(m *yaml.Node) { walk(m, t, path) })
					continue
				}
				if f, ok := yamlField(t, key); ok {
					walk(n.Content[i+1], f.Type, joinPath(path, key))
				}
			}
		case reflect.Map:
			if n.Kind != yaml.MappingNode {
				return
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], t.Elem(), joinPath(path, n.Content[i].Value))
			}
		case reflect.Slice, reflect.Array:
			if n.Kind != yaml.SequenceNode {
				return
			}
			for i, c := range n.Content {
				walk(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			}
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
				return
			}
			if f, err := strconv.ParseFloat(n.Value, 64); err != nil || f != math.Trunc(f) {
				out = append(out, fmt.Sprintf("line %d: %s: %s is not a whole number", n.Line, path, n.Value))
			}
		}
	}
	walk(doc.Content[0], t, "")
	return out
}

// walkMerged calls f with each mapping a merge key's value names: one
// mapping or alias, or a sequence of them.
func walkMerged(v *yaml.Node, f func(*yaml.Node)) {
	for v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, c := range v.Content {
			f(c)
		}
		return
	}
	f(v)
}

// yamlField is t's field the YAML key names, looking into inline fields.
func yamlField(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case strings.Contains(opts, "inline"):
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if g, ok := yamlField(ft, key); ok {
					return g, true
				}
			}
		case name == "-":
		case name == "" && f.IsExported() && strings.ToLower(f.Name) == key, name == key:
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
