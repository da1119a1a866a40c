package catalog_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
)

// kind compiles one kind whose sms body is body (and title title).
func kind(tb testing.TB, title, body string) *catalog.Kind {
	tb.Helper()
	c, err := catalog.New([]config.Kind{{Name: "k", Category: "transactional", Channels: []string{"sms"},
		Templates: map[string]config.Template{"sms": {Title: title, Body: body}}}})
	if err != nil {
		tb.Fatalf("catalog.New: %v", err)
	}
	return c.Kind("k")
}

func TestParamsAreFoundInTheTemplates(t *testing.T) {
	t.Parallel()
	type P = catalog.Param
	for _, tc := range []struct {
		name, title, body string
		want              []P
	}{
		{"Actions", "Paid", "Paid {{.amount}} won at {{.merchant}}", []P{{"amount", true}, {"merchant", true}}},
		{"TitleToo", "{{.shop}}", "{{.amount}}", []P{{"amount", true}, {"shop", true}}},
		{"NestedFieldIsItsTopLevelParam", "", "{{.card.last4}} {{.card.brand}}", []P{{"card", true}}},
		{"PipelinesAndFunctions", "", `{{printf "%s/%s" .a .b | printf "%s"}} {{len .c}} {{(.d).e}}`,
			[]P{{"a", true}, {"b", true}, {"c", true}, {"d", true}}},
		{"IfConditionIsRequiredItsBranchesAreNot", "", "{{if .vip}}Dear {{.name}}{{else if .guest}}Hi {{.alias}}{{end}}",
			[]P{{"alias", false}, {"guest", false}, {"name", false}, {"vip", true}}},
		{"WithRebindsDot", "", "{{with .user}}{{.name}}{{$.greeting}}{{else}}{{.fallback}}{{end}}",
			[]P{{"fallback", false}, {"greeting", false}, {"user", true}}},
		{"RangeRebindsDot", "", "{{range $i, $it := .items}}{{.sku}}{{$it.qty}}{{$.currency}}{{else}}{{.empty}}{{end}}",
			[]P{{"currency", false}, {"empty", false}, {"items", true}}},
		{"RequiredOnceSomewhereIsRequired", "{{.amount}}", "{{if .x}}{{.amount}}{{end}}", []P{{"amount", true}, {"x", true}}},
		{"VariablesFromParams", "", "{{$a := .amount}}{{$a}} {{$.merchant}}", []P{{"amount", true}, {"merchant", true}}},
		{"CalledTemplatesWithTheParams", "", `{{define "line"}}{{.item}}{{template "line2" .}}{{end}}{{define "line2"}}{{.more}}{{end}}{{template "line" .}}{{block "b" .}}{{.blk}}{{end}}`,
			[]P{{"blk", true}, {"item", true}, {"more", true}}},
		{"CalledTemplateWithOtherData", "", `{{define "x"}}{{.inner}}{{end}}{{template "x" .thing}}`, []P{{"thing", true}}},
		{"RecursiveTemplateEnds", "", `{{define "r"}}{{.n}}{{if .more}}{{template "r" .}}{{end}}{{end}}{{template "r" .}}`,
			[]P{{"more", true}, {"n", true}}},
		{"IndexAndDotAreNotFollowed", "", `{{index . "hidden"}}{{printf "%v" .}}`, []P{}},
		{"NoParams", "Hello", "World", []P{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := kind(t, tc.title, tc.body).Params()
			if !slices.Equal(got, tc.want) {
				t.Errorf("Params = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParamsOfEveryChannelMerge(t *testing.T) {
	t.Parallel()
	c, err := catalog.New(config.Dev().Kinds)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range c.Kinds() {
		names = append(names, k.Name)
	}
	if want := []string{"appointment.reminder", "coupon.expiring", "fraud.alert", "order.shipped", "payment.approved"}; !slices.Equal(names, want) {
		t.Fatalf("Kinds = %v, want %v (by name)", names, want)
	}
	if got := c.Kind("payment.approved").Params(); !slices.Equal(got, []catalog.Param{{Name: "amount", Required: true}, {Name: "merchant", Required: true}}) {
		t.Errorf("payment.approved params = %+v", got)
	}
}

func TestCheckNamesEveryMissingParamAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, params string
		want               []string // nil: renders
	}{
		{"AllMissing", "{{.a}} {{.b}} {{.c}}", `{}`, []string{"a", "b", "c"}},
		{"SomeMissingSorted", "{{.zeta}} {{.alpha}} {{.mid}}", `{"mid": 1}`, []string{"alpha", "zeta"}},
		{"RepeatedOnce", "{{.a}} {{.a}} {{.b}}", `{}`, []string{"a", "b"}},
		{"NestedByPath", "{{.card.last4}} {{.card.brand}} {{.amount}}", `{"card": {}}`, []string{"amount", "card.brand", "card.last4"}},
		{"NestedParentMissing", "{{.card.last4}} {{.amount}}", `{}`, []string{"amount", "card.last4"}},
		{"BranchTakenByAGivenParam", "{{if .vip}}Dear {{.name}}{{end}} {{.amount}}", `{"vip": true}`, []string{"amount", "name"}},
		{"BranchNotTaken", "{{if .vip}}Dear {{.name}}{{end}} {{.amount}}", `{"vip": false}`, []string{"amount"}},
		{"MissingConditionIsNamed", "{{if .vip}}Dear {{.name}}{{end}}", `{}`, []string{"vip"}},
		{"Complete", "{{.a}} {{if .b}}{{.c}}{{end}}", `{"a": 1, "b": false}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := kind(t, "t", tc.body).Check(decode(t, tc.params))
			var missing *catalog.MissingParamsError
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("Check = %v, want it to render", err)
			case tc.want != nil && (!errors.As(err, &missing) || !slices.Equal(missing.Params, tc.want)):
				t.Errorf("Check = %v, want missing %q", err, tc.want)
			}
		})
	}
}

func TestCheckKeepsOtherRenderErrors(t *testing.T) {
	t.Parallel()
	// A param of the wrong type fails for another reason than a missing
	// param: that error is Check's answer when nothing is missing ...
	err := kind(t, "t", "{{.amount.value}}").Check(decode(t, `{"amount": 5}`))
	var render *catalog.RenderError
	if !errors.As(err, &render) {
		t.Fatalf("Check = %v (%T), want a *RenderError", err, err)
	}
	// ... and the missing params found before it are, when some are.
	err = kind(t, "t", "{{.b}} {{.amount.value}} {{.c}}").Check(decode(t, `{"amount": 5}`))
	var missing *catalog.MissingParamsError
	if !errors.As(err, &missing) || !slices.Equal(missing.Params, []string{"b"}) {
		t.Fatalf("Check = %v, want missing [b]", err)
	}
}

func TestCheckLeavesTheParamsAlone(t *testing.T) {
	t.Parallel()
	params := decode(t, `{"card": {"brand": "x"}}`)
	if err := kind(t, "t", "{{.card.last4}} {{.amount}}").Check(params); err == nil {
		t.Fatal("Check passed with params missing")
	}
	card := params["card"].(map[string]any)
	if len(params) != 1 || len(card) != 1 {
		t.Errorf("Check changed the caller's params: %v", params)
	}
}

// Whatever the params, Check ends; when it names missing params, they are
// sorted, distinct, and rendering with them filled in gets past them.
func FuzzCheckParams(f *testing.F) {
	for _, p := range []string{`{}`, `{"amount":1}`, `{"card":{}}`, `{"card":"x"}`, `{"vip":true}`, `{"items":[{"sku":1}]}`, `null`, `[]`} {
		f.Add(p)
	}
	k := kind(f, "t", "{{.amount}} {{.card.last4}} {{if .vip}}{{.name}}{{end}} {{range .items}}{{.sku}}{{$.currency}}{{end}}")
	f.Fuzz(func(t *testing.T, raw string) {
		params, err := catalog.DecodeParams([]byte(raw))
		if err != nil {
			return
		}
		err = k.Check(params)
		var missing *catalog.MissingParamsError
		if !errors.As(err, &missing) {
			return
		}
		if len(missing.Params) == 0 || !slices.IsSorted(missing.Params) || len(slices.Compact(slices.Clone(missing.Params))) != len(missing.Params) {
			t.Fatalf("%s: missing %q", raw, missing.Params)
		}
	})
}
