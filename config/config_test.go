package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
)

// base is a valid config file; each case edits one line of it.
const base = `listen: 127.0.0.1:9090
database: sqlite:./test.db
transport: db
api_keys:
  - key: k1
    tenant: t1
providers:
  - name: hook
    type: webhook
    channel: webhook
    url: http://127.0.0.1:9999/hook
    timeout: 5s
  - name: sim-sms
    type: sim
    channel: sms
kinds:
  - name: payment.approved
    category: transactional
    channels: [webhook, sms]
    templates:
      webhook: {title: "Paid", body: "Paid {{.amount}} won"}
      sms: {title: "Paid", body: "Paid {{.amount}} won"}
`

// noEnv is an environment with nothing set, so tests never read the
// machine's HERALD_* variables.
func noEnv(string) string { return "" }

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeFile writes text to a config file in a fresh temp directory.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// edit replaces old with new in base, failing if old is not there, so a
// case cannot silently test the unedited file.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(base, old) {
		t.Fatalf("base config has no %q", old)
	}
	return strings.Replace(base, old, new, 1)
}

// lineOf is the 1-based line of the first occurrence of s in text.
func lineOf(t *testing.T, text, s string) int {
	t.Helper()
	i := strings.Index(text, s)
	if i < 0 {
		t.Fatalf("%q not in config", s)
	}
	return strings.Count(text[:i], "\n") + 1
}

func TestLoadBaseIsValid(t *testing.T) {
	t.Parallel()
	c, err := config.Load(writeFile(t, base), noEnv)
	if err != nil {
		t.Fatalf("Load(base) = %v", err)
	}
	if c.Dev {
		t.Error("a config file must not be marked Dev")
	}
	if c.Listen != "127.0.0.1:9090" || c.Database != "sqlite:./test.db" || c.Transport != "db" {
		t.Errorf("file values not kept: listen %q database %q transport %q", c.Listen, c.Database, c.Transport)
	}
	if got := c.Providers[0].Timeout.D(); got != 5*time.Second {
		t.Errorf("providers[0].timeout = %s, want 5s", got)
	}
}

func TestParseRefusesUnknownKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		text     string
		wantKey  string // the key path the message must name
		wantLine string // the text on the offending line
	}{
		{
			name:     "TopLevel",
			text:     base + "listne: 127.0.0.1:1\n",
			wantKey:  `"listne"`,
			wantLine: "listne:",
		},
		{
			name:     "InProvider",
			text:     edit(t, "    url: http", "    urll: http"),
			wantKey:  `"providers[0].urll"`,
			wantLine: "urll:",
		},
		{
			name:     "InSecondProvider",
			text:     edit(t, "    channel: sms\n", "    channel: sms\n    timout: 3s\n"),
			wantKey:  `"providers[1].timout"`,
			wantLine: "timout:",
		},
		{
			name:     "InTemplate",
			text:     edit(t, `sms: {title: "Paid", body:`, `sms: {title: "Paid", bdy:`),
			wantKey:  `"kinds[0].templates.sms.bdy"`,
			wantLine: "bdy:",
		},
		{
			name:     "InAPIKey",
			text:     edit(t, "    tenant: t1", "    tennant: t1"),
			wantKey:  `"api_keys[0].tennant"`,
			wantLine: "tennant:",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.text))
			if err == nil {
				t.Fatal("Parse accepted an unknown key")
			}
			msg := err.Error()
			if !strings.Contains(msg, "unknown key "+tc.wantKey) {
				t.Errorf("error %q does not name unknown key %s", msg, tc.wantKey)
			}
			if want := fmt.Sprintf("line %d:", lineOf(t, tc.text, tc.wantLine)); !strings.Contains(msg, want) {
				t.Errorf("error %q does not name %q", msg, want)
			}
			// Load refuses the same file with the same message.
			if _, lerr := config.Load(writeFile(t, tc.text), noEnv); lerr == nil || lerr.Error() != msg {
				t.Errorf("Load error = %v, want %q", lerr, msg)
			}
		})
	}
}

// TestParseErrorsNameTheKey covers decoder messages that carry only a line:
// each must name the key it is about, or say why there is none.
func TestParseErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, text, want string }{
		{"BadDurationInAFlowMapping", "retry: {quick_delay: 1s, slow_delay: soon}\n", `line 1: retry.slow_delay: "soon" is not a duration`},
		{"DurationGivenAsASequence", "providers:\n  - name: p\n    timeout: [1s]\n", "line 3: providers[0].timeout: !!seq is not a duration"},
		{"StringGivenAsAMapping", "listen: {a: b}\n", "line 1: listen: want text, not a mapping"},
		{"SequenceItemOfTheWrongType", "kinds:\n  - name: a\n  - 5\n", "line 3: kinds[1]: want a mapping of keys to values, not the number `5`"},
		{"MappingGivenAsText", "api_keys:\n  - acme-key\n", "line 2: api_keys[0]: want a mapping of keys to values, not the text `acme-key`"},
		{"NumberGivenAsText", "dispatch_max_attempts: many\n", "line 1: dispatch_max_attempts: want a whole number, not the text `many`"},
		{"FileThatIsASequence", "- a\n- b\n", "line 1: the file must be a mapping of keys to values"},
		{"KeyThatIsASequence", "lanes:\n  [a]: {concurrency: 1}\n", "line 2: lanes: a key must be a name, not !!seq"},
		{"KeyThatIsAMapping", "{{}}\n", "line 1: a key must be a name, not !!map"},
		{"DuplicateKey", "listen: 127.0.0.1:1\nlease: 2m\nlisten: 127.0.0.1:2\n", `line 3: duplicate key "listen" (first at line 1)`},
		{"UnknownKeyWithASpace", "\"lis ten\": x\n", `line 1: unknown key "lis ten"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), "config: "+tc.want) {
				t.Fatalf("Parse(%q) = %v, want %q", tc.text, err, tc.want)
			}
		})
	}
}

func TestLoadRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		text string
		want []string // every one must appear in the error
	}{
		{
			name: "DurationInWords",
			text: edit(t, "transport: db\n", "transport: db\nstale_claim_after: 10 minutes\n"),
			want: []string{"stale_claim_after", `"10 minutes"`, "not a duration", "line 4:"},
		},
		{
			name: "CampaignDraftTTLUnderAMinute",
			text: edit(t, "transport: db\n", "transport: db\ncampaign_draft_ttl: 30s\n"),
			want: []string{"campaign_draft_ttl", "at least 1m", "30s"},
		},
		{
			name: "ProviderTimeoutInWords",
			text: edit(t, "    timeout: 5s", "    timeout: five seconds"),
			want: []string{"providers[0].timeout", `"five seconds"`, "not a duration"},
		},
		{
			name: "NumberThatIsNot",
			text: base + "dispatch_max_attempts: many\n",
			want: []string{"dispatch_max_attempts", "many"},
		},
		{
			name: "TransportKafka",
			text: edit(t, "transport: db", "transport: kafka"),
			want: []string{"transport:", `"kafka"`},
		},
		{
			name: "CategoryPromo",
			text: edit(t, "category: transactional", "category: promo"),
			want: []string{"kinds[0].category", `"promo"`},
		},
		{
			name: "KindChannelFax",
			text: edit(t, "channels: [webhook, sms]", "channels: [webhook, fax]"),
			want: []string{"kinds[0].channels[1]", `"fax"`},
		},
		{
			name: "ProviderChannelFax",
			text: edit(t, "    channel: sms", "    channel: fax"),
			want: []string{"providers[1].channel", `"fax"`},
		},
		{
			name: "KindChannelWithNoProvider",
			text: edit(t, "channels: [webhook, sms]", "channels: [webhook, sms, email]"),
			want: []string{"kinds[0].channels[2]", "no provider serves channel", `"email"`},
		},
		{
			name: "ChannelWithoutTemplate",
			text: edit(t, "      sms: {title: \"Paid\", body: \"Paid {{.amount}} won\"}\n", ""),
			want: []string{"kinds[0].templates.sms", "missing"},
		},
		{
			name: "TemplateForChannelNotListed",
			text: edit(t, "channels: [webhook, sms]", "channels: [webhook]"),
			want: []string{"kinds[0].templates.sms", "not in channels"},
		},
		{
			name: "DuplicateKind",
			text: base + `  - name: payment.approved
    category: alert
    channels: [sms]
    templates:
      sms: {title: "Again", body: "Again"}
`,
			want: []string{"kinds[1].name", "duplicate", `"payment.approved"`},
		},
		{
			name: "LeaseShorterThanProviderTimeout",
			// sim-sms has the default timeout of 10s, the longest.
			text: base + "lease: 8s\n",
			want: []string{"lease:", "8s", "10s, providers[", "(sim-sms)"},
		},
		{
			name: "LeaseEqualToProviderTimeout",
			text: base + "lease: 10s\n",
			want: []string{"lease:", "must be longer"},
		},
		{
			name: "DefaultLeaseShorterThanWebhookTimeout",
			text: edit(t, "    timeout: 5s", "    timeout: 2m"),
			want: []string{"lease:", "1m0s", "2m0s"},
		},
		{
			name: "StaleClaimAfterShorterThanProviderTimeout",
			text: base + "lease: 1h\nstale_claim_after: 9s\n",
			want: []string{"stale_claim_after:", "9s", "10s"},
		},
		{
			name: "RabbitMQWithoutURL",
			text: edit(t, "transport: db", "transport: rabbitmq"),
			want: []string{"rabbitmq_url", "required"},
		},
		{
			name: "RabbitMQURLNotAMQP",
			text: edit(t, "transport: db", "transport: rabbitmq\nrabbitmq_url: http://broker:5672/"),
			want: []string{"rabbitmq_url", "amqp"},
		},
		{
			name: "RabbitMQRelayBundleTooLarge",
			text: base + "rabbitmq:\n  relay_bundle: 501\n",
			want: []string{"rabbitmq.relay_bundle", "1..500", "501"},
		},
		{
			name: "DatabaseMySQL",
			text: edit(t, "database: sqlite:./test.db", "database: mysql://db/herald"),
			want: []string{"database:", `"mysql://db/herald"`},
		},
		{
			name: "DatabaseSQLiteWithoutPath",
			text: edit(t, "database: sqlite:./test.db", "database: \"sqlite:\""),
			want: []string{"database:", "path"},
		},
		{
			name: "ListenNotHostPort",
			text: edit(t, "listen: 127.0.0.1:9090", "listen: localhost"),
			want: []string{"listen:", `"localhost"`},
		},
		{
			name: "WebhookWithoutURL",
			text: edit(t, "    url: http://127.0.0.1:9999/hook\n", ""),
			want: []string{"providers[0].url"},
		},
		{
			name: "WebhookURLNotHTTP",
			text: edit(t, "    url: http://127.0.0.1:9999/hook\n", "    url: ftp://user:S3CRETPW@exa mple.com/hook?token=T0KEN\n"),
			want: []string{"providers[0].url", "not an http(s) URL", "the value is not shown"},
		},
		{
			name: "ProviderTypeUnknown",
			text: edit(t, "    type: sim", "    type: carrier-pigeon"),
			want: []string{"providers[1].type", `"carrier-pigeon"`},
		},
		{
			name: "DuplicateAPIKey",
			text: edit(t, "    tenant: t1\n", "    tenant: t1\n  - key: k1\n    tenant: t2\n"),
			want: []string{"api_keys[1].key", "duplicate"},
		},
		{
			name: "OperatorKeyThatIsAnAPIKey",
			text: base + "operator_keys: [ops-1, k1]\n",
			want: []string{"operator_keys[1]", "also an API key"},
		},
		{
			name: "EmptyOperatorKey",
			text: base + "operator_keys: [\"\"]\n",
			want: []string{"operator_keys[0]", "empty"},
		},
		{
			name: "DuplicateOperatorKey",
			text: base + "operator_keys: [ops-1, ops-1]\n",
			want: []string{"operator_keys[1]", "duplicate"},
		},
		{
			name: "LogLevelUnknown",
			text: base + "log_level: verbose\n",
			want: []string{"log_level", "verbose", "debug, info, warn, error"},
		},
		{
			name: "ShutdownDelayOverAMinute",
			text: base + "shutdown_delay: 2m\n",
			want: []string{"shutdown_delay", "0..1m", "2m0s"},
		},
		{
			name: "ReconcileIntervalNegative",
			text: base + "reconcile_interval: -1h\n",
			want: []string{"reconcile_interval", "positive"},
		},
		{
			name: "ReserveHalfTheLane",
			text: base + "lanes:\n  marketing: {concurrency: 4, reserve: 2}\n",
			want: []string{"lanes.marketing.reserve", "0..1", "got 2"},
		},
		{
			name: "ReserveNegative",
			text: base + "lanes:\n  marketing: {reserve: -1}\n",
			want: []string{"lanes.marketing.reserve", "got -1"},
		},
		{
			name: "UnknownLane",
			text: base + "lanes:\n  bulk: {concurrency: 4}\n",
			want: []string{"lanes.bulk"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeFile(t, tc.text), noEnv)
			if err == nil {
				t.Fatalf("Load accepted:\n%s", tc.text)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			for _, secret := range []string{"S3CRETPW", "T0KEN"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows a secret of the file", err)
				}
			}
		})
	}
}

func TestLoadEnvironmentBeatsFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, base+"rabbitmq_url: amqp://file-broker:5672/\n")

	t.Run("AllFourOverride", func(t *testing.T) {
		t.Parallel()
		c, err := config.Load(path, env(map[string]string{
			config.EnvDatabase:    "sqlite:/var/lib/herald/env.db",
			config.EnvListen:      "0.0.0.0:7070",
			config.EnvTransport:   "rabbitmq",
			config.EnvRabbitMQURL: "amqp://env-broker:5672/",
		}))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct{ name, got, want string }{
			{"database", c.Database, "sqlite:/var/lib/herald/env.db"},
			{"listen", c.Listen, "0.0.0.0:7070"},
			{"transport", c.Transport, "rabbitmq"},
			{"rabbitmq_url", c.RabbitMQURL, "amqp://env-broker:5672/"},
		} {
			if f.got != f.want {
				t.Errorf("%s = %q, want %q from the environment", f.name, f.got, f.want)
			}
		}
	})

	t.Run("UnsetLeavesFile", func(t *testing.T) {
		t.Parallel()
		c, err := config.Load(path, env(map[string]string{config.EnvListen: "127.0.0.1:7071"}))
		if err != nil {
			t.Fatal(err)
		}
		if c.Listen != "127.0.0.1:7071" {
			t.Errorf("listen = %q, want the environment's", c.Listen)
		}
		if c.Database != "sqlite:./test.db" || c.Transport != "db" || c.RabbitMQURL != "amqp://file-broker:5672/" {
			t.Errorf("file values lost: database %q transport %q rabbitmq_url %q", c.Database, c.Transport, c.RabbitMQURL)
		}
	})

	t.Run("OverrideIsValidated", func(t *testing.T) {
		t.Parallel()
		_, err := config.Load(path, env(map[string]string{config.EnvTransport: "kafka"}))
		if err == nil || !strings.Contains(err.Error(), "transport") {
			t.Errorf("Load with HERALD_TRANSPORT=kafka = %v, want an error naming transport", err)
		}
	})

	t.Run("OverridesDevConfig", func(t *testing.T) {
		t.Parallel()
		c, err := config.Load("", env(map[string]string{config.EnvDatabase: "sqlite:/tmp/other.db"}))
		if err != nil {
			t.Fatal(err)
		}
		if c.Database != "sqlite:/tmp/other.db" {
			t.Errorf("database = %q, want the environment's", c.Database)
		}
	})
}

func TestLoadFillsDefaults(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, c *config.Config) {
		t.Helper()
		if got := c.StaleClaimAfter.D(); got != 10*time.Minute {
			t.Errorf("stale_claim_after = %s, want 10m", got)
		}
		if c.Listen != "127.0.0.1:8080" {
			t.Errorf("listen = %q, want 127.0.0.1:8080", c.Listen)
		}
		if c.Database != "sqlite:./herald.db" {
			t.Errorf("database = %q, want sqlite:./herald.db", c.Database)
		}
		if c.Transport != "db" {
			t.Errorf("transport = %q, want db", c.Transport)
		}
		if got := c.Lease.D(); got != time.Minute {
			t.Errorf("lease = %s, want 1m", got)
		}
		for i, p := range c.Providers {
			if got := p.Timeout.D(); got != 10*time.Second {
				t.Errorf("providers[%d].timeout = %s, want 10s", i, got)
			}
		}
	}

	t.Run("MinimalFile", func(t *testing.T) {
		t.Parallel()
		c, err := config.Load(writeFile(t, `providers:
  - name: sim-push
    type: sim
    channel: push
`), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Providers) != 1 {
			t.Fatalf("providers = %d, want 1", len(c.Providers))
		}
		check(t, c)
	})

	t.Run("EmptyFile", func(t *testing.T) {
		t.Parallel()
		c, err := config.Load(writeFile(t, ""), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		check(t, c)
	})

	t.Run("SetValuesKept", func(t *testing.T) {
		t.Parallel()
		c, err := config.Load(writeFile(t, base+"stale_claim_after: 15m\nreconcile_interval: 5m\noperator_keys: [ops-1, ops-2]\n"), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.StaleClaimAfter.D(); got != 15*time.Minute {
			t.Errorf("stale_claim_after = %s, want 15m as written", got)
		}
		if got := c.ReconcileInterval.D(); got != 5*time.Minute {
			t.Errorf("reconcile_interval = %s, want 5m as written", got)
		}
		if got := strings.Join(c.OperatorKeys, ","); got != "ops-1,ops-2" {
			t.Errorf("operator_keys = %s, want ops-1,ops-2 as written", got)
		}
	})
}

// Operator keys may come from a file beside the config and from the
// environment, added to those the file lists, and checked as they are: a
// named file or variable with no key, or a key that is also an API key,
// stops the start.
func TestOperatorKeysFromAFileAndTheEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ops.keys"), []byte("ops-file-1\n  ops-file-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.keys"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(extra string, vars map[string]string) (*config.Config, error) {
		path := filepath.Join(dir, "herald.yaml")
		if err := os.WriteFile(path, []byte(base+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return config.Load(path, env(vars))
	}
	c, err := load("operator_keys: [ops-1]\noperator_keys_file: ops.keys\noperator_keys_env: OPS\n", map[string]string{"OPS": "ops-env-1 ops-env-2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.OperatorKeys, ","); got != "ops-1,ops-file-1,ops-file-2,ops-env-1,ops-env-2" {
		t.Fatalf("operator keys %s", got)
	}
	for _, bad := range []struct {
		extra string
		vars  map[string]string
		want  string
	}{
		{"operator_keys_file: empty.keys\n", nil, "operator_keys_file: the file holds no key"},
		{"operator_keys_file: missing.keys\n", nil, "operator_keys_file:"},
		{"operator_keys_env: OPS\n", nil, "operator_keys_env: OPS is not set or empty"},
		{"operator_keys_env: OPS\n", map[string]string{"OPS": "k1"}, "also an API key"},
	} {
		if _, err := load(bad.extra, bad.vars); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error with %q", bad.extra, err, bad.want)
		}
	}
}

func TestLoadDev(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", noEnv)
	if err != nil {
		t.Fatalf("Load(\"\") = %v", err)
	}
	if !c.Dev {
		t.Error("Load(\"\") is not marked Dev")
	}
	if c.Database != "sqlite:./herald.db" || c.Transport != "db" || c.Listen != "127.0.0.1:8080" {
		t.Errorf("dev config: database %q transport %q listen %q", c.Database, c.Transport, c.Listen)
	}
	if len(c.APIKeys) != 1 || c.APIKeys[0].Key != config.DevAPIKey || c.APIKeys[0].Tenant != config.DevTenant {
		t.Errorf("dev api keys = %+v", c.APIKeys)
	}
	served := map[string]bool{}
	for _, p := range c.Providers {
		if p.Type != "sim" {
			t.Errorf("dev provider %s has type %q, want sim", p.Name, p.Type)
		}
		served[p.Channel] = true
	}
	for _, ch := range []string{"push", "sms", "alimtalk", "email", "webhook"} {
		if !served[ch] {
			t.Errorf("dev config has no provider for channel %s", ch)
		}
	}
	if err := config.Dev().WithDefaults().Validate(); err != nil {
		t.Errorf("Dev().WithDefaults().Validate() = %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := config.Load(filepath.Join(t.TempDir(), "absent.yaml"), noEnv)
	if err == nil || !strings.Contains(err.Error(), "read config") {
		t.Errorf("Load(absent) = %v, want a read error", err)
	}
}

func TestPartialRetryBlockKeepsOtherDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load(writeFile(t, "retry: {quick: 3, slow: 0}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := config.Retry{Quick: 3, QuickDelay: config.Duration(time.Second), Slow: 0, SlowDelay: config.Duration(10 * time.Minute)}
	if c.Retry != want {
		t.Fatalf("retry = %+v, want %+v", c.Retry, want)
	}
}
