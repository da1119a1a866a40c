package app_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testsqlite"
)

// realConfig writes a config with one provider of each real type, its
// credentials in files beside it (a service account with a fresh RSA key,
// a fresh .p8), and returns its path. replace edits the text first.
func realConfig(t *testing.T, replace ...string) string {
	t.Helper()
	dir := t.TempDir()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p1", "client_email": "herald@p1.iam.gserviceaccount.com",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})),
		"token_uri":      "https://oauth2.googleapis.com/token",
		"private_key_id": "kid1",
	})
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(ek)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"fcm.json": sa, "apns.p8": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"smtp.pw": []byte("SMTP-SECRET-PW"), "biz.pw": []byte("BIZ-SECRET-PW"), "tw.token": []byte("TWILIO-SECRET-TOKEN"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text := `environment: production
database: sqlite:` + testsqlite.Path(t) + `
api_keys: [{key: k1, tenant: shop}]
providers:
  - {name: fcm, type: fcm, channel: push, credentials: {file: fcm.json}}
  - {name: apns, type: apns, channel: push, key: {file: apns.p8}, key_id: K1, team_id: T1, topic: com.example.app}
  - {name: mail, type: smtp, channel: email, addr: "127.0.0.1:1", username: u, password: {file: smtp.pw}, from: "no-reply@example.com"}
  - {name: biz, type: bizppurio, channel: alimtalk, account: acc, password: {file: biz.pw}, from: "0212345678", sender_key: sk, templates: {payment.approved: T001}}
  - {name: tw, type: twilio, channel: sms, account_sid: AC00000000000000000000000000000000, auth_token: {file: tw.token}, from: "+15005550006", callback_url: "https://herald.example.com/v1/callbacks/tw"}
  - {name: hooks, type: webhook, channel: webhook, url: "https://example.com/h", secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}
kinds:
  - name: payment.approved
    category: transactional
    channels: [push, email, alimtalk, sms, webhook]
    templates:
      push: {title: "Paid", body: "Paid {{.amount}}"}
      email: {title: "Paid", body: "Paid {{.amount}}"}
      alimtalk: {title: "Paid", body: "Paid {{.amount}}"}
      sms: {title: "", body: "Paid {{.amount}}"}
      webhook: {title: "Paid", body: "Paid {{.amount}}"}
`
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(text, replace[i]) {
			t.Fatalf("%q is not in the config", replace[i])
		}
		text = strings.Replace(text, replace[i], replace[i+1], 1)
	}
	path := filepath.Join(dir, "herald.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every real provider type is built from its config entry at start, and
// the ones with delivery reports serve POST /v1/callbacks/{name}.
func TestRealProvidersAreBuiltFromTheConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(realConfig(t), func(string) string { return "" })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	a, base := newHerald(t, cfg, app.Options{})
	runHerald(t, a)
	// Twilio and the vendor take reports: an unsigned one is refused (401),
	// not "no such provider" (404).
	for _, name := range []string{"tw", "biz"} {
		if code, _ := postCallback(t, base, name, "", `{}`); code != 401 {
			t.Errorf("POST /v1/callbacks/%s unsigned: %d, want 401", name, code)
		}
	}
	for _, name := range []string{"fcm", "apns", "mail", "hooks"} {
		if code, _ := postCallback(t, base, name, "", `{}`); code != 404 {
			t.Errorf("POST /v1/callbacks/%s: %d, want 404 (no delivery reports)", name, code)
		}
	}
}

// A credential the adapter cannot use stops the start with the entry
// named, never with the credential in the message.
func TestABadCredentialStopsTheStartWithoutShowingIt(t *testing.T) {
	t.Parallel()
	path := realConfig(t)
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "apns.p8"), []byte("-----BEGIN PRIVATE KEY-----\nNOT-A-KEY-SECRET\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	_, err = app.New(context.Background(), cfg, app.Options{})
	if err == nil || !strings.Contains(err.Error(), "providers[1]") {
		t.Fatalf("app.New = %v, want an error naming providers[1]", err)
	}
	if strings.Contains(err.Error(), "NOT-A-KEY-SECRET") {
		t.Fatalf("the error shows the key: %v", err)
	}
}
