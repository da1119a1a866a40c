package app_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/lookup"
)

// twilioSignature is X-Twilio-Signature as Twilio computes it: HMAC-SHA1
// with the auth token over the URL it called and the POST parameters
// sorted by name, each name then value.
func twilioSignature(token, rawURL string, form url.Values) string {
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(rawURL)
	for _, k := range keys {
		b.WriteString(k + form.Get(k))
	}
	mac := hmac.New(sha1.New, []byte(token))
	mac.Write([]byte(b.String()))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// An SMS through the real Twilio adapter to a fake Twilio, then Twilio's
// status callbacks to herald over HTTP: a forged one is 401 and changes
// nothing; a "sent" changes nothing; a signed "delivered" settles it
// DELIVERED, and a late "undelivered" after it changes nothing.
func TestTwilioStatusCallbacksSettleTheSMS(t *testing.T) {
	t.Parallel()
	const token = "twilio-auth-token-for-the-test"
	const public = "https://herald.example.com/v1/callbacks/tw"
	var mu sync.Mutex
	var statusCallback string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		statusCallback = r.PostForm.Get("StatusCallback")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued"}`))
	}))
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tw.token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	text := `environment: production
database: sqlite:` + testsqlite.Path(t) + `
api_keys: [{key: k1, tenant: shop}]
providers:
  - {name: tw, type: twilio, channel: sms, account_sid: AC00000000000000000000000000000000, auth_token: {file: tw.token},
     from: "+15005550006", endpoint: "` + fake.URL + `", callback_url: "` + public + `"}
kinds:
  - {name: reminder, category: transactional, channels: [sms], templates: {sms: {title: "", body: "See you at {{.time}}"}}}
`
	cfg := loadConfigFile(t, dir, text)
	a, base := newHerald(t, cfg, app.Options{})
	runHerald(t, a)
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/r1/profile", "k1", `{"addresses":{"sms":"+821012345678"}}`); code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
	code, body := call(t, base, http.MethodPost, "/v1/notifications", "k1", `{"recipient":"r1","event_id":"e1","kind":"reminder","params":{"time":"10:00"}}`)
	var acc struct{ ID string }
	if err := json.Unmarshal(body, &acc); code != http.StatusAccepted || err != nil {
		t.Fatalf("notify: %d %s", code, body)
	}
	sms := func(want string) lookup.Delivery {
		t.Helper()
		return waitEntry(t, base, "k1", acc.ID, "sms", want)
	}
	d := sms("PROVIDER_ACCEPTED")
	mu.Lock()
	cb := statusCallback
	mu.Unlock()
	if cb != public+"?message_id="+url.QueryEscape(d.MessageID) {
		t.Fatalf("StatusCallback %q, want the public callback URL naming %s", cb, d.MessageID)
	}
	post := func(status, sig string) int {
		t.Helper()
		form := url.Values{"MessageSid": {"SM0123456789abcdef0123456789abcdef"}, "MessageStatus": {status},
			"AccountSid": {"AC00000000000000000000000000000000"}, "To": {"+821012345678"}}
		if sig == "" {
			sig = twilioSignature(token, cb, form)
		}
		u, _ := url.Parse(cb)
		req, _ := http.NewRequest(http.MethodPost, base+u.Path+"?"+u.RawQuery, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Twilio-Signature", sig)
		resp, err := testenv.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("delivered", "forged"+twilioSignature(token, cb, nil)); got != http.StatusUnauthorized {
		t.Fatalf("forged callback: %d, want 401", got)
	}
	if got := post("sent", ""); got != http.StatusNoContent {
		t.Fatalf("sent: %d, want 204", got)
	}
	if e := sms("PROVIDER_ACCEPTED"); e.Reason != "" {
		t.Fatalf("after forged and sent: %+v, want PROVIDER_ACCEPTED untouched", e)
	}
	if got := post("delivered", ""); got != http.StatusNoContent {
		t.Fatalf("delivered: %d, want 204", got)
	}
	if e := sms("DELIVERED"); e.Reason != "TWILIO_DELIVERED" {
		t.Fatalf("after delivered: %+v, want DELIVERED(TWILIO_DELIVERED)", e)
	}
	if got := post("undelivered", ""); got != http.StatusNoContent {
		t.Fatalf("late undelivered: %d, want 204", got)
	}
	if e := sms("DELIVERED"); e.Reason != "TWILIO_DELIVERED" {
		t.Fatalf("after a late undelivered: %+v, want DELIVERED still", e)
	}
}
