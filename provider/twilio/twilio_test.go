package twilio_test

// These tests hold the adapter to its package comment's tables over real
// HTTP: a local fake Twilio (httptest) answers in the documented shapes (the
// Message resource, the error object {code, message, more_info, status}),
// checks the path and basic auth, and records every form it was sent.
// Ordering is by channels and httptrace hooks, never by sleeping.

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall/httpcalltest"
	"github.com/heraldhq/herald/provider/twilio"
)

const (
	accountSID   = "AC0123456789abcdef0123456789abcdef"
	authToken    = "tok-3f9a1c77e2b04d5e8a6b"
	apiKeySID    = "SK0123456789abcdef0123456789abcdef"
	apiKeySecret = "sec-8b2d6e0f41a94c3b9d7e"
	fromNumber   = "+15005550006"
	serviceSID   = "MG0123456789abcdef0123456789abcdef"
	callbackURL  = "https://herald.example.com/v1/callbacks/twilio"
	messageSid   = "SM0123456789abcdef0123456789abcdef"
	waitLimit    = 30 * time.Second
)

var quiet = log.New(io.Discard, "", 0)

func message(id string) provider.Message {
	return provider.Message{
		MessageID: id, Tenant: "tenant-1", Recipient: "user-42", Kind: "payment.paid",
		Channel: heraldtype.ChannelSMS, Address: "+821012345678",
		Title: "Payment received", Body: "Paid 5,000 won",
	}
}

// hit is one request as the fake saw it.
type hit struct {
	method, path string
	user, pass   string
	header       http.Header
	form         url.Values
}

// fake is a local Twilio: it records requests and answers with answer.
type fake struct {
	*httptest.Server
	mu   sync.Mutex
	hits []hit
}

func newFake(t testing.TB, answer http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		h := hit{method: r.Method, path: r.URL.Path, user: user, pass: pass, header: r.Header.Clone()}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				t.Errorf("fake twilio: unreadable form: %v", err)
			}
			h.form = r.PostForm
		}
		f.mu.Lock()
		f.hits = append(f.hits, h)
		f.mu.Unlock()
		answer(w, r)
	}))
	ts.Config.ErrorLog = quiet
	ts.Start()
	t.Cleanup(ts.Close)
	f.Server = ts
	return f
}

func (f *fake) only(t *testing.T) hit {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.hits) != 1 {
		t.Fatalf("fake twilio saw %d requests, want exactly 1", len(f.hits))
	}
	return f.hits[0]
}

func (f *fake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.hits)
}

// config is a valid configuration against base.
func config(base string) twilio.Config {
	return twilio.Config{BaseURL: base, AccountSID: accountSID, AuthToken: authToken, From: fromNumber,
		CallbackURL: callbackURL, Timeout: waitLimit}
}

func newTwilio(t testing.TB, cfg twilio.Config) *twilio.Twilio {
	t.Helper()
	tw, err := twilio.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tw
}

// created answers as Twilio does to a successful create.
func created(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"sid": %q, "account_sid": %q, "to": %q, "from": %q, "body": %q, "status": "queued",
			"num_segments": "1", "direction": "outbound-api", "api_version": "2010-04-01", "price": null,
			"error_code": null, "error_message": null, "date_created": "Tue, 27 Nov 2018 16:14:39 +0000",
			"uri": "/2010-04-01/Accounts/%s/Messages/%s.json"}`,
			messageSid, accountSID, r.PostForm.Get("To"), r.PostForm.Get("From"), r.PostForm.Get("Body"), accountSID, messageSid)
	}
}

// refused answers with Twilio's error object; code 0 leaves the body empty.
func refused(status, code int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if code != 0 {
			fmt.Fprintf(w, `{"code": %d, "message": "refused (the caller sent %s)", "more_info": "https://www.twilio.com/docs/errors/%d", "status": %d}`,
				code, r.Header.Get("Authorization"), code, status)
		}
	}
}

// TestClassificationTable walks the package comment's table row by row.
func TestClassificationTable(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name       string
		answer     http.HandlerFunc
		class      provider.Class
		reason     string
		dead       bool
		retryAfter time.Duration
		ref        string
	}{
		{"Created201IsAcceptedWithTheSid", created(201), provider.Accepted, "", false, 0, messageSid},
		{"OK200IsAccepted", created(200), provider.Accepted, "", false, 0, messageSid},
		{"Created201WithUnreadableBodyIsAcceptedWithoutSid", refused(201, 0), provider.Accepted, "", false, 0, ""},
		{"Code21211InvalidToIsADeadDestination", refused(400, 21211), provider.Permanent, "TWILIO_21211", true, 0, ""},
		{"Code21614NotAMobileNumberIsADeadDestination", refused(400, 21614), provider.Permanent, "TWILIO_21614", true, 0, ""},
		{"Code21635LandlineIsADeadDestination", refused(400, 21635), provider.Permanent, "TWILIO_21635", true, 0, ""},
		{"Code21610UnsubscribedIsPermanentNotDead", refused(400, 21610), provider.Permanent, "TWILIO_21610", false, 0, ""},
		{"Code21408RegionNotEnabledIsPermanent", refused(400, 21408), provider.Permanent, "TWILIO_21408", false, 0, ""},
		{"Code21606FromNotCapableIsPermanent", refused(400, 21606), provider.Permanent, "TWILIO_21606", false, 0, ""},
		{"Code21617BodyTooLongIsPermanent", refused(400, 21617), provider.Permanent, "TWILIO_21617", false, 0, ""},
		{"Code21611SenderQueueFullIsNotSent", refused(400, 21611), provider.NotSent, "TWILIO_21611", false, 0, ""},
		{"Status400WithoutCodeIsPermanent", refused(400, 0), provider.Permanent, "HTTP_400", false, 0, ""},
		{"Status404Code20404IsPermanent", refused(404, 20404), provider.Permanent, "TWILIO_20404", false, 0, ""},
		{"Status410IsPermanentButSaysNothingOfTheNumber", refused(410, 0), provider.Permanent, "HTTP_410", false, 0, ""},
		{"Status422IsPermanent", refused(422, 0), provider.Permanent, "HTTP_422", false, 0, ""},
		{"Status401Code20003IsNotSent", refused(401, 20003), provider.NotSent, "TWILIO_20003", false, 0, ""},
		{"Status403IsNotSent", refused(403, 0), provider.NotSent, "HTTP_403", false, 0, ""},
		{"Status429Code20429IsNotSentWithRetryAfter", refused(429, 20429, "Retry-After", "7"), provider.NotSent, "TWILIO_20429", false, 7 * time.Second, ""},
		{"Status429WithoutRetryAfterIsNotSent", refused(429, 20429), provider.NotSent, "TWILIO_20429", false, 0, ""},
		{"Status500Code20500IsUnknown", refused(500, 20500), provider.Unknown, "TWILIO_20500", false, 0, ""},
		{"Status503WithoutBodyIsUnknown", refused(503, 0), provider.Unknown, "HTTP_503", false, 0, ""},
		{"Status302IsUnknownAndNotFollowed", refused(302, 0, "Location", "/elsewhere"), provider.Unknown, "HTTP_302", false, 0, ""},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, row.answer)
			out := newTwilio(t, config(f.URL)).Send(context.Background(), message("msg-"+row.name))
			if rate := row.reason == "TWILIO_20429" || row.reason == "HTTP_429"; out.RateLimited != rate {
				t.Fatalf("outcome = %+v, want RateLimited %v (a refusal for the rate slows the shared limit)", out, rate)
			}
			if out.Class != row.class || out.Reason != row.reason || out.DeadDestination != row.dead ||
				out.RetryAfter != row.retryAfter || out.ProviderRef != row.ref {
				t.Fatalf("outcome = %+v, want class %v reason %q dead %v retry-after %v ref %q",
					out, row.class, row.reason, row.dead, row.retryAfter, row.ref)
			}
			h := f.only(t) // exactly one call, whatever the answer (a 302 is not followed)
			if h.method != http.MethodPost || h.path != "/2010-04-01/Accounts/"+accountSID+"/Messages.json" {
				t.Errorf("request = %s %s, want POST to the account's Messages.json", h.method, h.path)
			}
		})
	}
}

func TestFormBody(t *testing.T) {
	t.Parallel()
	type want struct {
		user, pass string
		form       map[string]string // every field the form must hold, and only those
	}
	cases := []struct {
		name string
		cfg  func(*twilio.Config)
		msg  func(*provider.Message)
		want want
	}{
		{"FromNumberWithAccountAuthAndCallback", nil, nil, want{accountSID, authToken, map[string]string{
			"To": "+821012345678", "From": fromNumber, "Body": "Payment received\nPaid 5,000 won",
			"StatusCallback": callbackURL + "?message_id=msg+1%2F%C3%BC%26x%3Dy",
		}}},
		{"MessagingServiceInsteadOfFrom", func(c *twilio.Config) { c.From = ""; c.MessagingServiceSID = serviceSID }, nil,
			want{accountSID, authToken, map[string]string{
				"To": "+821012345678", "MessagingServiceSid": serviceSID, "Body": "Payment received\nPaid 5,000 won",
				"StatusCallback": callbackURL + "?message_id=msg+1%2F%C3%BC%26x%3Dy",
			}}},
		{"APIKeyAuthAndBothSenders", func(c *twilio.Config) {
			c.APIKeySID, c.APIKeySecret, c.MessagingServiceSID = apiKeySID, apiKeySecret, serviceSID
		}, nil,
			want{apiKeySID, apiKeySecret, map[string]string{
				"To": "+821012345678", "From": fromNumber, "MessagingServiceSid": serviceSID, "Body": "Payment received\nPaid 5,000 won",
				"StatusCallback": callbackURL + "?message_id=msg+1%2F%C3%BC%26x%3Dy",
			}}},
		{"NoCallbackURLAsksForNoCallback", func(c *twilio.Config) { c.CallbackURL = "" }, nil,
			want{accountSID, authToken, map[string]string{"To": "+821012345678", "From": fromNumber, "Body": "Payment received\nPaid 5,000 won"}}},
		{"CallbackURLKeepsItsOwnQuery", func(c *twilio.Config) { c.CallbackURL = callbackURL + "?region=eu&b=%2F" }, nil,
			want{accountSID, authToken, map[string]string{"To": "+821012345678", "From": fromNumber, "Body": "Payment received\nPaid 5,000 won",
				"StatusCallback": callbackURL + "?region=eu&b=%2F&message_id=msg+1%2F%C3%BC%26x%3Dy"}}},
		{"NoTitleSendsTheBodyAlone", nil, func(m *provider.Message) { m.Title = "" },
			want{accountSID, authToken, map[string]string{"To": "+821012345678", "From": fromNumber, "Body": "Paid 5,000 won",
				"StatusCallback": callbackURL + "?message_id=msg+1%2F%C3%BC%26x%3Dy"}}},
		{"NoBodySendsTheTitleAlone", nil, func(m *provider.Message) { m.Body = "" },
			want{accountSID, authToken, map[string]string{"To": "+821012345678", "From": fromNumber, "Body": "Payment received",
				"StatusCallback": callbackURL + "?message_id=msg+1%2F%C3%BC%26x%3Dy"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, created(201))
			cfg := config(f.URL)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			m := message("msg 1/ü&x=y")
			if tc.msg != nil {
				tc.msg(&m)
			}
			if out := newTwilio(t, cfg).Send(context.Background(), m); out.Class != provider.Accepted {
				t.Fatalf("outcome = %+v, want accepted", out)
			}
			h := f.only(t)
			if h.user != tc.want.user || h.pass != tc.want.pass {
				t.Errorf("basic auth user = %q (password right: %v), want %q", h.user, h.pass == tc.want.pass, tc.want.user)
			}
			if ct := h.header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
				t.Errorf("Content-Type = %q", ct)
			}
			if len(h.form) != len(tc.want.form) {
				t.Errorf("form = %v, want exactly %v", h.form, tc.want.form)
			}
			for k, v := range tc.want.form {
				if got := h.form[k]; len(got) != 1 || got[0] != v {
					t.Errorf("form[%s] = %q, want [%q]", k, got, v)
				}
			}
			if cb := h.form.Get("StatusCallback"); cb != "" {
				u, err := url.Parse(cb)
				if err != nil || u.Query().Get("message_id") != m.MessageID {
					t.Errorf("StatusCallback %q does not name message %q", cb, m.MessageID)
				}
			}
		})
	}
}

func TestMessageWithoutAddressMakesNoCall(t *testing.T) {
	t.Parallel()
	f := newFake(t, created(201))
	m := message("msg-no-address")
	m.Address = ""
	out := newTwilio(t, config(f.URL)).Send(context.Background(), m)
	if out.Class != provider.Permanent || out.Reason != "ADDRESS_MISSING" {
		t.Fatalf("outcome = %+v, want permanent ADDRESS_MISSING", out)
	}
	if n := f.count(); n != 0 {
		t.Fatalf("fake saw %d requests, want none", n)
	}
}

// e164Only answers as Twilio does: a To that is not E.164 (+, then 8 to 15
// digits, the first not 0) is refused with 21211, anything else created.
func e164Only(w http.ResponseWriter, r *http.Request) {
	to := r.PostForm.Get("To")
	ok := len(to) >= 9 && len(to) <= 16 && to[0] == '+' && to[1] != '0'
	for i := 1; ok && i < len(to); i++ {
		ok = to[i] >= '0' && to[i] <= '9'
	}
	if !ok {
		refused(400, 21211)(w, r)
		return
	}
	created(201)(w, r)
}

// TestNumbersGoAsE164: a profile's number reaches Twilio in E.164 however it
// was spelled, and one without its country code is refused before any call
// (the package comment's Numbers).
func TestNumbersGoAsE164(t *testing.T) {
	t.Parallel()
	sent := []struct{ name, address, to string }{
		{"Spaces", "+1 415 555 0000", "+14155550000"},
		{"ParenthesesAndHyphen", "+1 (415) 555-0000", "+14155550000"},
		{"Dots", "+1.415.555.0000", "+14155550000"},
		{"AlreadyE164", "+14155550000", "+14155550000"},
		{"KoreanMobileWithHyphens", "+82 10-1234-0000", "+821012340000"},
		{"KoreanTrunkZeroAfterTheCountryCode", "+82 010-1234-0000", "+821012340000"},
		{"TrunkZeroInParentheses", "+44 (0)20 7946 0000", "+442079460000"},
	}
	for _, row := range sent {
		t.Run("Sends"+row.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, e164Only)
			m := message("msg-number")
			m.Address = row.address
			if out := newTwilio(t, config(f.URL)).Send(context.Background(), m); out.Class != provider.Accepted {
				t.Fatalf("%q: outcome = %+v, want accepted", row.address, out)
			}
			if got := f.only(t).form.Get("To"); got != row.to {
				t.Fatalf("%q went as To %q, want %q", row.address, got, row.to)
			}
		})
	}
	refused := []struct{ name, address string }{
		{"KoreanNationalWithoutCountry", "010-1234-0000"},
		{"USNationalWithoutCountry", "(415) 555-0000"},
		{"DigitsWithoutPlus", "14155550000"},
		{"InternationalPrefix00", "00 1 415 555 0000"},
		{"Letters", "+1 415 CALL NOW"},
		{"TooShort", "+1 234"},
		{"TooLong", "+1 234 567 890 123 456"},
		{"CountryCodeZero", "+0 415 555 0000"},
		{"PlusNotFirst", "1+4155550000"},
	}
	for _, row := range refused {
		t.Run("Refuses"+row.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, e164Only)
			m := message("msg-number")
			m.Address = row.address
			out := newTwilio(t, config(f.URL)).Send(context.Background(), m)
			if out.Class != provider.Permanent || out.Reason != "INVALID_NUMBER" || out.DeadDestination {
				t.Fatalf("%q: outcome = %+v, want permanent INVALID_NUMBER, not dead", row.address, out)
			}
			if n := f.count(); n != 0 {
				t.Fatalf("%q: fake saw %d requests, want none", row.address, n)
			}
		})
	}
}

func TestTransportFailures(t *testing.T) {
	t.Parallel()
	t.Run("ConnectionRefusedIsNotSent", func(t *testing.T) {
		t.Parallel()
		addr := httpcalltest.ClosedAddr(t)
		out := newTwilio(t, config("http://"+addr)).Send(context.Background(), message("msg-refused"))
		if out.Class != provider.NotSent || out.Reason != "CONNECTION_REFUSED" {
			t.Fatalf("outcome = %+v, want not_sent CONNECTION_REFUSED", out)
		}
	})
	t.Run("ResetAfterTheRequestWasWrittenIsUnknownAndNotReplayed", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		out := newTwilio(t, config(f.URL)).Send(context.Background(), message("msg-reset"))
		if out.Class != provider.Unknown {
			t.Fatalf("outcome = %+v, want unknown", out)
		}
		if n := f.count(); n != 1 {
			t.Fatalf("fake saw %d requests, want exactly 1 (never replayed)", n)
		}
	})
	t.Run("ClosedWithoutAnswerOnAReusedConnectionIsUnknownAndNotReplayed", func(t *testing.T) {
		t.Parallel()
		// The first call leaves a kept-alive connection; the second is
		// written on it and the fake closes it unanswered, which is when
		// net/http would replay a request it thinks it may.
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			if r.PostForm.Get("Body") == "Payment received\nPaid 5,000 won" {
				created(201)(w, r)
				return
			}
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		})
		tw := newTwilio(t, config(f.URL))
		var reused bool
		if out := tw.Send(context.Background(), message("msg-first")); out.Class != provider.Accepted {
			t.Fatalf("first call = %+v, want accepted", out)
		}
		second := message("msg-second")
		second.Body = "again"
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = reused || i.Reused }})
		if out := tw.Send(ctx, second); out.Class != provider.Unknown {
			t.Fatalf("second call = %+v, want unknown", out)
		}
		if !reused {
			t.Skip("the second call did not reuse the connection, so no replay could be tried")
		}
		if n := f.count(); n != 2 {
			t.Fatalf("fake saw %d requests, want 2 (the second never replayed)", n)
		}
	})
	t.Run("TimeoutAfterTheRequestWasWrittenIsUnknown", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) { httpcalltest.Hang(r, release) })
		t.Cleanup(func() { close(release) }) // runs before the fake's Close, which waits for this handler
		ctx := httpcalltest.NewDeadline()
		// The adapter's own WroteRequest hook runs before this one (hooks
		// compose newest first), so the deadline passes once it is recorded.
		ctx.Hook(&httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { ctx.Expire() }})
		out := newTwilio(t, config(f.URL)).Send(ctx, message("msg-timeout"))
		if out.Class != provider.Unknown || out.Reason != "TIMEOUT" {
			t.Fatalf("outcome = %+v, want unknown TIMEOUT", out)
		}
	})
	t.Run("DeadlineBeforeTheCallIsNotSent", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, created(201))
		ctx := httpcalltest.NewDeadline()
		ctx.Expire()
		out := newTwilio(t, config(f.URL)).Send(ctx, message("msg-expired"))
		if out.Class != provider.NotSent {
			t.Fatalf("outcome = %+v, want not_sent", out)
		}
		if n := f.count(); n != 0 {
			t.Fatalf("fake saw %d requests, want none", n)
		}
	})
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		cfg   func(*twilio.Config)
		field string
	}{
		{"AccountSIDMissing", func(c *twilio.Config) { c.AccountSID = "" }, "account_sid"},
		{"AccountSIDIsAnAPIKey", func(c *twilio.Config) { c.AccountSID = apiKeySID }, "account_sid"},
		{"NoCredentials", func(c *twilio.Config) { c.AuthToken = "" }, "auth_token"},
		{"APIKeyWithoutSecret", func(c *twilio.Config) { c.APIKeySID = apiKeySID }, "api_key_secret"},
		{"APISecretWithoutKey", func(c *twilio.Config) { c.APIKeySecret = apiKeySecret }, "api_key_sid"},
		{"CallbackWithoutAuthToken", func(c *twilio.Config) { c.AuthToken, c.APIKeySID, c.APIKeySecret = "", apiKeySID, apiKeySecret }, "auth_token"},
		{"NoSender", func(c *twilio.Config) { c.From = "" }, "from"},
		{"BaseURLNotHTTP", func(c *twilio.Config) { c.BaseURL = "ftp://api.twilio.com" }, "base_url"},
		{"BaseURLWithCredentials", func(c *twilio.Config) { c.BaseURL = "https://" + accountSID + ":" + authToken + "@api.twilio.com" }, "base_url"},
		{"CallbackURLRelative", func(c *twilio.Config) { c.CallbackURL = "/v1/callbacks/twilio" }, "callback_url"},
		{"CallbackURLWithMessageID", func(c *twilio.Config) { c.CallbackURL = callbackURL + "?message_id=x" }, "callback_url"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := config("")
			tc.cfg(&cfg)
			_, err := twilio.New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("New error = %v, want one naming %s", err, tc.field)
			}
			assertNoSecret(t, err.Error())
		})
	}
	t.Run("APIKeyWithoutCallbackNeedsNoAuthToken", func(t *testing.T) {
		t.Parallel()
		cfg := config("")
		cfg.AuthToken, cfg.CallbackURL, cfg.APIKeySID, cfg.APIKeySecret = "", "", apiKeySID, apiKeySecret
		if _, err := twilio.New(cfg); err != nil {
			t.Fatalf("New: %v", err)
		}
	})
}

// assertNoSecret fails if s holds a credential, alone or as basic auth.
func assertNoSecret(t *testing.T, s string) {
	t.Helper()
	for _, secret := range []string{
		authToken, apiKeySecret,
		base64.StdEncoding.EncodeToString([]byte(accountSID + ":" + authToken)),
		base64.StdEncoding.EncodeToString([]byte(apiKeySID + ":" + apiKeySecret)),
	} {
		if strings.Contains(s, secret) {
			t.Errorf("%q holds a secret", s)
		}
	}
}

// TestSecretsNeverReachAReasonOrError feeds every failure path a secret to
// leak: the fake echoes the Authorization header into its error messages.
func TestSecretsNeverReachAReasonOrError(t *testing.T) {
	t.Parallel()
	answers := []http.HandlerFunc{
		refused(400, 21211), refused(400, 0), refused(401, 20003), refused(403, 20003), refused(404, 20404),
		refused(429, 20429), refused(500, 20500), refused(503, 0), refused(302, 0),
		func(w http.ResponseWriter, r *http.Request) { // a 200 that is not JSON, echoing the credentials
			fmt.Fprint(w, r.Header.Get("Authorization"))
		},
		func(w http.ResponseWriter, r *http.Request) { // an unknown status, echoing the credentials
			fmt.Fprintf(w, `{"sid": %q, "status": %q}`, messageSid, r.Header.Get("Authorization"))
		},
	}
	for _, apiKey := range []bool{false, true} {
		for i, answer := range answers {
			f := newFake(t, answer)
			cfg := config(f.URL)
			if apiKey {
				cfg.APIKeySID, cfg.APIKeySecret = apiKeySID, apiKeySecret
			}
			tw := newTwilio(t, cfg)
			out := tw.Send(context.Background(), message(fmt.Sprintf("msg-secret-%d", i)))
			assertNoSecret(t, out.Reason)
			assertNoSecret(t, out.ProviderRef)
			rep, err := tw.Status(context.Background(), provider.StatusQuery{MessageID: "m", ProviderRef: messageSid})
			assertNoSecret(t, rep.Reason)
			if err != nil {
				assertNoSecret(t, err.Error())
			}
		}
	}
	// Transport failures, before and after the write.
	addr := httpcalltest.ClosedAddr(t)
	tw := newTwilio(t, config("http://"+addr))
	assertNoSecret(t, tw.Send(context.Background(), message("msg-secret-refused")).Reason)
	if _, err := tw.Status(context.Background(), provider.StatusQuery{ProviderRef: messageSid}); err == nil {
		t.Fatal("status look-up against a closed port succeeded")
	} else {
		assertNoSecret(t, err.Error())
	}
	// Every way a callback fails.
	for _, req := range badCallbacks(t) {
		if _, err := newTwilio(t, config("")).ParseCallback(req.r, req.body); err == nil {
			t.Errorf("%s: ParseCallback accepted it", req.name)
		} else {
			assertNoSecret(t, err.Error())
		}
	}
}
