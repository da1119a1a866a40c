package bizppurio

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
)

// callback is a report request as the vendor makes it to the registered
// URL, carrying token.
func callback(token, body string) *http.Request {
	u := "https://herald.example/v1/callbacks/bizppurio"
	if token != "" {
		u += "?" + CallbackTokenParam + "=" + url.QueryEscape(token)
	}
	r := httptest.NewRequest(http.MethodPost, u, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

const (
	smsRef = testNotification + ".s"
	atRef  = testNotification + ".a"
	smsID  = testNotification + ".sms"
	atID   = testNotification + ".alimtalk"
)

var reportAt = time.Unix(1603773837, 0).UTC()

// TestReports walks the report table of the package comment.
func TestReports(t *testing.T) {
	t.Parallel()
	b, _, _ := setup(t)
	report := func(fields string) string {
		return `{"CMSGID":"201027134355944sms027420servqer0","MSGID":"1027se_SL4676027383600490148","PHONE":"01000000000",` +
			`"UNIXTIME":"1603773837","USERDATA":"","WAPINFO":"SKT",` + fields + `}`
	}
	want := func(id string, res provider.ReportResult, reason string, dead bool) provider.Report {
		return provider.Report{MessageID: id, ProviderRef: "201027134355944sms027420servqer0", Result: res, Reason: reason, At: reportAt, DeadDestination: dead}
	}
	rows := []struct {
		name, body string
		want       provider.Report
	}{
		{"SMSDelivered", report(`"DEVICE":"SMS","MEDIA":"SMS","RESULT":"4100","REFKEY":"` + smsRef + `"`),
			want(smsID, provider.ReportDelivered, "BIZPPURIO_4100", false)},
		{"LMSDelivered", report(`"DEVICE":"LMS","MEDIA":"LMS","RESULT":"6600","REFKEY":"` + smsRef + `"`),
			want(smsID, provider.ReportDelivered, "BIZPPURIO_6600", false)},
		{"AlimTalkDelivered", report(`"DEVICE":"AT","MEDIA":"KAT","RESULT":"7000","WAPINFO":"KAO","REFKEY":"` + atRef + `"`),
			want(atID, provider.ReportDelivered, "BIZPPURIO_7000", false)},
		{"PowerOffFailed", report(`"DEVICE":"SMS","MEDIA":"SMS","RESULT":"4401","REFKEY":"` + smsRef + `"`),
			want(smsID, provider.ReportFailed, "BIZPPURIO_4401", false)},
		{"WrongNumberIsDead", report(`"DEVICE":"SMS","MEDIA":"SMS","RESULT":"4410","REFKEY":"` + smsRef + `"`),
			want(smsID, provider.ReportFailed, "BIZPPURIO_4410", true)},
		{"UnassignedNumberIsDead", report(`"DEVICE":"SMS","MEDIA":"SMS","RESULT":"4414","REFKEY":"` + smsRef + `"`),
			want(smsID, provider.ReportFailed, "BIZPPURIO_4414", true)},
		{"LMSOutOfServiceNumberIsDead", report(`"DEVICE":"LMS","MEDIA":"LMS","RESULT":"6630","REFKEY":"` + smsRef + `"`),
			want(smsID, provider.ReportFailed, "BIZPPURIO_6630", true)},
		{"LMSSpamFailed", report(`"DEVICE":"LMS","MEDIA":"LMS","RESULT":"6617","REFKEY":"` + smsRef + `"`),
			want(smsID, provider.ReportFailed, "BIZPPURIO_6617", false)},
		{"AlimTalkDeliveredByFallbackInResult", report(`"DEVICE":"AT","MEDIA":"SMS","RESULT":"4100","RESEND_FLAG":"SMS","REFKEY":"` + atRef + `"`),
			want(atID, provider.ReportDelivered, "BIZPPURIO_FALLBACK_4100", false)},
		{"AlimTalkDeliveredByFallbackInTELRES", report(`"DEVICE":"AT","MEDIA":"LMS","RESULT":"7318","TELRES":"6600","REFKEY":"` + atRef + `"`),
			want(atID, provider.ReportDelivered, "BIZPPURIO_FALLBACK_6600", false)},
		{"AlimTalkFallbackToDeadNumber", report(`"DEVICE":"AT","MEDIA":"SMS","RESULT":"7318","TELRES":"4414","REFKEY":"` + atRef + `"`),
			want(atID, provider.ReportFailed, "BIZPPURIO_FALLBACK_4414", true)},
		{"AlimTalkFailedFallbackPending", report(`"DEVICE":"AT","MEDIA":"KAT","RESULT":"7318","REFKEY":"` + atRef + `"`),
			want(atID, provider.ReportPending, "BIZPPURIO_7318", false)},
		{"AlimTalkUncertainIsPending", report(`"DEVICE":"AT","MEDIA":"KAT","RESULT":"7305","REFKEY":"` + atRef + `"`),
			want(atID, provider.ReportPending, "BIZPPURIO_7305", false)},
		{"KakaoFailureWithoutFallbackFails", report(`"DEVICE":"AT","MEDIA":"KAT","RESULT":"7308","REFKEY":"other-system-1"`),
			want("other-system-1", provider.ReportFailed, "BIZPPURIO_7308", true)},
		{"PollingSpellingAndNumbers", `{"device":"SMS","cmsgid":"201027134355944sms027420servqer0","media":"SMS","unixtime":1603773837,"result":4100,"refkey":"` + smsRef + `"}`,
			want(smsID, provider.ReportDelivered, "BIZPPURIO_4100", false)},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			got, err := b.ParseCallback(callback(testCBToken, row.body), []byte(row.body))
			if err != nil {
				t.Fatalf("ParseCallback: %v", err)
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], row.want) {
				t.Fatalf("reports = %+v\nwant [%+v]", got, row.want)
			}
		})
	}
}

func TestReportBatches(t *testing.T) {
	t.Parallel()
	b, _, _ := setup(t)
	body := `[{"RESULT":"4100","REFKEY":"` + smsRef + `","UNIXTIME":"x"},` +
		`{"RESULT":"4100","DEVICE":"SMS"},` + // sent from the console: no refkey, not herald's
		`{"RESULT":"7000","REFKEY":"` + atRef + `"}]`
	got, err := b.ParseCallback(callback(testCBToken, body), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Report{
		{MessageID: smsID, Result: provider.ReportDelivered, Reason: "BIZPPURIO_4100"},
		{MessageID: atID, Result: provider.ReportDelivered, Reason: "BIZPPURIO_7000"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reports = %+v, want %+v", got, want)
	}
	if got, err := b.ParseCallback(callback(testCBToken, `{"RESULT":"4100"}`), []byte(`{"RESULT":"4100"}`)); err != nil || len(got) != 0 {
		t.Fatalf("a report without refkey: %v %v, want none and no error", got, err)
	}
}

func TestReportRefused(t *testing.T) {
	t.Parallel()
	good := `{"RESULT":"4100","REFKEY":"` + smsRef + `"}`
	rows := []struct {
		name, token, body string
		noToken           bool // the adapter has no CallbackToken
		want              error
	}{
		{name: "WrongToken", token: "cb-SECRET-0123456789abcdeX", body: good, want: provider.ErrBadSignature},
		{name: "PrefixOfToken", token: testCBToken[:20], body: good, want: provider.ErrBadSignature},
		{name: "NoToken", body: good, want: provider.ErrBadSignature},
		{name: "NoneConfigured", token: "", body: good, noToken: true, want: provider.ErrBadSignature},
		{name: "WrongTokenAndMalformed", token: "nope", body: "{", want: provider.ErrBadSignature},
		{name: "NotJSON", token: testCBToken, body: "RESULT=4100", want: provider.ErrBadCallback},
		{name: "Empty", token: testCBToken, body: "", want: provider.ErrBadCallback},
		{name: "BrokenObject", token: testCBToken, body: `{"RESULT":`, want: provider.ErrBadCallback},
		{name: "BrokenArray", token: testCBToken, body: `[{"RESULT":"4100"`, want: provider.ErrBadCallback},
		{name: "NoResult", token: testCBToken, body: `{"REFKEY":"` + smsRef + `"}`, want: provider.ErrBadCallback},
		{name: "ResultNotACode", token: testCBToken, body: `{"REFKEY":"` + smsRef + `","RESULT":"OK"}`, want: provider.ErrBadCallback},
		{name: "ResultObject", token: testCBToken, body: `{"REFKEY":"` + smsRef + `","RESULT":{}}`, want: provider.ErrBadCallback},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			v := newVendor(t)
			cfg := testConfig(v, nil)
			if row.noToken {
				cfg.CallbackToken = ""
			}
			b, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.ParseCallback(callback(row.token, row.body), []byte(row.body))
			if !errors.Is(err, row.want) || got != nil {
				t.Fatalf("ParseCallback = %v, %v; want an error wrapping %v", got, err, row.want)
			}
		})
	}
}

// FuzzParseCallback: any body is reports or one of the two errors, never a
// panic, and every report names a message and a result.
func FuzzParseCallback(f *testing.F) {
	for _, s := range []string{
		`{"RESULT":"4100","REFKEY":"` + smsRef + `"}`,
		`[{"RESULT":7318,"TELRES":"4100","REFKEY":"` + atRef + `","DEVICE":"AT"}]`,
		`{"result":"6606","refkey":"x","unixtime":"-1"}`, `[]`, `{`, ``,
	} {
		f.Add(s)
	}
	b, err := New(Config{BaseURL: "https://fake.invalid", Account: testAccount, Password: testPassword, From: testFrom, CallbackToken: testCBToken})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		reps, err := b.ParseCallback(callback(testCBToken, body), []byte(body))
		if err != nil {
			if !errors.Is(err, provider.ErrBadCallback) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		for _, r := range reps {
			if r.MessageID == "" || r.Result == 0 || !strings.HasPrefix(r.Reason, "BIZPPURIO_") {
				t.Fatalf("report %+v", r)
			}
			if r.DeadDestination && r.Result != provider.ReportFailed {
				t.Fatalf("dead destination on %v", r.Result)
			}
		}
	})
}

// The vendor pushes every report of an account to one registered URL, so
// the adapters of one account (one per channel) name the same
// CallbackAccount, whatever else differs between them, and those of
// another account or of the other API (test or production) do not.
func TestCallbackAccountNamesTheVendorAccount(t *testing.T) {
	t.Parallel()
	account := func(edit func(*Config)) string {
		t.Helper()
		cfg := Config{BaseURL: "https://api.bizppurio.com", Account: testAccount, Password: testPassword, From: testFrom,
			CallbackToken: testCBToken}
		if edit != nil {
			edit(&cfg)
		}
		b, err := New(cfg)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return b.CallbackAccount()
	}
	base := account(nil)
	if base == "" || strings.Contains(base, testPassword) || strings.Contains(base, testCBToken) {
		t.Fatalf("CallbackAccount %q: want the account named, and no secret", base)
	}
	same := map[string]func(*Config){
		"TheDefaultAPI":        func(c *Config) { c.BaseURL = "" },
		"TrailingSlashAndCase": func(c *Config) { c.BaseURL = "HTTPS://API.Bizppurio.com/" },
		"AnotherChannelsEntry": func(c *Config) {
			c.SenderKey, c.Templates, c.From = testSender, map[string]string{"order_paid": "TPL_PAID"}, "010-1234-5678"
		},
		"AnotherCallbackToken": func(c *Config) { c.CallbackToken = "cb-SECRET-another-token-0001" },
		"NoCallbackToken":      func(c *Config) { c.CallbackToken = "" },
	}
	for name, edit := range same {
		if got := account(edit); got != base {
			t.Errorf("%s: %q, want %q (the same account)", name, got, base)
		}
	}
	other := map[string]func(*Config){
		"AnotherAccount": func(c *Config) { c.Account = "herald_api2" },
		"TheTestAPI":     func(c *Config) { c.BaseURL = "https://dev-api.bizppurio.com" },
	}
	for name, edit := range other {
		if got := account(edit); got == base {
			t.Errorf("%s: %q, the same as the first account's", name, got)
		}
	}
	if got := account(func(c *Config) { c.BaseURL = "https://user:pw-SECRET-7f3a9c@api.bizppurio.com" }); strings.Contains(got, "SECRET") {
		t.Errorf("a base URL's password shows in %q", got)
	}
}
