package catalog_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
)

// setup compiles one kind, payment.approved, on the webhook and sms channels.
func setup(t *testing.T) *catalog.Kind {
	t.Helper()
	cat, err := catalog.New([]config.Kind{{
		Name: "payment.approved", Category: "transactional", Channels: []string{"webhook", "sms"},
		Templates: map[string]config.Template{
			"webhook": {Title: "Payment approved", Body: "Paid {{.amount}} won at {{.merchant}}"},
			"sms":     {Title: "Paid", Body: "{{.amount}} won"},
		},
	}})
	if err != nil {
		t.Fatalf("catalog.New = %v", err)
	}
	k := cat.Kind("payment.approved")
	if k == nil {
		t.Fatal("kind payment.approved not in the catalog")
	}
	return k
}

func decode(t *testing.T, raw string) map[string]any {
	t.Helper()
	p, err := catalog.DecodeParams([]byte(raw))
	if err != nil {
		t.Fatalf("DecodeParams(%s) = %v", raw, err)
	}
	return p
}

func TestRender(t *testing.T) {
	t.Parallel()

	t.Run("FillsTitleAndBody", func(t *testing.T) {
		t.Parallel()
		k := setup(t)
		title, body, err := k.Render(heraldtype.ChannelWebhook, "", decode(t, `{"amount": 5000, "merchant": "Cafe Mori"}`))
		if err != nil {
			t.Fatal(err)
		}
		if title != "Payment approved" || body != "Paid 5000 won at Cafe Mori" {
			t.Errorf("Render = %q, %q", title, body)
		}
	})

	t.Run("KindKnowsItsLaneAndChannels", func(t *testing.T) {
		t.Parallel()
		k := setup(t)
		if k.Lane != heraldtype.LaneTransactional {
			t.Errorf("lane = %q, want transactional", k.Lane)
		}
		if len(k.Channels) != 2 || k.Channels[0] != heraldtype.ChannelWebhook || k.Channels[1] != heraldtype.ChannelSMS {
			t.Errorf("channels = %v, want [webhook sms] in config order", k.Channels)
		}
	})

	t.Run("MissingParamIsNamed", func(t *testing.T) {
		t.Parallel()
		k := setup(t)
		_, _, err := k.Render(heraldtype.ChannelWebhook, "", decode(t, `{"amount": 5000}`))
		var missing *catalog.MissingParamError
		if !errors.As(err, &missing) {
			t.Fatalf("Render error = %v (%T), want *MissingParamError", err, err)
		}
		if missing.Param != "merchant" || missing.Channel != heraldtype.ChannelWebhook {
			t.Errorf("MissingParamError = %+v, want param merchant on webhook", missing)
		}
		if !strings.Contains(err.Error(), `"merchant"`) {
			t.Errorf("error %q does not name the param", err)
		}
	})

	t.Run("NilParamsMissEveryParam", func(t *testing.T) {
		t.Parallel()
		k := setup(t)
		_, _, err := k.Render(heraldtype.ChannelSMS, "", nil)
		var missing *catalog.MissingParamError
		if !errors.As(err, &missing) || missing.Param != "amount" {
			t.Errorf("Render(nil params) = %v, want a missing amount", err)
		}
	})

	t.Run("CheckFindsMissingParamOnAnyChannel", func(t *testing.T) {
		t.Parallel()
		k := setup(t)
		// sms renders with amount alone; webhook needs merchant too.
		err := k.Check(decode(t, `{"amount": 1}`))
		var missing *catalog.MissingParamsError
		if !errors.As(err, &missing) || !slices.Equal(missing.Params, []string{"merchant"}) {
			t.Errorf("Check = %v, want merchant missing", err)
		}
		if err := k.Check(decode(t, `{"amount": 1, "merchant": "m"}`)); err != nil {
			t.Errorf("Check with every param = %v", err)
		}
	})

	t.Run("NumbersKeepTheirExactForm", func(t *testing.T) {
		t.Parallel()
		k := setup(t)
		for _, tc := range []struct{ name, amount, want string }{
			{"LargeInteger", "12000", "12000 won"},
			{"BeyondFloat64Precision", "12345678901234567890", "12345678901234567890 won"},
			{"DecimalAsWritten", "1.50", "1.50 won"},
			{"ExponentAsWritten", "1.2e4", "1.2e4 won"},
		} {
			_, body, err := k.Render(heraldtype.ChannelSMS, "", decode(t, `{"amount": `+tc.amount+`}`))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if body != tc.want {
				t.Errorf("%s: body = %q, want %q", tc.name, body, tc.want)
			}
		}
	})

	t.Run("ChannelWithoutTemplate", func(t *testing.T) {
		t.Parallel()
		k := setup(t)
		if _, _, err := k.Render(heraldtype.ChannelEmail, "", nil); !errors.Is(err, catalog.ErrNoTemplate) {
			t.Errorf("Render(email) = %v, want ErrNoTemplate", err)
		}
	})

	t.Run("FailureOtherThanMissingIsRenderError", func(t *testing.T) {
		t.Parallel()
		cat, err := catalog.New([]config.Kind{{
			Name: "k", Category: "internal", Channels: []string{"email"},
			Templates: map[string]config.Template{"email": {Title: "t", Body: "{{.user.name}}"}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = cat.Kind("k").Render(heraldtype.ChannelEmail, "", decode(t, `{"user": 5}`))
		var re *catalog.RenderError
		if !errors.As(err, &re) || re.Channel != heraldtype.ChannelEmail {
			t.Errorf("Render = %v (%T), want *RenderError on email", err, err)
		}
	})
}

func TestDecodeParams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw string
		ok        bool
	}{
		{"EmptyIsEmptyMap", ``, true},
		{"NullIsEmptyMap", ` null `, true},
		{"Object", `{"a": 1}`, true},
		{"ArrayRefused", `[1, 2]`, false},
		{"StringRefused", `"amount"`, false},
		{"NumberRefused", `5`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := catalog.DecodeParams([]byte(tc.raw))
			if tc.ok && (err != nil || m == nil) {
				t.Errorf("DecodeParams(%q) = %v, %v; want a map", tc.raw, m, err)
			}
			if !tc.ok && (err == nil || !strings.HasPrefix(err.Error(), "params must be a JSON object, not ") || strings.Contains(err.Error(), "Go ")) {
				t.Errorf("DecodeParams(%q) = %v, want a params error in the caller's words", tc.raw, err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("ParseErrorNamesKindAndChannel", func(t *testing.T) {
		t.Parallel()
		_, err := catalog.New([]config.Kind{{
			Name: "coupon.expiring", Category: "marketing", Channels: []string{"push", "email"},
			Templates: map[string]config.Template{
				"push":  {Title: "Coupon", Body: "{{.coupon}} expires"},
				"email": {Title: "Coupon", Body: "{{.coupon expires"},
			},
		}})
		if err == nil {
			t.Fatal("New accepted a template that does not parse")
		}
		for _, want := range []string{`"coupon.expiring"`, "templates.email.body"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
	})

	t.Run("ParseErrorInTitle", func(t *testing.T) {
		t.Parallel()
		_, err := catalog.New([]config.Kind{{
			Name: "fraud.alert", Category: "alert", Channels: []string{"sms"},
			Templates: map[string]config.Template{"sms": {Title: "{{if}}", Body: "b"}},
		}})
		if err == nil || !strings.Contains(err.Error(), `"fraud.alert"`) || !strings.Contains(err.Error(), "templates.sms.title") {
			t.Errorf("New = %v, want an error naming fraud.alert and templates.sms.title", err)
		}
	})

	t.Run("DevKindsCompile", func(t *testing.T) {
		t.Parallel()
		cat, err := catalog.New(config.Dev().Kinds)
		if err != nil {
			t.Fatal(err)
		}
		if len(cat.Names()) != len(config.Dev().Kinds) {
			t.Errorf("Names = %v, want every dev kind", cat.Names())
		}
		if cat.Kind("no.such.kind") != nil {
			t.Error("Kind of an unknown name is not nil")
		}
	})
}

func TestNullParamCountsAsMissing(t *testing.T) {
	t.Parallel()
	c, err := catalog.New([]config.Kind{{Name: "k", Category: "transactional", Channels: []string{"sms"},
		Templates: map[string]config.Template{"sms": {Title: "t", Body: "Paid {{.amount}} won, {{.card.last4}}"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string][]string{
		`{"amount":null,"card":{"last4":"1234"}}`: {"amount"},
		`{"amount":1,"card":{"last4":null}}`:      {"card.last4"},
		`{"amount":null,"card":null}`:             {"amount", "card.last4"},
	} {
		params, err := catalog.DecodeParams([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		var missing *catalog.MissingParamsError
		if err := c.Kind("k").Check(params); !errors.As(err, &missing) || !slices.Equal(missing.Params, want) {
			t.Errorf("%s: err %v, want missing %q", raw, err, want)
		}
	}
}
