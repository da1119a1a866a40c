package catalog

import (
	"sort"
	"testing"

	"github.com/heraldhq/herald/config"
)

// config checks a template at load without importing this package (it
// cannot: this package imports config), so it keeps its own stand-ins for
// the functions added here. Each function of funcs must parse there too,
// or a kind calling it would be refused at start.
func TestConfigsTemplateCheckKnowsEveryFunction(t *testing.T) {
	names := make([]string, 0, len(funcs))
	for name := range funcs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		k := config.Kind{Name: "k", Category: "transactional", Channels: []string{"webhook"},
			Templates: map[string]config.Template{"webhook": {Title: "t", Body: "{{" + name + " .a .b}}"}}}
		if err := config.ValidateKinds([]config.Kind{k}, nil); err != nil {
			t.Errorf("a template calling %s: %v, want it to parse", name, err)
		}
	}
}
