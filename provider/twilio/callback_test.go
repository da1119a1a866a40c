package twilio_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/twilio"
)

// sign is Twilio's signature as its docs describe it, written apart from
// the adapter's: base64(HMAC-SHA1(token, URL + name+value of each POST
// parameter, sorted by name; a repeated name's values in order)).
func sign(token, rawURL string, params url.Values) string {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	s := rawURL
	for _, n := range names {
		vs := append([]string(nil), params[n]...)
		sort.Strings(vs)
		for _, v := range vs {
			s += n + v
		}
	}
	mac := hmac.New(sha1.New, []byte(token))
	mac.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// statusParams is a status callback's body as Twilio documents it.
func statusParams(status, errorCode string) url.Values {
	v := url.Values{
		"AccountSid": {accountSID}, "ApiVersion": {"2010-04-01"}, "From": {fromNumber}, "To": {"+821012345678"},
		"MessageSid": {messageSid}, "SmsSid": {messageSid}, "MessageStatus": {status}, "SmsStatus": {status},
	}
	if errorCode != "" {
		v.Set("ErrorCode", errorCode)
	}
	return v
}

// callback is a request as herald receives it behind its public URL: the
// Host is whatever the proxy sets, the path and query are Twilio's.
func callback(query string, params url.Values, sig string) (*http.Request, []byte) {
	body := []byte(params.Encode())
	r := httptest.NewRequest(http.MethodPost, "/v1/callbacks/twilio?"+query, strings.NewReader(string(body)))
	r.Host = "10.0.0.7:8080"
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if sig != "" {
		r.Header.Set(twilio.SignatureHeader, sig)
	}
	return r, body
}

// signedCallback is a callback for message id signed as Twilio signs it.
func signedCallback(id string, params url.Values) (*http.Request, []byte) {
	q := "message_id=" + url.QueryEscape(id)
	return callback(q, params, sign(authToken, callbackURL+"?"+q, params))
}

// TestTwilioSignatureVectors checks the signature against vectors from
// Twilio's own material: the docs' example (TwilioDevEd/api-snippets,
// security/signature_validation) and twilio-go's request validator test,
// including its URL signed with the default port.
func TestTwilioSignatureVectors(t *testing.T) {
	t.Parallel()
	params := func(caller string) url.Values {
		return url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {caller}, "Digits": {"1234"}, "From": {caller}, "To": {"+18005551212"}}
	}
	vectors := []struct {
		name, callbackURL, caller, sig string
	}{
		{"TwilioDocsExample", "https://mycompany.com/myapp.php", "+14158675310", "GvWf1cFY/Q7PnoempGyD5oXAezc="},
		{"TwilioGoValidatorTest", "https://mycompany.com/myapp.php", "+14158675309", "RSOYDt4T1cUTdK1PDd93/VVr8B8="},
		{"TwilioGoSignedWithDefaultPort", "https://mycompany.com/myapp.php", "+14158675309", "kvajT1Ptam85bY51eRf/AJRuM3w="},
		{"TwilioGoConfiguredWithAPortSignedWithout", "https://mycompany.com:1234/myapp.php", "+14158675309", "RSOYDt4T1cUTdK1PDd93/VVr8B8="},
	}
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			if v.name == "TwilioDocsExample" || v.name == "TwilioGoValidatorTest" {
				if got := sign("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params(v.caller)); got != v.sig {
					t.Fatalf("the test's own signer gives %s, want %s", got, v.sig)
				}
			}
			cfg := config("")
			cfg.AuthToken, cfg.CallbackURL = "12345", v.callbackURL
			r, body := callback("foo=1&bar=2", params(v.caller), v.sig)
			_, err := newTwilio(t, cfg).ParseCallback(r, body)
			// The signature holds; a voice callback is no message report.
			if !errors.Is(err, provider.ErrBadCallback) {
				t.Fatalf("ParseCallback error = %v, want the signature to pass and ErrBadCallback", err)
			}
			r, body = callback("foo=1&bar=2", params(v.caller+"1"), v.sig)
			if _, err := newTwilio(t, cfg).ParseCallback(r, body); !errors.Is(err, provider.ErrBadSignature) {
				t.Fatalf("with a changed parameter: error = %v, want ErrBadSignature", err)
			}
		})
	}
}

// TestCallbackReports walks the report table of the package comment.
func TestCallbackReports(t *testing.T) {
	t.Parallel()
	rows := []struct {
		status, code string
		result       provider.ReportResult
		reason       string
		dead         bool
	}{
		{"delivered", "", provider.ReportDelivered, "TWILIO_DELIVERED", false},
		{"read", "", provider.ReportDelivered, "TWILIO_READ", false},
		{"undelivered", "30003", provider.ReportFailed, "TWILIO_30003", false},
		{"undelivered", "30005", provider.ReportFailed, "TWILIO_30005", true},
		{"undelivered", "30006", provider.ReportFailed, "TWILIO_30006", true},
		{"undelivered", "30007", provider.ReportFailed, "TWILIO_30007", false},
		{"failed", "21610", provider.ReportFailed, "TWILIO_21610", false},
		{"failed", "21211", provider.ReportFailed, "TWILIO_21211", true},
		{"failed", "30001", provider.ReportFailed, "TWILIO_30001", false},
		{"failed", "", provider.ReportFailed, "TWILIO_FAILED", false},
		{"canceled", "", provider.ReportFailed, "TWILIO_CANCELED", false},
		{"queued", "", provider.ReportPending, "TWILIO_QUEUED", false},
		{"accepted", "", provider.ReportPending, "TWILIO_ACCEPTED", false},
		{"scheduled", "", provider.ReportPending, "TWILIO_SCHEDULED", false},
		{"sending", "", provider.ReportPending, "TWILIO_SENDING", false},
		{"sent", "", provider.ReportPending, "TWILIO_SENT", false},
		{"partially_delivered", "", provider.ReportPending, "TWILIO_PARTIALLY_DELIVERED", false},
	}
	for _, row := range rows {
		t.Run(row.status+row.code, func(t *testing.T) {
			t.Parallel()
			r, body := signedCallback("msg 7/ü", statusParams(row.status, row.code))
			reps, err := newTwilio(t, config("")).ParseCallback(r, body)
			if err != nil {
				t.Fatalf("ParseCallback: %v", err)
			}
			want := provider.Report{MessageID: "msg 7/ü", ProviderRef: messageSid, Result: row.result, Reason: row.reason, DeadDestination: row.dead}
			if len(reps) != 1 || reps[0] != want {
				t.Fatalf("reports = %+v, want [%+v]", reps, want)
			}
		})
	}
}

type badCallback struct {
	name string
	r    *http.Request
	body []byte
	want error
}

// badCallbacks are callbacks that must be refused, each with its error.
func badCallbacks(t *testing.T) []badCallback {
	t.Helper()
	params := statusParams("delivered", "")
	q := "message_id=msg-1"
	good := sign(authToken, callbackURL+"?"+q, params)
	var out []badCallback
	add := func(name string, r *http.Request, body []byte, want error) {
		out = append(out, badCallback{name, r, body, want})
	}
	r, b := callback(q, params, "")
	add("MissingSignature", r, b, provider.ErrBadSignature)
	r, b = callback(q, params, "not-a-signature")
	add("GarbageSignature", r, b, provider.ErrBadSignature)
	r, b = callback(q, params, good[:len(good)-2])
	add("TruncatedSignature", r, b, provider.ErrBadSignature)
	r, b = callback(q, params, good+"AA")
	add("ExtendedSignature", r, b, provider.ErrBadSignature)
	r, b = callback(q, params, sign("another-token", callbackURL+"?"+q, params))
	add("SignedWithAnotherToken", r, b, provider.ErrBadSignature)
	tampered := statusParams("delivered", "")
	tampered.Set("MessageStatus", "undelivered")
	r, b = callback(q, tampered, good)
	add("TamperedParameter", r, b, provider.ErrBadSignature)
	extra := statusParams("delivered", "")
	extra.Set("ErrorCode", "30005")
	r, b = callback(q, extra, good)
	add("AddedParameter", r, b, provider.ErrBadSignature)
	r, b = callback("message_id=msg-2", params, good)
	add("TamperedMessageID", r, b, provider.ErrBadSignature)
	r, b = callback(q, params, sign(authToken, "http://10.0.0.7:8080/v1/callbacks/twilio?"+q, params))
	add("SignedOverTheHostHeaderURL", r, b, provider.ErrBadSignature)
	r, b = callback(q, params, good)
	b = []byte("%zz" + string(b))
	add("BodyNotAForm", r, b, provider.ErrBadSignature)
	noID := sign(authToken, callbackURL+"?other=1", params)
	r, b = callback("other=1", params, noID)
	add("SignedButNoMessageID", r, b, provider.ErrBadCallback)
	inbound := statusParams("received", "")
	r, b = callback(q, inbound, sign(authToken, callbackURL+"?"+q, inbound))
	add("SignedInboundStatus", r, b, provider.ErrBadCallback)
	echo := statusParams("Basic "+base64.StdEncoding.EncodeToString([]byte(accountSID+":"+authToken)), "")
	r, b = callback(q, echo, sign(authToken, callbackURL+"?"+q, echo))
	add("SignedStatusEchoingCredentials", r, b, provider.ErrBadCallback)
	oddCode := statusParams("failed", "3000x")
	r, b = callback(q, oddCode, sign(authToken, callbackURL+"?"+q, oddCode))
	add("SignedNonNumericErrorCode", r, b, provider.ErrBadCallback)
	return out
}

func TestCallbackRefusals(t *testing.T) {
	t.Parallel()
	for _, bc := range badCallbacks(t) {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			reps, err := newTwilio(t, config("")).ParseCallback(bc.r, bc.body)
			if !errors.Is(err, bc.want) || reps != nil {
				t.Fatalf("ParseCallback = %v, %v; want no reports and %v", reps, err, bc.want)
			}
		})
	}
	t.Run("NoCallbackURLConfiguredRefusesEverything", func(t *testing.T) {
		t.Parallel()
		cfg := config("")
		cfg.CallbackURL = ""
		r, body := signedCallback("msg-1", statusParams("delivered", ""))
		if _, err := newTwilio(t, cfg).ParseCallback(r, body); !errors.Is(err, provider.ErrBadSignature) {
			t.Fatalf("error = %v, want ErrBadSignature", err)
		}
	})
}

// TestFakeTwilioCallsBackTheURLItWasGiven is the whole loop: the fake keeps
// the StatusCallback a create named, then posts a signed report to herald's
// callback server (reached at a local address, as behind a proxy) with
// exactly that path and query.
func TestFakeTwilioCallsBackTheURLItWasGiven(t *testing.T) {
	t.Parallel()
	callbacks := make(chan string, 1)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		callbacks <- r.PostForm.Get("StatusCallback")
		created(201)(w, r)
	})
	cfg := config(f.URL)
	cfg.CallbackURL = callbackURL + "?tenant=t%201"
	tw := newTwilio(t, cfg)
	got := make(chan []provider.Report, 1)
	herald := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reps, err := tw.ParseCallback(r, body)
		if err != nil {
			t.Errorf("ParseCallback: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		got <- reps
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(herald.Close)

	m := message("msg 9&x=ü")
	if out := tw.Send(context.Background(), m); out.Class != provider.Accepted || out.ProviderRef != messageSid {
		t.Fatalf("send = %+v, want accepted with the sid", out)
	}
	statusCallback := <-callbacks
	u, err := url.Parse(statusCallback)
	if err != nil {
		t.Fatal(err)
	}
	params := statusParams("undelivered", "30006")
	req, _ := http.NewRequest(http.MethodPost, herald.URL+u.Path+"?"+u.RawQuery, strings.NewReader(params.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(twilio.SignatureHeader, sign(authToken, statusCallback, params))
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("herald answered %d", resp.StatusCode)
	}
	want := provider.Report{MessageID: m.MessageID, ProviderRef: messageSid, Result: provider.ReportFailed, Reason: "TWILIO_30006", DeadDestination: true}
	if reps := <-got; len(reps) != 1 || reps[0] != want {
		t.Fatalf("reports = %+v, want [%+v]", reps, want)
	}
}

// FuzzParseCallback: any request either yields one report or an error
// wrapping ErrBadSignature or ErrBadCallback; a signature over exactly what
// arrives always passes the check.
func FuzzParseCallback(f *testing.F) {
	f.Add("message_id=msg-1", statusParams("delivered", "").Encode(), true)
	f.Add("message_id=msg-1", statusParams("undelivered", "30005").Encode(), true)
	f.Add("message_id=a%20b&x=1", "MessageStatus=sent&ErrorCode=", false)
	f.Add("", "%zz", true)
	tw, err := twilio.New(config(""))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query, body string, signed bool) {
		r := httptest.NewRequest(http.MethodPost, "/v1/callbacks/twilio", strings.NewReader(body))
		r.URL.RawQuery = query
		params, formErr := url.ParseQuery(body)
		if signed && formErr == nil {
			called := callbackURL
			if query != "" {
				called += "?" + query
			}
			r.Header.Set(twilio.SignatureHeader, sign(authToken, called, params))
		}
		reps, err := tw.ParseCallback(r, []byte(body))
		switch {
		case err == nil:
			if len(reps) != 1 || reps[0].MessageID == "" {
				t.Fatalf("reports = %+v, want one naming a message", reps)
			}
		case errors.Is(err, provider.ErrBadSignature):
			if signed && formErr == nil {
				t.Fatalf("a correctly signed request failed the check: %v", err)
			}
		case errors.Is(err, provider.ErrBadCallback):
		default:
			t.Fatalf("error %v wraps neither ErrBadSignature nor ErrBadCallback", err)
		}
	})
}
