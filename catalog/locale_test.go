package catalog_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// localized compiles order.shipped: an inbox and a push text per locale, and
// an sms text with none.
func localized(t *testing.T) *catalog.Kind {
	t.Helper()
	cat, err := catalog.New([]config.Kind{{
		Name: "order.shipped", Category: "transactional", Channels: []string{"inbox", "push", "sms"},
		Templates: map[string]config.Template{
			"inbox": {Locales: map[string]config.Template{
				"ko":      {Title: "발송", Body: "{{.item}} 출발"},
				"en-GB":   {Title: "Dispatched", Body: "{{.item}} dispatched"},
				"default": {Title: "Shipped", Body: "{{.item}} shipped"},
			}},
			"push": {Locales: map[string]config.Template{
				"ko":      {Title: "발송", Body: "{{.item}}"},
				"default": {Title: "Shipped", Body: "{{.item}} via {{.carrier}}"},
			}},
			"sms": {Title: "Shipped", Body: "{{.item}}"},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return cat.Kind("order.shipped")
}

func TestRenderPicksTheRecipientsLanguage(t *testing.T) {
	t.Parallel()
	k := localized(t)
	params := decode(t, `{"item": "Mug", "carrier": "CJ"}`)
	for _, c := range []struct {
		ch         heraldtype.Channel
		lang, want string
	}{
		{heraldtype.ChannelPush, "ko-KR", "Mug"},
		{heraldtype.ChannelPush, "en", "Mug via CJ"},
		{heraldtype.ChannelPush, "", "Mug via CJ"},
		{heraldtype.ChannelInbox, "en-GB", "Mug dispatched"},
		// The closest English wins over the default text.
		{heraldtype.ChannelInbox, "en-US", "Mug dispatched"},
		{heraldtype.ChannelInbox, "fr", "Mug shipped"},
		{heraldtype.ChannelSMS, "ko", "Mug"},
	} {
		_, body, err := k.Render(c.ch, c.lang, params)
		if err != nil || body != c.want {
			t.Errorf("Render(%s, %q) = %q, %v; want %q", c.ch, c.lang, body, err, c.want)
		}
	}
}

// TestCheckNamesAParamOnlyOneLocaleNeeds: intake refuses a request that
// would fail for recipients of some language only.
func TestCheckNamesAParamOnlyOneLocaleNeeds(t *testing.T) {
	t.Parallel()
	err := localized(t).Check(decode(t, `{"item": "Mug"}`))
	var missing *catalog.MissingParamsError
	if !errors.As(err, &missing) || len(missing.Params) != 1 || missing.Params[0] != "carrier" {
		t.Fatalf("Check = %v, want carrier missing (the push default text needs it)", err)
	}
}

func TestInboxRendersEveryLocale(t *testing.T) {
	t.Parallel()
	texts, err := localized(t).Inbox(json.RawMessage(`{"item": "Mug"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []store.InboxText{
		{Locale: "default", Title: "Shipped", Body: "Mug shipped"},
		{Locale: "en-gb", Title: "Dispatched", Body: "Mug dispatched"},
		{Locale: "ko", Title: "발송", Body: "Mug 출발"},
	}
	if len(texts) != len(want) {
		t.Fatalf("Inbox = %+v, want %+v", texts, want)
	}
	for i := range want {
		if texts[i] != want[i] {
			t.Fatalf("Inbox = %+v, want %+v", texts, want)
		}
	}
	if none, err := setup(t).Inbox(json.RawMessage(`{}`)); none != nil || err != nil {
		t.Fatalf("a kind without the inbox: Inbox = %v, %v", none, err)
	}
}
