package config_test

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
)

// inboxKind is base's kind with an inbox channel whose template has a text
// per locale.
const inboxKind = `    channels: [inbox, webhook, sms]
    templates:
      inbox:
        ko: {title: "결제 완료", body: "{{.amount}}원 결제"}
        en-GB: {title: "Paid", body: "Paid {{.amount}} won"}
        default: {title: "Paid", body: "Paid {{.amount}} won"}
`

func TestLoadInboxKindWithLocales(t *testing.T) {
	text := edit(t, "    channels: [webhook, sms]\n    templates:\n", inboxKind)
	c, err := config.Load(writeFile(t, text), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := c.Kinds[0].Templates["inbox"]
	if len(tmpl.Locales) != 3 || tmpl.Locales["ko"].Title != "결제 완료" || tmpl.Locales["en-GB"].Body != "Paid {{.amount}} won" {
		t.Fatalf("inbox template = %+v", tmpl)
	}
	if plain := c.Kinds[0].Templates["sms"]; plain.Locales != nil || plain.Title != "Paid" {
		t.Fatalf("a plain template read as %+v", plain)
	}
}

func TestLoadRefusesBadLocalizedTemplates(t *testing.T) {
	cases := []struct {
		name, template, want string
	}{
		{"NotATag", "      inbox:\n        english!: {title: a, body: b}\n", `kinds[0].templates.inbox.english!: "english!" is not a language tag`},
		{"Mixed", "      inbox:\n        title: a\n        ko: {title: a, body: b}\n", `unknown key "kinds[0].templates.inbox.ko"`},
		{"UnknownKeyInALocale", "      inbox:\n        ko: {title: a, bdy: b}\n", "bdy"},
		{"SameLocaleTwice", "      inbox:\n        en-GB: {title: a, body: b}\n        en_gb: {title: a, body: b}\n", "the same locale as"},
		{"BadTemplate", "      inbox:\n        ko: {title: a, body: \"{{.x\"}\n", "kinds[0].templates.inbox.ko.body: not a Go template"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := edit(t, "    channels: [webhook, sms]\n    templates:\n", "    channels: [inbox, webhook, sms]\n    templates:\n"+c.template)
			_, err := config.Load(writeFile(t, text), noEnv)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load = %v, want an error with %q", err, c.want)
			}
		})
	}
	t.Run("ProviderForTheInbox", func(t *testing.T) {
		text := edit(t, "    channel: sms\n", "    channel: inbox\n")
		if _, err := config.Load(writeFile(t, text), noEnv); err == nil || !strings.Contains(err.Error(), `providers[1].channel: "inbox" is not one of`) {
			t.Fatalf("Load = %v, want a provider on the inbox refused", err)
		}
	})
}

func TestInboxDefaults(t *testing.T) {
	c, err := config.Load(writeFile(t, base), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	in := c.Inbox
	if in.Retention.D() != 365*24*time.Hour || in.PurgeInterval.D() != time.Hour || in.PurgeBatch != 1000 ||
		in.StreamsMax != 2048 || in.StreamsPerRecipient != 8 || in.StreamHeartbeat.D() != 25*time.Second || in.StreamResync.D() != 30*time.Second {
		t.Fatalf("inbox defaults = %+v", in)
	}
	if rt := c.RecipientTokens; rt.TTL.D() != time.Hour || rt.MaxTTL.D() != 24*time.Hour || len(c.RecipientTokenKeys()) != 0 {
		t.Fatalf("recipient_tokens defaults = %+v", rt)
	}
	c2, err := config.Load(writeFile(t, base+"inbox:\n  tenant_retention: {t1: 720h}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Inbox.RetentionFor("t1") != 720*time.Hour || c2.Inbox.RetentionFor("t2") != 365*24*time.Hour {
		t.Fatalf("RetentionFor: t1 %s, t2 %s", c2.Inbox.RetentionFor("t1"), c2.Inbox.RetentionFor("t2"))
	}
}

// The streams must leave the listener room for everything else: the
// default is half of server.max_connections (at most 10,000), and a
// streams_max at or above it is refused, as is a per-recipient cap above
// streams_max.
func TestStreamCaps(t *testing.T) {
	for _, c := range []struct {
		name, text string
		max, per   int
		tenant     int // 0: streams_max
		err        string
	}{
		{"HalfTheConnections", "server: {max_connections: 100}\n", 50, 8, 0, ""},
		{"AtMostTenThousand", "server: {max_connections: 50000}\n", 10000, 8, 0, ""},
		{"Set", "server: {max_connections: 100}\ninbox: {streams_max: 99, streams_per_recipient: 3}\n", 99, 3, 0, ""},
		{"AtTheConnections", "inbox: {streams_max: 4096}\n", 0, 0, 0, "inbox.streams_max: 4096 must be below server.max_connections (4096)"},
		{"AboveTheConnections", "inbox: {streams_max: 10000}\n", 0, 0, 0, "raise max_connections or lower streams_max"},
		{"PerRecipientAboveTheMax", "inbox: {streams_max: 10, streams_per_recipient: 11}\n", 0, 0, 0, "inbox.streams_per_recipient: must be 1..streams_max (10), got 11"},
		{"PerRecipientNegative", "inbox: {streams_per_recipient: -1}\n", 0, 0, 0, "inbox.streams_per_recipient: must be 1..streams_max"},
		{"PerTenantSet", "server: {max_connections: 100}\ninbox: {streams_per_tenant: 20}\n", 50, 8, 20, ""},
		{"PerTenantBelowPerRecipient", "inbox: {streams_per_recipient: 8, streams_per_tenant: 4}\n", 0, 0, 0,
			"inbox.streams_per_tenant: must be streams_per_recipient (8)..streams_max (2048), got 4"},
		{"PerTenantAboveTheMax", "inbox: {streams_max: 10, streams_per_tenant: 11}\n", 0, 0, 0, "inbox.streams_per_tenant: must be streams_per_recipient (8)..streams_max (10), got 11"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := config.Load(writeFile(t, base+c.text), noEnv)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Load = %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Inbox.StreamsMax != c.max || got.Inbox.StreamsPerRecipient != c.per {
				t.Fatalf("streams_max %d, streams_per_recipient %d; want %d, %d", got.Inbox.StreamsMax, got.Inbox.StreamsPerRecipient, c.max, c.per)
			}
			if want := cmp.Or(c.tenant, c.max); got.Inbox.StreamsPerTenant != want {
				t.Fatalf("streams_per_tenant %d, want %d", got.Inbox.StreamsPerTenant, want)
			}
		})
	}
}

// TestRecipientTokenSecrets: a key's secret comes from a file (relative to
// the config file), the environment or the file itself; errors name the
// key and never show a secret.
func TestRecipientTokenSecrets(t *testing.T) {
	dir := t.TempDir()
	fileSecret := strings.Repeat("f", 40)
	if err := os.WriteFile(filepath.Join(dir, "k2.secret"), []byte(fileSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	envSecret, inline := strings.Repeat("e", 32), strings.Repeat("i", 33)
	text := base + `recipient_tokens:
  ttl: 30m
  max_ttl: 2h
  keys:
    t1:
      - {id: k2, secret_file: k2.secret}
      - {id: k1, secret_env: HERALD_T1_K1}
    t2:
      - {id: a, secret: "` + inline + `"}
`
	path := filepath.Join(dir, "herald.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path, env(map[string]string{"HERALD_T1_K1": envSecret}))
	if err != nil {
		t.Fatal(err)
	}
	keys := c.RecipientTokenKeys()
	if len(keys["t1"]) != 2 || keys["t1"][0].ID != "k2" || string(keys["t1"][0].Secret) != fileSecret ||
		string(keys["t1"][1].Secret) != envSecret || string(keys["t2"][0].Secret) != inline {
		t.Fatalf("keys = %q", keys)
	}
	if c.RecipientTokens.TTL.D() != 30*time.Minute || c.RecipientTokens.MaxTTL.D() != 2*time.Hour {
		t.Fatalf("ttl %s max %s", c.RecipientTokens.TTL.D(), c.RecipientTokens.MaxTTL.D())
	}

	bad := []struct{ name, keys, want string }{
		{"EnvUnset", "      - {id: k1, secret_env: HERALD_NOT_SET}\n", "recipient_tokens.keys.t1[0].secret_env: HERALD_NOT_SET is not set"},
		{"TwoSources", "      - {id: k1, secret: \"" + inline + "\", secret_env: X}\n", "exactly one of secret, secret_file, secret_env"},
		{"Short", "      - {id: k1, secret: \"short-secret\"}\n", "recipient_tokens.keys.t1[0]: the secret must be at least 32 bytes, got 12"},
		{"DuplicateID", "      - {id: k1, secret: \"" + inline + "\"}\n      - {id: k1, secret: \"" + inline + "\"}\n", "duplicate id"},
		{"MissingFile", "      - {id: k1, secret_file: nope.secret}\n", "recipient_tokens.keys.t1[0].secret_file"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := config.Load(writeFile(t, base+"recipient_tokens:\n  keys:\n    t1:\n"+b.keys), noEnv)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Fatalf("Load = %v, want an error with %q", err, b.want)
			}
			if strings.Contains(err.Error(), inline) {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
	for _, b := range []struct{ text, want string }{
		{"recipient_tokens:\n  max_ttl: 25h\n", "recipient_tokens.max_ttl: at most 24h0m0s"},
		{"recipient_tokens:\n  ttl: 3h\n  max_ttl: 2h\n", "recipient_tokens.ttl: 3h0m0s is longer than max_ttl"},
		{"inbox:\n  purge_batch: -1\n", "inbox.purge_batch"},
		{"inbox:\n  tenant_retention: {t1: -1h}\n", "inbox.tenant_retention.t1"},
	} {
		if _, err := config.Load(writeFile(t, base+b.text), noEnv); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Load(%q) = %v, want %q", b.text, err, b.want)
		}
	}
}

// TestDevHasAnInboxKindAndTokenKeys: the development config can show the
// inbox out of the box.
func TestDevHasAnInboxKindAndTokenKeys(t *testing.T) {
	c, err := config.Load("", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if keys := c.RecipientTokenKeys()[config.DevTenant]; len(keys) != 1 || string(keys[0].Secret) != config.DevRecipientTokenSecret {
		t.Fatalf("dev keys = %q", keys)
	}
	found := false
	for _, k := range c.Kinds {
		for _, ch := range k.Channels {
			found = found || ch == "inbox"
		}
	}
	if !found {
		t.Fatal("no dev kind lists the inbox")
	}
}
