package validate_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/validate"
)

func TestJSON(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		raw string
		ok  bool
	}{
		"Plain":                {`{"a":"b","c":[1,"d"]}`, true},
		"Unicode":              {`{"merchant":"카페 모리 ☕"}`, true},
		"EscapedPair":          {`{"e":"\ud83d\ude00"}`, true},
		"EscapedBackslashU":    {`{"a":"\\u0000"}`, true}, // a backslash, then the text u0000
		"EscapedQuote":         {`{"a":"\"\u0041"}`, true},
		"NULEscape":            {`{"a":"x\u0000"}`, false},
		"NULEscapeInAKey":      {`{"\u0000":1}`, false},
		"NULEscapeUpperHex":    {`{"a":"\u0000"}`, false},
		"InvalidUTF8":          {"{\"a\":\"\xff\"}", false},
		"InvalidUTF8OutsideOf": {"{\"a\":1}\xff", false},
		"LoneHigh":             {`{"a":"\ud800"}`, false},
		"LoneHighThenText":     {`{"a":"\ud800x"}`, false},
		"HighThenHigh":         {`{"a":"\ud800\ud800"}`, false},
		"LoneLow":              {`{"a":"\udc00"}`, false},
		"TruncatedEscape":      {`{"a":"\u00`, true}, // malformed: the decoder's to say
	} {
		if err := validate.JSON([]byte(c.raw)); (err == nil) != c.ok {
			t.Errorf("%s: JSON(%q) = %v, want ok %v", name, c.raw, err, c.ok)
		}
	}
}

func TestAddress(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ch   heraldtype.Channel
		addr string
		ok   bool
	}{
		{heraldtype.ChannelSMS, "+821012345678", true},
		{heraldtype.ChannelSMS, "010-1234-5678", true},
		{heraldtype.ChannelSMS, "+1 (415) 555.0100", true},
		{heraldtype.ChannelSMS, "123456", false},
		{heraldtype.ChannelSMS, "+1234567890123456", false},
		{heraldtype.ChannelSMS, "12+345678", false},
		{heraldtype.ChannelAlimTalk, "tel:01012345678", false},
		{heraldtype.ChannelEmail, "r@example.com", true},
		{heraldtype.ChannelEmail, "R <r@example.com>", false},
		{heraldtype.ChannelEmail, "r@example.com, s@example.com", false},
		{heraldtype.ChannelEmail, strings.Repeat("a", 250) + "@x.io", false},
		{heraldtype.ChannelPush, "fcm:APA91b_x-Y", true},
		{heraldtype.ChannelPush, "", false},
		{heraldtype.ChannelPush, "tok en", false},
		{heraldtype.ChannelPush, "tök", false},
		{heraldtype.ChannelWebhook, "https://example.com/hook", true},
		{heraldtype.ChannelWebhook, "a\x00b", false},
	} {
		if err := validate.Address(c.ch, c.addr); (err == nil) != c.ok {
			t.Errorf("Address(%s, %q) = %v, want ok %v", c.ch, c.addr, err, c.ok)
		}
	}
}

func TestLanguage(t *testing.T) {
	t.Parallel()
	for tag, ok := range map[string]bool{"ko": true, "en-US": true, "zh-Hant-TW": true, "not a tag": false, "en_US!": false, strings.Repeat("a", 36): false} {
		if err := validate.Language(tag); (err == nil) != ok {
			t.Errorf("Language(%q) = %v, want ok %v", tag, err, ok)
		}
	}
}

// FuzzJSON: whatever the body, JSON does not panic, and a body it and the
// decoder accept holds, once decoded, only text both stores can keep: no
// NUL, valid UTF-8, and no U+FFFD the body did not hold itself (Go's
// decoder writes one for each invalid byte and lone surrogate escape).
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `{"a":"\u0000"}`, `{"a":"\ud800"}`, `{"\ud83d\ude00":["\\u0000"]}`, "{\"a\":\"\xff\"}", `"\ufffd"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if validate.JSON(raw) != nil || !json.Valid(raw) {
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // a number too large for float64 is valid JSON
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("json.Valid but Decode: %v", err)
		}
		replacement := strings.Contains(string(raw), "\ufffd") || strings.Contains(strings.ToLower(string(raw)), `\ufffd`)
		var walk func(any)
		check := func(s string) {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || (!replacement && strings.ContainsRune(s, utf8.RuneError)) {
				t.Fatalf("accepted %q decodes to %q", raw, s)
			}
		}
		walk = func(v any) {
			switch v := v.(type) {
			case string:
				check(v)
			case []any:
				for _, e := range v {
					walk(e)
				}
			case map[string]any:
				for k, e := range v {
					check(k)
					walk(e)
				}
			}
		}
		walk(v)
	})
}

// BenchmarkJSON: the edge's scan of a typical intake body (about 200
// bytes) and of a 64 KiB one, the intake's largest.
func BenchmarkJSON(b *testing.B) {
	small := []byte(`{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":12000,"merchant":"카페 모리","note":"\u00e9\n"}}`)
	large := []byte(`{"params":{"text":"` + strings.Repeat(`ab\"c\u00e9`, 64<<10/10) + `"}}`)
	for name, raw := range map[string][]byte{"Small": small, "64KiB": large} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if err := validate.JSON(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A body of the wrong shape is refused in the caller's words: the field,
// the JSON value it takes, the time format; never Go's type names.
func TestBodyErrorsNameTheFieldAndTheValue(t *testing.T) {
	t.Parallel()
	type item struct {
		N int `json:"n"`
	}
	type body struct {
		Recipient string     `json:"recipient"`
		SendAt    *time.Time `json:"send_at"`
		ExpiresAt time.Time  `json:"expires_at"`
		Channels  []string   `json:"channels"`
		Count     int        `json:"count"`
		Score     float64    `json:"score"`
		On        bool       `json:"on"`
		Item      item       `json:"item"`
		Small     uint8      `json:"small"`
	}
	for raw, want := range map[string]string{
		`{"recipient":5}`:                 "recipient: got a number where a string belongs",
		`{"channels":"sms"}`:              "channels: got a string where an array belongs",
		`{"channels":[true]}`:             "channels: got true or false where a string belongs",
		`{"count":1.5}`:                   "count: got a number (1.5) where a whole number belongs",
		`{"count":1e3}`:                   "count: 1e3 is a whole number, but it must be written in digits alone (no decimal point or exponent)",
		`{"count":-2.0}`:                  "count: -2.0 is a whole number, but it must be written in digits alone (no decimal point or exponent)",
		`{"count":99999999999999999999}`:  "count: 99999999999999999999 is out of range: a whole number from -9223372036854775808 to 9223372036854775807 belongs here",
		`{"count":1e30}`:                  "count: 1e30 is out of range: a whole number from -9223372036854775808 to 9223372036854775807 belongs here",
		`{"small":300}`:                   "small: 300 is out of range: a whole number from 0 to 255 belongs here",
		`{"count":1.0000000000000000001}`: "count: got a number (1.0000000000000000001) where a whole number belongs",
		`{"score":"high"}`:                "score: got a string where a number belongs",
		`{"on":"yes"}`:                    "on: got a string where true or false belongs",
		`{"item":{"n":"x"}}`:              "item.n: got a string where a whole number belongs",
		`{"item":[]}`:                     "item: got an array where an object belongs",
		`[1]`:                             "the body must be an object, not an array",
		`{"send_at":"tomorrow"}`:          `send_at: "tomorrow" is not a time: a time is an RFC 3339 string such as "2030-03-14T09:00:00Z"`,
		`{"send_at":5}`:                   `send_at: a time is an RFC 3339 string such as "2030-03-14T09:00:00Z"`,
		`{"send_at":"2030-03-14T09:00:00Z","expires_at":"soon"}`: `expires_at: "soon" is not a time: a time is an RFC 3339 string such as "2030-03-14T09:00:00Z"`,
		`{"send_at":"2030-02-30T09:00:00Z"}`:                     `send_at: "2030-02-30T09:00:00Z" is not a time (day out of range): a time is an RFC 3339 string such as "2030-03-14T09:00:00Z"`,
		`{"recipient":"r","x":1}`:                                `the body has a field this request does not take: "x"`,
		`{"send_at":"2030-03-14T09:00:00+24:00"}`:                `send_at: "2030-03-14T09:00:00+24:00" is not a time (its UTC offset must be Z or from -23:59 to +23:59): a time is an RFC 3339 string such as "2030-03-14T09:00:00Z"`,
		`{"expires_at":"2030-03-14T09:00:00-05:60"}`:             `expires_at: "2030-03-14T09:00:00-05:60" is not a time (its UTC offset must be Z or from -23:59 to +23:59): a time is an RFC 3339 string such as "2030-03-14T09:00:00Z"`,
	} {
		var b body
		err := validate.Body([]byte(raw), &b)
		if err == nil || err.Error() != want {
			t.Errorf("Body(%s) = %v; want %q", raw, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "2006")) {
			t.Errorf("Body(%s) = %v: Go's words", raw, err)
		}
		// Over HTTP the field the detail names is the problem's param.
		rec := httptest.NewRecorder()
		validate.DecodeJSON(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(raw)), &b, 1<<16, false)
		var p struct{ Detail, Param string }
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusBadRequest || p.Detail != want {
			t.Errorf("DecodeJSON(%s): %d %s", raw, rec.Code, rec.Body)
		}
		if field, _, named := strings.Cut(want, ": "); named && !strings.Contains(field, " ") && p.Param != field {
			t.Errorf("DecodeJSON(%s): param %q, want %q", raw, p.Param, field)
		}
		if strings.Contains(want, `does not take: "x"`) && p.Param != "x" {
			t.Errorf("DecodeJSON(%s): param %q, want the unknown field x", raw, p.Param)
		}
	}
}

// Every offset RFC 3339 allows still decodes: Z, ±00:00 to ±23:59.
func TestBodyTakesEveryRFC3339Offset(t *testing.T) {
	t.Parallel()
	var b struct {
		SendAt *time.Time `json:"send_at"`
	}
	for _, at := range []string{"2030-03-14T09:00:00Z", "2030-03-14T09:00:00+09:00",
		"2030-03-14T09:00:00-08:00", "2030-03-14T09:00:00.5+23:59", "2030-03-14T09:00:00-23:59", "2030-03-14T09:00:00-00:00"} {
		if err := validate.Body([]byte(`{"send_at":"`+at+`"}`), &b); err != nil {
			t.Errorf("%s: %v", at, err)
		}
	}
	if err := validate.Body([]byte(`{"send_at":null}`), &b); err != nil {
		t.Errorf("null: %v", err)
	}
}
