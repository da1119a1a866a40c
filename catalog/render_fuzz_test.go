package catalog_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/validate"
)

// FuzzRenderParams drives the development config's kinds with any params,
// as intake does: validate.JSON (the edge), then Catalog.Validate (the
// kind's templates rendered, the inbox texts kept), then each channel's
// Render. Whatever the params, nothing panics, and every text rendered
// from params the edge let through is one both stores can hold (valid
// UTF-8, no NUL: validate.Text). Its seeds include the hostile ones the edge refuses.
func FuzzRenderParams(f *testing.F) {
	cat, err := catalog.New(config.Dev().Kinds)
	if err != nil {
		f.Fatal(err)
	}
	names := cat.Names()
	for _, s := range []string{
		`{"amount":12000,"merchant":"Cafe Mori"}`, `{"item":"Desk lamp","tracking":"1Z999"}`, `{"date":"3/14","time":"10:00"}`,
		`{"amount":"\ud83d\ude00","merchant":{"a":[1,2,{"b":null}]}}`, `{"amount":1e400}`, `null`, `{}`, `[]`, `"x"`,
		`{"amount":1,"merchant":"a\u0000b"}`, "{\"amount\":1,\"merchant\":\"\xff\"}", `{"item":"\u0000","tracking":"1"}`,
	} {
		for i := range names { // every kind
			f.Add(uint8(i), []byte(s))
		}
	}
	now := time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC)
	text := func(t *testing.T, what, s string) {
		t.Helper()
		if err := validate.Text(s); err != nil {
			t.Fatalf("%s %q: %v", what, s, err)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, raw []byte) {
		if validate.JSON(raw) != nil {
			return // refused at the edge: never rendered
		}
		name := names[int(which)%len(names)]
		kind, params, inbox, ferr := cat.Validate(now, catalog.Request{Recipient: "r", EventID: "e", Kind: name, Params: raw})
		if ferr != nil {
			return
		}
		for _, tx := range inbox {
			text(t, name+" inbox title", tx.Title)
			text(t, name+" inbox body", tx.Body)
		}
		decoded, err := catalog.DecodeParams(params)
		if err != nil {
			t.Fatalf("%s: Validate kept params %s that do not decode: %v", name, params, err)
		}
		for _, ch := range kind.Channels {
			title, body, err := kind.Render(ch, "", decoded)
			if err != nil {
				continue // a channel without a template of its own (inbox), or a kind's own refusal
			}
			text(t, name+" "+string(ch)+" title", title)
			text(t, name+" "+string(ch)+" body", body)
		}
	})
}
