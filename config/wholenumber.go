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
		n = unalias(n)
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
			for _, e := range entries(n) {
				key := e[0].Value
				if f, ok := yamlField(t, key); ok {
					walk(e[1], f.Type, joinPath(path, key))
				}
			}
		case reflect.Map:
			if n.Kind != yaml.MappingNode {
				return
			}
			for _, e := range entries(n) {
				walk(e[1], t.Elem(), joinPath(path, e[0].Value))
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

// entries is mapping n's keys and values as the decoder takes them: its
// own, then those its merge keys (<<) bring that it does not set itself,
// of a sequence of merged mappings the first's that sets a key.
func entries(n *yaml.Node) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	var merges []*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		out = append(out, [2]*yaml.Node{k, v})
		seen[k.Value] = true
	}
	merged := func(m *yaml.Node) {
		if m = unalias(m); m.Kind != yaml.MappingNode {
			return
		}
		for _, e := range entries(m) {
			if !seen[e[0].Value] {
				seen[e[0].Value] = true
				out = append(out, e)
			}
		}
	}
	for _, v := range merges {
		if v = unalias(v); v.Kind == yaml.SequenceNode {
			for _, m := range v.Content {
				merged(m)
			}
			continue
		}
		merged(v)
	}
	return out
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

// unalias is the node an alias (*name) stands for, n itself otherwise.
func unalias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}
