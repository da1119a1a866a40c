package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/config"
)

// realProviders names one provider of each real type, its credentials from
// files beside the config and from the environment; such a file says its
// environment.
const realProviders = `environment: production
providers:
  - {name: fcm, type: fcm, channel: push, credentials: {file: fcm.json}}
  - {name: apns, type: apns, channel: push, key: {file: apns.p8}, key_id: K1, team_id: T1, topic: com.example.app}
  - {name: mail, type: smtp, channel: email, addr: "smtp.example.com:587", username: u, password: {env: SMTP_PW}, from: "no-reply@example.com"}
  - {name: biz, type: bizppurio, channel: alimtalk, account: acc, password: {env: BIZ_PW}, from: "0212345678",
     sender_key: sk, templates: {payment.approved: T001}, callback_token: {file: biz.token}}
  - {name: tw, type: twilio, channel: sms, account_sid: AC1, auth_token: {env: TW_TOKEN}, from: "+15005550006",
     callback_url: "https://herald.example.com/v1/callbacks/tw"}
  - {name: hooks, type: webhook, channel: webhook, url: "https://example.com/h", secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,
     secrets: [{env: WH_OLD}]}
`

var secretValues = map[string]string{
	"fcm.json": `{"type":"service_account","client_email":"x@y","private_key":"PEM-SECRET"}`,
	"apns.p8":  "P8-SECRET\n", "biz.token": "BIZ-TOKEN-SECRET",
}

var secretEnv = map[string]string{"SMTP_PW": "SMTP-SECRET", "BIZ_PW": "BIZ-SECRET", "TW_TOKEN": "TWILIO-SECRET",
	"WH_OLD": "whsec_b2xkLW9sZC1vbGQtb2xkLW9sZC1vbGQtb2xk"}

func writeSecrets(t *testing.T, cfgPath string) {
	t.Helper()
	for name, v := range secretValues {
		if err := os.WriteFile(filepath.Join(filepath.Dir(cfgPath), name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Each real provider type loads with its credentials read from the file or
// the variable its entry names, once, at start; a file's trailing newline
// is not part of the secret.
func TestRealProvidersLoadTheirCredentials(t *testing.T) {
	t.Parallel()
	path := writeFile(t, realProviders)
	writeSecrets(t, path)
	c, err := config.Load(path, func(k string) string { return secretEnv[k] })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := map[string]map[string]string{
		"fcm": {"credentials": secretValues["fcm.json"]}, "apns": {"key": "P8-SECRET"},
		"mail": {"password": "SMTP-SECRET"}, "biz": {"password": "BIZ-SECRET", "callback_token": "BIZ-TOKEN-SECRET"},
		"tw": {"auth_token": "TWILIO-SECRET"}, "hooks": {"secrets[0]": secretEnv["WH_OLD"]},
	}
	for i := range c.Providers {
		p := &c.Providers[i]
		for k, v := range want[p.Name] {
			if got := string(p.Read(k)); got != v {
				t.Errorf("%s: %s = %q, want %q", p.Name, k, got, v)
			}
		}
	}
	if c.Providers[3].Templates["payment.approved"] != "T001" || c.Providers[1].Topic != "com.example.app" {
		t.Errorf("type settings not read: %+v", c.Providers[3].ProviderOptions)
	}
}

// A missing or doubly given credential, or a type's required setting left
// out, is refused at start with the key named — and no error ever holds a
// credential's value.
func TestRealProviderErrorsNameTheKeyNeverTheSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"MissingFile", "credentials: {file: fcm.json}", "credentials: {file: nope.json}", "providers[0].credentials.file"},
		{"UnsetEnv", "password: {env: SMTP_PW}", "password: {env: NOT_SET}", "providers[2].password.env: NOT_SET is not set"},
		{"FileAndEnv", "auth_token: {env: TW_TOKEN}", "auth_token: {env: TW_TOKEN, file: biz.token}", "providers[4].auth_token: give file or env, not both"},
		{"NoCredential", "key: {file: apns.p8}, ", "", "providers[1].key: required for type apns"},
		{"NoTopic", ", topic: com.example.app", "", "providers[1].topic: required for type apns"},
		{"NoSender", `from: "+15005550006",`, "", "providers[4].from or messaging_service_sid: required for type twilio"},
		{"BadType", "type: twilio", "type: twillio", `providers[4].type: "twillio" is not one of webhook, sim, fcm, apns, smtp, bizppurio, twilio`},
		{"SecretsEntryEmpty", "secrets: [{env: WH_OLD}]", "secrets: [{}]", "providers[5].secrets[0]: give file or env"},
		// Written in the file itself: refused without quoting any of it
		// (the YAML decoder's own message shows its first characters).
		{"InlineCredential", "auth_token: {env: TW_TOKEN}", "auth_token: pw12345inline-secret", "auth_token: a credential may not be written in the config file"},
		{"InlineInList", "secrets: [{env: WH_OLD}]", "secrets: [whsec_pw12345inline]", "a credential may not be written in the config file"},
		{"UnknownSecretField", "secrets: [{env: WH_OLD}]", "secrets: [{envv: WH_OLD}]", "field envv not found"},
		// A signing key that is not one: a mistake in the config (exit 2),
		// found at load, not when the adapter is built.
		{"WebhookSecretNotOne", "secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "secret: notasecret", "providers[5].secret: webhook secret: does not start with whsec_"},
		// A channel has one provider (push one a device platform): a second
		// would be ignored, a real one after a simulator never called.
		{"SecondOnAChannel", "name: tw, type: twilio, channel: sms", "name: tw, type: twilio, channel: alimtalk",
			`providers[4].channel: alimtalk is served by providers[3] ("biz") already`},
		{"SecondForAPlatform", "name: apns, type: apns", "name: apns, type: fcm",
			`providers[1].channel: push (fcm devices) is served by providers[0] ("fcm") already`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			text := strings.Replace(realProviders, tc.from, tc.to, 1)
			if text == realProviders {
				t.Fatalf("%q is not in the config", tc.from)
			}
			path := writeFile(t, text)
			writeSecrets(t, path)
			_, err := config.Load(path, func(k string) string { return secretEnv[k] })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "pw12") {
				t.Fatalf("the error quotes the inline credential: %v", err)
			}
			for _, v := range append(mapValues(secretValues), mapValues(secretEnv)...) {
				if s := strings.TrimSpace(v); strings.Contains(err.Error(), s) {
					t.Fatalf("the error holds a secret: %v", err)
				}
			}
		})
	}
}

func mapValues(m map[string]string) []string {
	var v []string
	for _, s := range m {
		v = append(v, s)
	}
	return v
}

// A production webhook provider that signs nothing or posts over plain
// http to another host is named at start; outside production, and for a
// signed https or loopback receiver, nothing is.
func TestProductionWarnings(t *testing.T) {
	hook := func(name, url, secret string) config.Provider {
		p := config.Provider{Name: name, Type: "webhook", Channel: "webhook", URL: url}
		p.Secret = secret
		return p
	}
	mail := func(name, addr string, plaintext bool) config.Provider {
		p := config.Provider{Name: name, Type: "smtp", Channel: "email"}
		p.Addr, p.Plaintext = addr, plaintext
		return p
	}
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	c := &config.Config{Environment: config.EnvProduction, Providers: []config.Provider{
		hook("signed", "https://hooks.example.com/h", whsec),
		hook("unsigned", "https://hooks.example.com/h", ""),
		hook("plain", "http://hooks.example.com/h", whsec),
		hook("local", "http://127.0.0.1:9000/h", whsec),
		{Name: "sim", Type: "sim", Channel: "sms"},
		mail("relay", "127.0.0.1:25", true),
		mail("tls", "smtp.example.com:587", false),
		mail("mail", "smtp.example.com:587", true),
	}}
	got := c.ProductionWarnings()
	if len(got) != 3 || !strings.Contains(got[0], "providers[1] (unsigned)") || !strings.Contains(got[0], "unsigned requests") ||
		!strings.Contains(got[1], "providers[2] (plain)") || !strings.Contains(got[1], "plain http") ||
		!strings.Contains(got[2], "providers[7] (mail)") || !strings.Contains(got[2], "password in clear") {
		t.Fatalf("warnings %q", got)
	}
	for _, w := range got {
		if strings.Contains(w, "smtp.example.com") {
			t.Errorf("a warning quotes the address: %q", w)
		}
	}
	c.Environment = config.EnvStaging
	if got := c.ProductionWarnings(); got != nil {
		t.Fatalf("staging: %q", got)
	}
}

// A kind that goes by alimtalk needs its template code in the AlimTalk
// provider's templates: without one every send ended
// PERMANENT_FAILURE(NO_TEMPLATE) at its first call, no alert, the chain
// paying an SMS each time. It is refused at load, naming the kind.
func TestAlimTalkKindWithoutATemplateCodeIsRefused(t *testing.T) {
	t.Parallel()
	kinds := `kinds:
  - {name: payment.approved, category: transactional, channels: [alimtalk], templates: {alimtalk: {title: Paid, body: "{{.amount}}"}}}
  - {name: ship.notice, category: transactional, channels: [alimtalk, sms], policy: first,
     templates: {alimtalk: {title: Shipped, body: "{{.order}}"}, sms: {title: Shipped, body: "{{.order}}"}}}
`
	path := writeFile(t, realProviders+kinds)
	writeSecrets(t, path)
	_, err := config.Load(path, func(k string) string { return secretEnv[k] })
	if err == nil || !strings.Contains(err.Error(), "providers[3].templates: kind ship.notice goes by alimtalk and has no template code here") {
		t.Fatalf("Load = %v; want ship.notice's missing template code named", err)
	}
	fixed := strings.Replace(realProviders, "templates: {payment.approved: T001}", "templates: {payment.approved: T001, ship.notice: T002}", 1)
	path = writeFile(t, fixed+kinds)
	writeSecrets(t, path)
	if _, err := config.Load(path, func(k string) string { return secretEnv[k] }); err != nil {
		t.Fatalf("Load with both codes = %v", err)
	}
}
