package bizppurio

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall/httpcalltest"
)

// answer is a canned vendor answer.
func answerWith(status int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		writeJSON(w, status, body)
	}
}

// hang answers nothing until the client gives up (httpcalltest.Hang).
func hang(w http.ResponseWriter, r *http.Request) { httpcalltest.Hang(r, nil) }

// hangUp closes the connection after reading the whole request.
func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// TestClassification walks the package comment's table row by row against
// the fake vendor.
func TestClassification(t *testing.T) {
	t.Parallel()
	code := func(status, c int) http.HandlerFunc {
		return answerWith(status, nil, `{"code":`+itoa(c)+`,"description":"x"}`)
	}
	rows := []struct {
		name    string
		message http.HandlerFunc // the /v3/message answer (nil: the normal one)
		token   http.HandlerFunc // the /v1/token answer (nil: the normal one)
		timeout time.Duration
		class   provider.Class
		reason  string
		hint    time.Duration
		ref     string
		dead    bool
	}{
		{name: "Code1000IsAccepted", class: provider.Accepted, ref: "mk-1"},
		{name: "Code1000AsStringIsAccepted", message: answerWith(200, nil, `{"code":"1000","messagekey":"k"}`), class: provider.Accepted, ref: "k"},
		{name: "Code2000IsPermanent", message: code(400, 2000), class: provider.Permanent, reason: "BIZPPURIO_2000"},
		{name: "Code3000IsNotSent", message: code(400, 3000), class: provider.NotSent, reason: "BIZPPURIO_3000"},
		{name: "Code3002IsNotSent", message: code(400, 3002), class: provider.NotSent, reason: "BIZPPURIO_3002"},
		{name: "Code3003IsNotSent", message: code(400, 3003), class: provider.NotSent, reason: "BIZPPURIO_3003"},
		{name: "Code3004IsNotSent", message: code(400, 3004), class: provider.NotSent, reason: "BIZPPURIO_3004"},
		{name: "Code3005IsNotSent", message: code(400, 3005), class: provider.NotSent, reason: "BIZPPURIO_3005"},
		{name: "Code3006IsNotSent", message: code(400, 3006), class: provider.NotSent, reason: "BIZPPURIO_3006"},
		{name: "Code3007IsNotSent", message: code(400, 3007), class: provider.NotSent, reason: "BIZPPURIO_3007"},
		{name: "Code3009IsNotSent", message: code(400, 3009), class: provider.NotSent, reason: "BIZPPURIO_3009"},
		{name: "Code3010IsNotSent", message: code(400, 3010), class: provider.NotSent, reason: "BIZPPURIO_3010"},
		{name: "Code3008IsNotSentWithHint", message: code(400, 3008), class: provider.NotSent, reason: "BIZPPURIO_3008", hint: time.Second},
		{name: "Code5002IsNotSentWithResetHint", message: answerWith(429, map[string]string{"RateLimit-Limit": "1000", "RateLimit-Remaining": "0", "RateLimit-Reset": "0.299"}, `{"code":5002,"description":"too many requests","refkey":"x"}`),
			class: provider.NotSent, reason: "BIZPPURIO_5002", hint: 299 * time.Millisecond},
		{name: "Code5002RetryAfterWins", message: answerWith(429, map[string]string{"Retry-After": "7", "RateLimit-Reset": "0.3"}, `{"code":5002}`),
			class: provider.NotSent, reason: "BIZPPURIO_5002", hint: 7 * time.Second},
		{name: "Code5002HugeResetIsCapped", message: answerWith(429, map[string]string{"RateLimit-Reset": "1e12"}, `{"code":5002}`),
			class: provider.NotSent, reason: "BIZPPURIO_5002", hint: provider.MaxRetryAfter},
		{name: "Code5001IsNotSent", message: code(400, 5001), class: provider.NotSent, reason: "BIZPPURIO_5001"},
		{name: "Code3011IsUnknown", message: code(400, 3011), class: provider.Unknown, reason: "BIZPPURIO_3011"},
		{name: "Code9000IsUnknown", message: code(500, 9000), class: provider.Unknown, reason: "BIZPPURIO_9000"},
		{name: "OtherCodeOn400IsPermanent", message: code(400, 4285), class: provider.Permanent, reason: "BIZPPURIO_4285"},
		{name: "OtherCodeOn500IsUnknown", message: code(503, 4285), class: provider.Unknown, reason: "BIZPPURIO_4285"},
		{name: "OtherCodeOn200IsUnknown", message: code(200, 2001), class: provider.Unknown, reason: "BIZPPURIO_2001"},
		{name: "Code1000On500IsUnknown", message: code(500, 1000), class: provider.Unknown, reason: "BIZPPURIO_1000"},
		{name: "UnreadableOn200IsUnknown", message: answerWith(200, nil, `<html>ok</html>`), class: provider.Unknown, reason: "BIZPPURIO_BAD_RESPONSE"},
		{name: "Bare401IsNotSent", message: answerWith(401, nil, ``), class: provider.NotSent, reason: "HTTP_401"},
		{name: "Bare403IsNotSent", message: answerWith(403, nil, ``), class: provider.NotSent, reason: "HTTP_403"},
		{name: "Bare429IsNotSentWithHint", message: answerWith(429, map[string]string{"Retry-After": "3"}, ``), class: provider.NotSent, reason: "HTTP_429", hint: 3 * time.Second},
		{name: "Bare429WithoutHeadersGetsDefaultHint", message: answerWith(429, nil, `busy`), class: provider.NotSent, reason: "HTTP_429", hint: time.Second},
		{name: "Bare400IsPermanent", message: answerWith(400, nil, `bad`), class: provider.Permanent, reason: "HTTP_400"},
		{name: "Bare404IsPermanent", message: answerWith(404, nil, ``), class: provider.Permanent, reason: "HTTP_404"},
		{name: "Bare410IsDead", message: answerWith(410, nil, ``), class: provider.Permanent, reason: "HTTP_410", dead: true},
		{name: "Bare502IsUnknown", message: answerWith(502, nil, `gateway`), class: provider.Unknown, reason: "HTTP_502"},
		{name: "RedirectIsUnknown", message: answerWith(302, map[string]string{"Location": "/elsewhere"}, ``), class: provider.Unknown, reason: "HTTP_302"},
		{name: "TimeoutAfterWriteIsUnknown", message: hang, timeout: 300 * time.Millisecond, class: provider.Unknown, reason: "TIMEOUT"},
		{name: "HangUpAfterWriteIsUnknown", message: hangUp, class: provider.Unknown, reason: "CONNECTION_RESET"},
		{name: "TokenCode3001IsNotSent", token: code(400, 3001), class: provider.NotSent, reason: "TOKEN_BIZPPURIO_3001"},
		{name: "TokenCode3010IsNotSent", token: code(400, 3010), class: provider.NotSent, reason: "TOKEN_BIZPPURIO_3010"},
		{name: "TokenRateLimitIsNotSentWithHint", token: answerWith(429, map[string]string{"RateLimit-Reset": "2"}, `{"code":5002}`), class: provider.NotSent, reason: "TOKEN_BIZPPURIO_5002", hint: 2 * time.Second},
		{name: "Token500IsNotSent", token: answerWith(500, nil, ``), class: provider.NotSent, reason: "TOKEN_HTTP_500"},
		{name: "TokenUnreadableIsNotSent", token: answerWith(200, nil, `{"type":"Bearer"}`), class: provider.NotSent, reason: "TOKEN_BAD_RESPONSE"},
		{name: "TokenTimeoutIsNotSent", token: hang, timeout: 300 * time.Millisecond, class: provider.NotSent, reason: "TOKEN_TIMEOUT"},
		{name: "TokenHangUpIsNotSent", token: hangUp, class: provider.NotSent, reason: "TOKEN_CONNECTION_RESET"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			v := newVendor(t)
			cfg := testConfig(v, nil)
			if row.timeout > 0 {
				cfg.Timeout = row.timeout
			}
			b, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if row.message != nil {
				v.setMessage(row.message)
			}
			if row.token != nil {
				v.setToken(row.token)
			}
			o := b.Send(context.Background(), smsMessage("결제가 완료되었습니다."))
			if rate := row.reason == "BIZPPURIO_3008" || row.reason == "BIZPPURIO_5002" || row.reason == "HTTP_429"; o.RateLimited != rate {
				t.Fatalf("outcome = %+v, want RateLimited %v (a refusal for the rate slows the shared limit)", o, rate)
			}
			if o.Class != row.class || o.Reason != row.reason || o.RetryAfter != row.hint || o.ProviderRef != row.ref || o.DeadDestination != row.dead {
				t.Fatalf("outcome = %+v, want class %v reason %q hint %v ref %q dead %v", o, row.class, row.reason, row.hint, row.ref, row.dead)
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Failures of the connection itself, before anything was written.
func TestClassificationBeforeTheWrite(t *testing.T) {
	t.Parallel()
	t.Run("ConnectionRefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		b, v, _ := setup(t)
		if o := b.Send(context.Background(), smsMessage("hello")); o.Class != provider.Accepted {
			t.Fatalf("first send = %+v", o) // the token is cached now
		}
		v.srv.Close()
		v.srv.Client().CloseIdleConnections()
		o := b.Send(context.Background(), smsMessage("hello"))
		if o.Class != provider.NotSent || o.Reason != "CONNECTION_REFUSED" {
			t.Fatalf("outcome = %+v, want NotSent CONNECTION_REFUSED", o)
		}
	})
	t.Run("TokenConnectionRefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		addr := httpcalltest.ClosedAddr(t)
		v := newVendor(t)
		cfg := testConfig(v, nil)
		cfg.BaseURL = "https://" + addr
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if o := b.Send(context.Background(), smsMessage("hello")); o.Class != provider.NotSent || o.Reason != "TOKEN_CONNECTION_REFUSED" {
			t.Fatalf("outcome = %+v, want NotSent TOKEN_CONNECTION_REFUSED", o)
		}
	})
	t.Run("UntrustedCertificateIsNotSent", func(t *testing.T) {
		t.Parallel()
		v := newVendor(t)
		cfg := testConfig(v, nil)
		cfg.Client = &http.Client{Transport: &http.Transport{}}
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if o := b.Send(context.Background(), smsMessage("hello")); o.Class != provider.NotSent || o.Reason != "TOKEN_TLS_FAILURE" {
			t.Fatalf("outcome = %+v, want NotSent TOKEN_TLS_FAILURE", o)
		}
		if tokens, messages := v.counts(); tokens+messages != 0 {
			t.Fatalf("the vendor saw %d token and %d message requests", tokens, messages)
		}
	})
}

// TestRefusedBeforeTheCall: what the vendor would refuse is refused with
// no request at all.
func TestRefusedBeforeTheCall(t *testing.T) {
	t.Parallel()
	with := func(m provider.Message, f func(*provider.Message)) provider.Message { f(&m); return m }
	rows := []struct {
		name   string
		m      provider.Message
		reason string
	}{
		{"EmojiInSMS", smsMessage("결제 완료 😀"), "EUCKR_UNENCODABLE"},
		{"EmojiInAlimTalkFallback", atMessage("결제 완료 😀"), "EUCKR_UNENCODABLE"},
		{"UnencodableSubjectOfLMS", with(smsMessage(strings.Repeat("가", 46)), func(m *provider.Message) { m.Title = "제목 ✅" }), "EUCKR_UNENCODABLE"},
		{"LMSOver2000Bytes", smsMessage(strings.Repeat("가", 1000) + "a"), "TEXT_TOO_LONG"},
		{"SubjectOver64Bytes", with(smsMessage(strings.Repeat("가", 46)), func(m *provider.Message) { m.Title = strings.Repeat("나", 33) }), "SUBJECT_TOO_LONG"},
		{"AlimTalkOver1000Characters", atMessage(strings.Repeat("a", 1001)), "TEXT_TOO_LONG"},
		{"EmptyBody", smsMessage(""), "EMPTY_BODY"},
		{"NoAddress", with(smsMessage("hi"), func(m *provider.Message) { m.Address = "" }), "ADDRESS_MISSING"},
		{"NotAKoreanNumber", with(smsMessage("hi"), func(m *provider.Message) { m.Address = "+1 415 555 0100" }), "INVALID_NUMBER"},
		{"LettersInNumber", with(smsMessage("hi"), func(m *provider.Message) { m.Address = "010-CALL-ME" }), "INVALID_NUMBER"},
		{"KindWithoutTemplate", with(atMessage("hi"), func(m *provider.Message) { m.Kind = "unknown_kind" }), "NO_TEMPLATE"},
		{"EmailChannel", with(smsMessage("hi"), func(m *provider.Message) { m.Channel = heraldtype.ChannelEmail }), "UNSUPPORTED_CHANNEL"},
		{"MessageIDTooLong", with(smsMessage("hi"), func(m *provider.Message) { m.MessageID = strings.Repeat("x", 33) }), "REFKEY_INVALID"},
		{"MessageIDThatReadsBackAsAnother", with(smsMessage("hi"), func(m *provider.Message) { m.MessageID = "abc.s" }), "REFKEY_INVALID"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			b, v, _ := setup(t)
			o := b.Send(context.Background(), row.m)
			if o.Class != provider.Permanent || o.Reason != row.reason {
				t.Fatalf("outcome = %+v, want Permanent %s", o, row.reason)
			}
			if tokens, messages := v.counts(); tokens+messages != 0 {
				t.Fatalf("the vendor saw %d token and %d message requests", tokens, messages)
			}
		})
	}
}

// decoded is a JSON document as generic values, for comparing bodies.
func decoded(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	return v
}

// TestRequestBodies: each message type's request, field by field, as the
// vendor's manual spells it.
func TestRequestBodies(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("가", 46) // 92 EUC-KR bytes: an LMS
	head := `"account":"herald_api","refkey":"ntf_01JNQ8ZK3M4V5W6X7Y8Z9ABCDE.%s","from":"0212345678","to":"01012345678",`
	rows := []struct {
		name string
		m    provider.Message
		want string
	}{
		{"ShortSMS", smsMessage("결제가 완료되었습니다."),
			`{` + strings.Replace(head, "%s", "s", 1) + `"type":"sms","content":{"sms":{"message":"결제가 완료되었습니다."}}}`},
		{"LongTextIsLMSWithTitleAsSubject", smsMessage(long),
			`{` + strings.Replace(head, "%s", "s", 1) + `"type":"lms","content":{"lms":{"subject":"주문 안내","message":"` + long + `"}}}`},
		{"AlimTalkWithSMSFallback", atMessage("주문이 접수되었습니다."),
			`{` + strings.Replace(head, "%s", "a", 1) + `"type":"at","content":{"at":{"senderkey":"senderkey-1","templatecode":"TPL_PAID","message":"주문이 접수되었습니다."}},` +
				`"resend":{"first":"sms"},"recontent":{"sms":{"message":"주문이 접수되었습니다."}}}`},
		{"AlimTalkWithLMSFallbackSpelledMMS", atMessage(long),
			`{` + strings.Replace(head, "%s", "a", 1) + `"type":"at","content":{"at":{"senderkey":"senderkey-1","templatecode":"TPL_PAID","message":"` + long + `"}},` +
				`"resend":{"first":"mms"},"recontent":{"mms":{"subject":"주문 안내","message":"` + long + `"}}}`},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			b, v, _ := setup(t)
			if o := b.Send(context.Background(), row.m); o.Class != provider.Accepted || o.ProviderRef != "mk-1" {
				t.Fatalf("outcome = %+v", o)
			}
			got := v.lastMessage(t)
			if got.Auth != "Bearer "+tokenPrefix+"1" {
				t.Errorf("Authorization = %q", got.Auth)
			}
			if got.ContentType != "application/json; charset=utf-8" {
				t.Errorf("Content-Type = %q", got.ContentType)
			}
			if g, w := decoded(t, got.Body), decoded(t, []byte(row.want)); !reflect.DeepEqual(g, w) {
				t.Fatalf("body\n got %s\nwant %s", got.Body, row.want)
			}
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	v := newVendor(t)
	rows := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"NoAccount", func(c *Config) { c.Account = "" }, "account is required"},
		{"AccountWithColon", func(c *Config) { c.Account = "a:b" }, "account must be"},
		{"NoPassword", func(c *Config) { c.Password = "" }, "password is required"},
		{"NoFrom", func(c *Config) { c.From = "" }, "from is required"},
		{"FromNotANumber", func(c *Config) { c.From = "herald" }, "from must be"},
		{"BaseURLNotHTTP", func(c *Config) { c.BaseURL = "ftp://x" }, "base_url"},
		{"ShortCallbackToken", func(c *Config) { c.CallbackToken = "short" }, "callback token"},
		{"TemplatesWithoutSenderKey", func(c *Config) { c.SenderKey = "" }, "sender_key"},
		{"EmptyTemplateCode", func(c *Config) { c.Templates = map[string]string{"k": ""} }, "templates[k]"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(v, nil)
			row.edit(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), row.want) {
				t.Fatalf("New: %v, want an error naming %q", err, row.want)
			}
		})
	}
	t.Run("DefaultsToProduction", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(v, nil)
		cfg.BaseURL, cfg.Timeout = "", 0
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if b.messageURL != DefaultBaseURL+"/v3/message" || b.tokens.url != DefaultBaseURL+"/v1/token" || b.timeout != 10*time.Second {
			t.Fatalf("urls %q %q timeout %v", b.messageURL, b.tokens.url, b.timeout)
		}
	})
}
