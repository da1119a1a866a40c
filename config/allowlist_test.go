package config_test

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
)

// guardKinds is the kinds block of the allow-list's config files.
const guardKinds = `api_keys: [{key: k, tenant: t}]
kinds:
  - {name: ping, category: transactional, channels: [sms], templates: {sms: {title: "", body: "Ping"}}}
`

// smsHook is a provider that reaches people: a webhook on the sms channel.
const smsHook = `providers: [{name: sms-hook, type: webhook, channel: sms, url: "https://sms.example.com/send"}]
`

// The built-in config is development; a file is development when it says
// nothing and cannot reach anyone but through the simulator or the
// webhook channel; one that can must say what it is.
func TestEnvironmentDefaults(t *testing.T) {
	t.Parallel()
	dev, err := config.Load("", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Environment != config.EnvDevelopment {
		t.Fatalf("built-in environment = %q, want development", dev.Environment)
	}
	for _, p := range dev.Providers {
		if dev.Guarded(p) {
			t.Errorf("built-in provider %s (type %s) is guarded: the README's first commands would be suppressed", p.Name, p.Type)
		}
	}

	quiet := guardKinds + `providers:
  - {name: hooks, type: webhook, channel: webhook, url: "https://example.com/h"}
  - {name: sms-sim, type: sim, channel: sms}
`
	c, err := config.Load(writeFile(t, quiet), noEnv)
	if err != nil {
		t.Fatalf("a file of webhooks and simulators without environment: %v", err)
	}
	if c.Environment != config.EnvDevelopment {
		t.Fatalf("environment = %q, want development", c.Environment)
	}

	_, err = config.Load(writeFile(t, guardKinds+smsHook), noEnv)
	want := `config: environment: required when a provider can reach people (provider "sms-hook", type webhook on sms)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a file that can reach people without environment: Load = %v, want %q", err, want)
	}

	for _, env := range []string{"production", "staging", "development"} {
		c, err := config.Load(writeFile(t, "environment: "+env+"\n"+guardKinds+smsHook), noEnv)
		if err != nil {
			t.Fatalf("environment %s: %v", env, err)
		}
		if got, want := c.Guarded(c.Providers[0]), env != "production"; got != want {
			t.Errorf("environment %s: Guarded(sms-hook) = %v, want %v", env, got, want)
		}
	}
}

// The allow-list's entries are checked at start, each named by its key.
func TestAllowListIsValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text, want string
	}{
		{"BadEnvironment", "environment: prod\n", `config: environment: "prod" is not production, staging or development`},
		{"BadPhone", "environment: staging\nallowlist: {phones: [\"+821012345678\", \"12-34\"]}\n", `config: allowlist.phones[1]: "12-34" is not a phone number`},
		{"BadEmail", "environment: staging\nallowlist: {emails: [qa.example.com]}\n", `config: allowlist.emails[0]: "qa.example.com" is not an e-mail address`},
		{"DomainWithAt", "environment: staging\nallowlist: {email_domains: [\"@example.com\"]}\n", `config: allowlist.email_domains[0]: "@example.com" is not a domain`},
		{"EmptyToken", "environment: staging\nallowlist: {device_tokens: [\"\"]}\n", `config: allowlist.device_tokens[0]: "" is not a device token`},
		{"UnknownKey", "environment: staging\nallowlist: {phone: [\"010-1234-5678\"]}\n", `unknown key "allowlist.phone"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeFile(t, tc.text+guardKinds+smsHook), noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A valid list loads and compiles as written.
func TestAllowListLoads(t *testing.T) {
	t.Parallel()
	text := `environment: staging
allowlist:
  phones: ["010-1234-5678"]
  emails: [lead@partner.example]
  email_domains: [example.com]
  device_tokens: [tok-qa]
` + guardKinds + smsHook
	c, err := config.Load(writeFile(t, text), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.AllowList.List()
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != 4 || !l.Allows(heraldtype.ChannelSMS, "+821012345678") || !l.Allows(heraldtype.ChannelEmail, "dev@example.com") ||
		!l.Allows(heraldtype.ChannelEmail, "lead@partner.example") || !l.Allows(heraldtype.ChannelPush, "tok-qa") ||
		l.Allows(heraldtype.ChannelSMS, "+821099999999") {
		t.Fatalf("the loaded list does not allow what the file says (%d entries)", l.Len())
	}
}

// Validate on a Config whose defaults were not filled does not fail on a
// missing environment it would default, nor panic.
func TestValidateWithoutDefaults(t *testing.T) {
	t.Parallel()
	c := config.Dev()
	c.Dev = false
	c.WithDefaults()
	c.Environment = ""
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
}
