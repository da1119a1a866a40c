package catalog_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
)

// renderBody compiles a webhook kind whose body is body and renders it
// with params (JSON).
func renderBody(t *testing.T, body, params string) (string, error) {
	t.Helper()
	cat, err := catalog.New([]config.Kind{{
		Name: "k", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "t", Body: body}},
	}})
	if err != nil {
		t.Fatalf("catalog.New = %v", err)
	}
	_, out, err := cat.Kind("k").Render(heraldtype.ChannelWebhook, "", decode(t, params))
	return out, err
}

// A JSON number param reaches the template as the number it is: printf's
// number verbs format it (text/template's own printf printed
// "%!f(json.Number=12.5)" to the recipient), and comparisons compare
// values, not text ("9" < "100" as text is false).
func TestTemplatesTakeNumbersAsNumbers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, params, want string }{
		{`{{printf "%.2f" .total}}`, `{"total":12.5}`, "12.50"},
		{`{{.total | printf "%08.3f"}}`, `{"total":12}`, "0012.000"},
		{`{{printf "%d points, %5d" .a .b}}`, `{"a":9,"b":100}`, "9 points,   100"},
		{`{{printf "%x" .a}}`, `{"a":255}`, "ff"},
		{`{{printf "%s won, %v, %q" .a .a .a}}`, `{"a":12.50}`, `12.50 won, 12.50, "12.50"`},
		{`{{printf "%s at %s" .name .shop}}`, `{"name":"Kim","shop":"Cafe Mori"}`, "Kim at Cafe Mori"},
		{`{{printf "%t %d%%" .ok 5}}`, `{"ok":true}`, "true 5%"},
		{`{{.amount}} won`, `{"amount":12.50}`, "12.50 won"}, // printed as sent
		{`{{if lt .a .b}}less{{else}}not{{end}}`, `{"a":9,"b":100}`, "less"},
		{`{{if gt .points 1000}}gold{{else}}plain{{end}}`, `{"points":999.5}`, "plain"},
		{`{{if ge .points 1000}}gold{{end}}`, `{"points":1e3}`, "gold"},
		{`{{if eq .n 0}}none{{else}}some{{end}}`, `{"n":0.0}`, "none"},
		{`{{if eq .n 1 2 3}}small{{end}}`, `{"n":3}`, "small"},
		{`{{if ne .n 1}}other{{end}}`, `{"n":2}`, "other"},
		{`{{if le .a .b}}le{{end}}`, `{"a":12345678901234567890,"b":12345678901234567891}`, "le"},
		// Comparisons of anything else are text/template's own.
		{`{{if eq .s "vip"}}vip{{end}}`, `{"s":"vip"}`, "vip"},
		{`{{if lt .s "b"}}a{{end}}`, `{"s":"a"}`, "a"},
		{`{{if eq .ok true}}yes{{end}}`, `{"ok":true}`, "yes"},
	} {
		got, err := renderBody(t, c.body, c.params)
		if err != nil || got != c.want {
			t.Errorf("%s with %s = %q, %v; want %q", c.body, c.params, got, err, c.want)
		}
	}
}

// A printf whose verbs do not fit its arguments, or a comparison of a
// number with something else, is a RenderError (refused at intake),
// never fmt's error text sent to a recipient. An error does not repeat a
// text param's value (it may be personal data).
func TestTemplateMisfitsAreRenderErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, params, want string }{
		{`{{printf "%.2f" .total}}`, `{"total":"12 (KIM)"}`, "%f does not print text"},
		{`{{printf "%d" .total}}`, `{"total":12.5}`, "%d needs a whole number, not 12.5"},
		{`{{printf "%d %d" .a}}`, `{"a":1}`, "%!d(MISSING)"},
		{`{{printf "%d" .a .a}}`, `{"a":1}`, "%!(EXTRA"},
		{`{{printf "%v" .card}}`, `{"card":{"last4":"1234"}}`, "%v of an object or list"},
		{`{{printf "%z" .a}}`, `{"a":1}`, "%z does not print a number"},
		{`{{if gt .points "100"}}x{{end}}`, `{"points":5}`, "gt: cannot compare a number with text"},
		{`{{if lt .name 3}}x{{end}}`, `{"name":"KIM"}`, "lt: "},
		{`Card {{.card}}`, `{"card":{"last4":"1234","holder":"KIM"}}`, "printed whole"},
		{`{{.items}}`, `{"items":["KIM"]}`, "printed whole"},
		{`{{.}}`, `{"name":"KIM"}`, "printed whole"},
		{`{{print .card}}`, `{"card":{"holder":"KIM"}}`, "printed whole"},
		{`{{range .rows}}{{.}}{{end}}`, `{"rows":[{"holder":"KIM"}]}`, "printed whole"},
		{`{{with .card}}{{.}}{{end}}`, `{"card":{"holder":"KIM"}}`, "printed whole"},
	} {
		got, err := renderBody(t, c.body, c.params)
		var re *catalog.RenderError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "KIM") {
			t.Errorf("%s with %s = %q, %v; want a RenderError saying %q, without the param's text", c.body, c.params, got, err, c.want)
		}
	}
}

// A param read with index is optional, as docs/configuration.md says:
// the kind does not list it as needed, and a request without it renders
// the branch's other side.
func TestIndexReadsAnOptionalParam(t *testing.T) {
	t.Parallel()
	cat, err := catalog.New([]config.Kind{{
		Name: "k", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "t", Body: `{{.headline}}{{with index . "coupon"}} Use {{.}}.{{end}}`}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	k := cat.Kind("k")
	for params, want := range map[string]string{`{"headline":"Sale"}`: "Sale", `{"headline":"Sale","coupon":null}`: "Sale", `{"headline":"Sale","coupon":"C10"}`: "Sale Use C10."} {
		if err := k.Check(decode(t, params)); err != nil {
			t.Errorf("Check(%s) = %v", params, err)
		}
		if _, got, err := k.Render(heraldtype.ChannelWebhook, "", decode(t, params)); err != nil || got != want {
			t.Errorf("Render(%s) = %q, %v; want %q", params, got, err, want)
		}
	}
	if ps := k.Params(); len(ps) != 1 || ps[0].Name != "headline" {
		t.Errorf("Params = %+v; want headline alone", ps)
	}
}

// A number is its text to if, as docs/configuration.md says: 0 is true;
// a comparison is how a template asks.
func TestIfOfANumberIsItsText(t *testing.T) {
	t.Parallel()
	got, err := renderBody(t, `{{if .n}}set{{end}} {{if gt .n 0}}positive{{else}}none{{end}}`, `{"n":0}`)
	if err != nil || got != "set none" {
		t.Errorf("= %q, %v; want %q", got, err, "set none")
	}
}

// json writes a param as JSON, so a webhook body built as a JSON document
// stays one, with the fields the template wrote, whatever a text param
// holds; numbers keep their text as sent.
func TestJSONKeepsABodyADocument(t *testing.T) {
	t.Parallel()
	const body = `{"order_id":{{json .order_id}},"name":{{json .name}},"amount":{{.amount | json}},"card":{{json .card}}}`
	for _, c := range []struct{ name, params, want string }{
		{"QuoteAndBackslash", `{"order_id":1,"name":"He said \"hi\" \\ back","amount":1,"card":{}}`,
			`{"order_id":1,"name":"He said \"hi\" \\ back","amount":1,"card":{}}`},
		{"LineBreakAndControl", `{"order_id":1,"name":"a\nb\u0007","amount":1,"card":""}`,
			`{"order_id":1,"name":"a\nb\u0007","amount":1,"card":""}`},
		{"InjectionStaysText", `{"order_id":1,"name":"x\",\"amount\":999999,\"y\":\"","amount":5,"card":[]}`,
			`{"order_id":1,"name":"x\",\"amount\":999999,\"y\":\"","amount":5,"card":[]}`},
		{"NumbersAsSentKoreanAsIs", `{"order_id":9007199254740993,"name":"결제 <완료> & 김","amount":12000.50,"card":{"last4":"1234","n":1e21}}`,
			`{"order_id":9007199254740993,"name":"결제 <완료> & 김","amount":12000.50,"card":{"last4":"1234","n":1e21}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := renderBody(t, body, c.params)
			if err != nil || got != c.want {
				t.Fatalf("rendered %q, %v; want %q", got, err, c.want)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(got), &doc); err != nil || len(doc) != 4 {
				t.Fatalf("rendered body is not the template's document (%d fields): %v", len(doc), err)
			}
		})
	}
}

// A number written as text for a receiver whose parser would round it
// (docs/consumer.md).
func TestJSONOfANumberAsText(t *testing.T) {
	t.Parallel()
	got, err := renderBody(t, `{"order_id":{{json (printf "%s" .order_id)}}}`, `{"order_id":9007199254740993}`)
	if want := `{"order_id":"9007199254740993"}`; err != nil || got != want {
		t.Fatalf("rendered %q, %v; want %q", got, err, want)
	}
}

// An object's fields, a list's elements and their counts print as the
// docs say; only an object or a list printed whole is refused.
func TestObjectsAndListsAreReadPartByPart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, params, want string }{
		{`{{.card.last4}}`, `{"card":{"last4":"1234"}}`, "1234"},
		{`{{with .card}}{{.last4}}{{end}}`, `{"card":{"last4":"1234"}}`, "1234"},
		{`{{range .items}}[{{.}}]{{end}} {{len .items}}`, `{"items":["a","b"]}`, "[a][b] 2"},
		{`{{index .items 1}}`, `{"items":["a","b"]}`, "b"},
		{`{{range $k, $v := .card}}{{$k}}={{$v}};{{end}}`, `{"card":{"a":1,"b":2}}`, "a=1;b=2;"},
		{`{{range .rows}}{{.name}},{{end}}`, `{"rows":[{"name":"x"},{"name":"y"}]}`, "x,y,"},
		{`{{with index . "coupon"}}{{.code}}{{end}}`, `{"coupon":{"code":"C10"}}`, "C10"},
		{`{{if .items}}some{{end}}{{if .none}}x{{else}}none{{end}}`, `{"items":[1],"none":[]}`, "somenone"},
	} {
		got, err := renderBody(t, c.body, c.params)
		if err != nil || got != c.want {
			t.Errorf("%s with %s = %q, %v; want %q", c.body, c.params, got, err, c.want)
		}
	}
}
