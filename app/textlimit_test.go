package app_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
)

// textKinds adds the kinds the text-limit tests send: one SMS and one
// AlimTalk whose body is the request's text param.
func textKinds(c *config.Config) {
	c.Kinds = append(c.Kinds,
		config.Kind{Name: "text.sms", Category: "transactional", Channels: []string{"sms"},
			Templates: map[string]config.Template{"sms": {Title: "{{.title}}", Body: "{{.text}}"}}},
		config.Kind{Name: "text.alimtalk", Category: "transactional", Channels: []string{"alimtalk"},
			Templates: map[string]config.Template{"alimtalk": {Title: "안내", Body: "{{.text}}"}}},
	)
}

// sendText sends kind with title and text to recipient r-text and returns
// the notification id.
func sendText(t *testing.T, base, kind, event, title, text string) string {
	t.Helper()
	params, _ := json.Marshal(map[string]string{"title": title, "text": text})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/notifications",
		strings.NewReader(`{"recipient":"r-text","event_id":"`+event+`","kind":"`+kind+`","params":`+string(params)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	req.Header.Set("Idempotency-Key", "text-"+event)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var accepted struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&accepted); resp.StatusCode != http.StatusAccepted || err != nil {
		t.Fatalf("notify %s: %d %v", event, resp.StatusCode, err)
	}
	return accepted.ID
}

// simCall is the sim's call for message id, if it made one.
func simCall(s *sim.Sim, messageID string) (provider.Message, bool) {
	for _, c := range s.Calls() {
		if c.Message.MessageID == messageID {
			return c.Message, true
		}
	}
	return provider.Message{}, false
}

// The text limits through the HTTP API, on both stores: an SMS of up to
// 90 EUC-KR bytes goes as a short SMS, one up to 2,000 as an LMS (the kind
// reaches the provider in the message); over 2,000, or a character EUC-KR
// cannot encode, is PARKED with its reason and a PARKED alert, and the
// provider is never called. An AlimTalk text, which the vendor resends as
// SMS or LMS, is held to the same limits.
func TestTextLimits(t *testing.T) {
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, driverDatabase(t, driver), textKinds)
			alerts := &alert.Recorder{}
			a, base := newHerald(t, cfg, app.Options{Alerts: alerts})
			runHerald(t, a)
			if code, body := call(t, base, http.MethodPut, "/v1/recipients/r-text/profile", config.DevAPIKey,
				`{"addresses":{"sms":"010-1234-5678","alimtalk":"010-1234-5678"}}`); code != http.StatusNoContent {
				t.Fatalf("profile: %d %s", code, body)
			}
			rows := []struct {
				name, kind, title, text string
				channel                 string
				state, reason           string
				sent                    provider.SMSKind
			}{
				{"SMS90Bytes", "text.sms", "", strings.Repeat("가", 45), "sms", "PROVIDER_ACCEPTED", "", provider.SMSShort},
				{"SMS91Bytes", "text.sms", "안내", strings.Repeat("가", 45) + "a", "sms", "PROVIDER_ACCEPTED", "", provider.SMSLong},
				{"SMS2000Bytes", "text.sms", "안내", strings.Repeat("가", 1000), "sms", "PROVIDER_ACCEPTED", "", provider.SMSLong},
				{"SMS2001Bytes", "text.sms", "안내", strings.Repeat("가", 1000) + "a", "sms", "PARKED", heraldtype.ReasonTextTooLong, ""},
				{"SMSEmoji", "text.sms", "", "결제 완료 🎉", "sms", "PARKED", heraldtype.ReasonEUCKRUnencodable, ""},
				{"LMSTitleEmoji", "text.sms", "🎉", strings.Repeat("가", 46), "sms", "PARKED", heraldtype.ReasonEUCKRUnencodable, ""},
				{"AlimTalk2000Bytes", "text.alimtalk", "", strings.Repeat("나", 1000), "alimtalk", "PROVIDER_ACCEPTED", "", provider.SMSLong},
				{"AlimTalkShort", "text.alimtalk", "", "주문이 접수되었습니다.", "alimtalk", "PROVIDER_ACCEPTED", "", provider.SMSShort},
				{"AlimTalk2001Bytes", "text.alimtalk", "", strings.Repeat("나", 1000) + "a", "alimtalk", "PARKED", heraldtype.ReasonTextTooLong, ""},
				{"AlimTalkEmoji", "text.alimtalk", "", "🎁 쿠폰", "alimtalk", "PARKED", heraldtype.ReasonEUCKRUnencodable, ""},
			}
			for _, row := range rows {
				id := sendText(t, base, row.kind, row.name, row.title, row.text)
				d := waitEntry(t, base, config.DevAPIKey, id, row.channel, row.state)
				if d.Reason != row.reason {
					t.Errorf("%s: %s(%s), want %s(%s)", row.name, d.State, d.Reason, row.state, row.reason)
				}
				m, called := simCall(a.Sim("sim-"+row.channel), d.MessageID)
				switch {
				case row.state == "PARKED" && called:
					t.Errorf("%s: parked, yet the provider was called", row.name)
				case row.state == "PARKED":
					if !parkedAlert(alerts, d.MessageID, row.reason) {
						t.Errorf("%s: no PARKED alert with reason %s", row.name, row.reason)
					}
				case !called:
					t.Errorf("%s: accepted without a provider call", row.name)
				case m.SMSKind != row.sent:
					t.Errorf("%s: the provider got SMSKind %q, want %q", row.name, m.SMSKind, row.sent)
				}
			}
		})
	}
}

// parkedAlert waits up to 10 s for the PARKED alert of messageID: the
// sender raises it just after it commits the PARKED state, so a lookup can
// show the state a moment before the alert exists.
func parkedAlert(r *alert.Recorder, messageID, reason string) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for _, a := range r.Alerts() {
			if a.Kind == alert.Parked && a.MessageID == messageID && a.Reason == reason {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// An SMS provider that does not send through a Korean carrier (here a
// webhook; Twilio likewise) is not measured in EUC-KR: a long text with an
// emoji reaches it.
func TestTextLimitsLeaveOtherSMSProvidersAlone(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct{ Body string }
		_ = json.NewDecoder(r.Body).Decode(&m)
		got <- m.Body
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(t, "", func(c *config.Config) {
		textKinds(c)
		// A production herald: the non-production guard would keep the
		// webhook from being called at all.
		c.Environment = "production"
		for i, p := range c.Providers {
			if p.Channel == "sms" {
				c.Providers[i] = config.Provider{Name: "sms-hook", Type: "webhook", Channel: "sms", URL: srv.URL}
			}
		}
	})
	a, base := newHerald(t, cfg, app.Options{})
	runHerald(t, a)
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/r-text/profile", config.DevAPIKey,
		`{"addresses":{"sms":"+1 415 555 0100"}}`); code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
	text := strings.Repeat("long ", 500) + "🎉"
	id := sendText(t, base, "text.sms", "hook", "", text)
	waitEntry(t, base, config.DevAPIKey, id, "sms", "PROVIDER_ACCEPTED")
	if body := <-got; body != text {
		t.Fatalf("the webhook got %d bytes, want the text of %d", len(body), len(text))
	}
}

// Twilio refuses a Body over 1,600 characters (error 21617) every time: such
// a text is PARKED (TEXT_TOO_LONG) with no call, while one of exactly 1,600
// characters, Korean or with emoji, reaches Twilio as it is (Twilio, unlike
// a Korean carrier, takes them).
func TestTextLimitsTwilioBodyOver1600Characters(t *testing.T) {
	t.Parallel()
	bodies := make(chan string, 8)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		body := r.PostForm.Get("Body")
		bodies <- body
		w.Header().Set("Content-Type", "application/json")
		if utf8.RuneCountInString(body) > 1600 {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":21617,"message":"The concatenated message body exceeds the 1600 character limit.","status":400}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued"}`))
	}))
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tw.token"), []byte("twilio-auth-token-for-the-test"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := `environment: production
database: sqlite:` + testsqlite.Path(t) + `
api_keys: [{key: ` + config.DevAPIKey + `, tenant: shop}]
providers:
  - {name: tw, type: twilio, channel: sms, account_sid: AC00000000000000000000000000000000, auth_token: {file: tw.token},
     from: "+15005550006", endpoint: "` + fake.URL + `"}
kinds:
  - {name: text.sms, category: transactional, channels: [sms], templates: {sms: {title: "{{.title}}", body: "{{.text}}"}}}
`
	cfg := loadConfigFile(t, dir, text)
	alerts := &alert.Recorder{}
	a, base := newHerald(t, cfg, app.Options{Alerts: alerts})
	runHerald(t, a)
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/r-text/profile", config.DevAPIKey,
		`{"addresses":{"sms":"+14155550100"}}`); code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
	for _, row := range []struct {
		name, title, text string
		state             string
	}{
		{"Korean1600", "", strings.Repeat("가", 1600), "PROVIDER_ACCEPTED"},
		{"Emoji1600", "", strings.Repeat("🎉", 1600), "PROVIDER_ACCEPTED"},
		{"TitleAndBody1600", strings.Repeat("t", 99), strings.Repeat("b", 1500), "PROVIDER_ACCEPTED"},
		{"ASCII2000", "", strings.Repeat("a", 2000), "PARKED"},
		{"TitleAndBody1601", strings.Repeat("t", 100), strings.Repeat("b", 1500), "PARKED"},
	} {
		id := sendText(t, base, "text.sms", row.name, row.title, row.text)
		d := waitEntry(t, base, config.DevAPIKey, id, "sms", row.state)
		if row.state == "PARKED" {
			if d.Reason != heraldtype.ReasonTextTooLong {
				t.Errorf("%s: PARKED(%s), want PARKED(%s)", row.name, d.Reason, heraldtype.ReasonTextTooLong)
			}
			if !parkedAlert(alerts, d.MessageID, heraldtype.ReasonTextTooLong) {
				t.Errorf("%s: no PARKED alert", row.name)
			}
			continue
		}
		want := row.text
		if row.title != "" {
			want = row.title + "\n" + row.text
		}
		if got := <-bodies; got != want {
			t.Errorf("%s: Twilio got a Body of %d characters, want the %d sent", row.name, utf8.RuneCountInString(got), utf8.RuneCountInString(want))
		}
	}
	if n := len(bodies); n != 0 {
		t.Errorf("Twilio was called %d more times, want none for the parked texts", n)
	}
}
