package app_test

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
)

// No provider credential reaches a log line, an API answer or a metric,
// however the provider fails: a fake FCM token endpoint and a fake Twilio
// answer every call with errors whose bodies quote the credentials they
// were sent, and herald runs at debug level the while.
func TestProviderSecretsNeverReachLogsOrAnswers(t *testing.T) {
	t.Parallel()
	const twilioToken = "TWILIO-SECRET-TOKEN-0123456789"
	var calls atomic.Int64
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		// Quote everything the caller sent back to it.
		echo := r.Header.Get("Authorization") + " " + string(body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/token"):
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant", "error_description": echo})
		case n%3 == 0:
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 20500, "message": echo})
		case n%3 == 1:
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 20003, "message": echo})
		default:
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 21211, "message": echo})
		}
	}))
	t.Cleanup(fake.Close)

	dir := t.TempDir()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)}))
	sa, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": "p1", "client_email": "h@p1.iam.gserviceaccount.com",
		"private_key": keyPEM, "private_key_id": "kid1", "token_uri": fake.URL + "/token"})
	for name, b := range map[string][]byte{"fcm.json": sa, "tw.token": []byte(twilioToken)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "herald.yaml")
	text := `environment: production
database: sqlite:` + testsqlite.Path(t) + `
api_keys: [{key: k1, tenant: shop}]
retry: {quick: 2, quick_delay: 10ms, slow: 0}
providers:
  - {name: fcm, type: fcm, channel: push, credentials: {file: fcm.json}, endpoint: "` + fake.URL + `"}
  - {name: tw, type: twilio, channel: sms, account_sid: AC00000000000000000000000000000000, auth_token: {file: tw.token},
     from: "+15005550006", endpoint: "` + fake.URL + `", callback_url: "https://herald.example.com/v1/callbacks/tw"}
kinds:
  - name: alert
    category: alert
    channels: [push, sms]
    templates:
      push: {title: "Alert", body: "Blocked {{.amount}}"}
      sms: {title: "", body: "Blocked {{.amount}}"}
`
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	logs := &testenv.Buffer{}
	a, base := newHerald(t, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	runHerald(t, a)

	if code, body := call(t, base, http.MethodPut, "/v1/recipients/r1/profile", "k1",
		`{"addresses":{"sms":"+821012345678"},"consent":{}}`); code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/r1/devices/device-token-1", "k1", `{"platform":"fcm"}`); code/100 != 2 {
		t.Fatalf("device: %d %s", code, body)
	}
	var answers []string
	for i := range 6 {
		code, body := call(t, base, http.MethodPost, "/v1/notifications", "k1",
			`{"recipient":"r1","event_id":"e`+string(rune('a'+i))+`","kind":"alert","params":{"amount":"1000"}}`)
		if code != http.StatusAccepted {
			t.Fatalf("notify: %d %s", code, body)
		}
		var acc struct{ ID string }
		_ = json.Unmarshal(body, &acc)
		answers = append(answers, acc.ID)
	}
	// Let every send end (refused sends retry twice, 10 ms apart).
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range answers {
		for {
			code, body := call(t, base, http.MethodGet, "/v1/notifications/"+id, "k1", "")
			if code != http.StatusOK {
				t.Fatalf("lookup: %d %s", code, body)
			}
			answers = append(answers, string(body))
			if !bytes.Contains(body, []byte(`"SENDING"`)) && !bytes.Contains(body, []byte(`"PENDING"`)) && !bytes.Contains(body, []byte(`"RETRY_WAIT"`)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not ended: %s", body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	_, metricsBody := call(t, base, http.MethodGet, "/metrics", "", "")
	answers = append(answers, string(metricsBody))
	if calls.Load() < 6 {
		t.Fatalf("the fake saw %d calls; the test must make the providers fail", calls.Load())
	}
	basic := base64.StdEncoding.EncodeToString([]byte("AC00000000000000000000000000000000:" + twilioToken))
	secrets := []string{twilioToken, basic, strings.Split(keyPEM, "\n")[2]}
	for _, s := range secrets {
		if strings.Contains(logs.String(), s) {
			t.Errorf("a log line holds a secret %q…", s[:8])
		}
		for _, a := range answers {
			if strings.Contains(a, s) {
				t.Errorf("an answer holds a secret %q…", s[:8])
			}
		}
	}
	if !strings.Contains(logs.String(), "message_id=") {
		t.Fatal("no send was logged at all; the test would prove nothing")
	}
}
