// Package config turns a YAML file and HERALD_* environment variables into a
// validated Config. Unknown keys and bad values are refused at start with a
// message naming the key; nothing is guessed.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider/webhook"
)

// Config is everything `herald serve` needs. Each field's comment ends with
// its default.
type Config struct {
	// Listen is the HTTP address. Defaults to 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// Database is "sqlite:PATH" or a postgres:// URL. Defaults to sqlite:./herald.db.
	Database string `yaml:"database"`
	// Transport is "db" (senders claim outbox rows) or "rabbitmq". Defaults to db.
	Transport string `yaml:"transport"`
	// RabbitMQURL is the broker for transport rabbitmq. No default.
	RabbitMQURL string `yaml:"rabbitmq_url"`
	// RabbitMQ tunes the rabbitmq transport. Defaults are listed per field.
	RabbitMQ RabbitMQ `yaml:"rabbitmq"`
	// StaleClaimAfter turns a SENDING delivery older than this into UNKNOWN.
	// Defaults to 10 minutes.
	StaleClaimAfter Duration `yaml:"stale_claim_after"`
	// APIKeys map bearer keys to tenants. Defaults to one development key when
	// herald runs without a config file, none otherwise.
	APIKeys []APIKey `yaml:"api_keys"`
	// Providers are the adapters that reach recipients. Defaults to a
	// simulated provider per channel when herald runs without a config file.
	Providers []Provider `yaml:"providers"`
	// Kinds are the notifications callers may send. Defaults to a few example
	// kinds when herald runs without a config file.
	Kinds []Kind `yaml:"kinds"`
	// KindsFile is a YAML file holding the kinds instead (kinds: […], as
	// here), relative to the config file's directory, so that applications
	// enqueueing with the Go library read the same kinds without this file
	// and its API keys (herald.Options.KindsFile). Not together with Kinds.
	// Load reads it. No default.
	KindsFile string `yaml:"kinds_file"`
	// Lanes sets per-lane sender concurrency. Defaults per lane: alert 16,
	// transactional 32, marketing 16, internal 8.
	Lanes map[string]Lane `yaml:"lanes"`
	// Lease is how long a claimer owns an outbox row without news from it.
	// While a row's send is in flight (store retries, the provider call,
	// record retries) the claimer extends its lease every third of it, so
	// the lease bounds how long a dead or frozen claimer's rows wait, not
	// how long a send may take. It must exceed every provider timeout.
	// Defaults to 1 minute.
	Lease Duration `yaml:"lease"`
	// PollInterval is how often an idle claimer looks for due rows it was not
	// woken for (scheduled sends, retries). Defaults to 500 milliseconds.
	PollInterval Duration `yaml:"poll_interval"`
	// ClaimCooldown is the least time between two claims of a lane's
	// claimer (or relay) once the lane has caught up with a stream (its
	// last claim took two rows or more but came back short): each claim
	// then takes what came in meanwhile, fewer and larger claims, at most
	// this much later. An idle lane or a slow stream is claimed at once,
	// and a backlog without it. A negative value claims on every wake-up.
	// At most 1 second. Defaults to 10 milliseconds.
	ClaimCooldown Duration `yaml:"claim_cooldown"`
	// SweepInterval is how often the sweeps (stale claims, expired leases,
	// expired idempotency keys, expired rows) run. Defaults to 1 minute.
	SweepInterval Duration `yaml:"sweep_interval"`
	// WatchdogInterval is how often the leader's watchdog (package
	// watchdog) looks for rows past their deadline with no owner and
	// re-drives them. Defaults to 1 minute.
	WatchdogInterval Duration `yaml:"watchdog_interval"`
	// WatchdogRetryGrace is how long past its next attempt time a delivery
	// waiting in RETRY_WAIT, whose outbox row will not offer it again, may
	// still have a copy on its way before the watchdog re-drives it: with
	// rabbitmq a copy can wait up to the longest retry tier (30 minutes)
	// and then its turn in a slow lane. Defaults to 5 minutes, or 1 hour
	// with transport rabbitmq.
	WatchdogRetryGrace Duration `yaml:"watchdog_retry_grace"`
	// WatchdogPublishedGrace is how long after its publication a PUBLISHED
	// outbox row may wait for its delivery row (its copy in a slow lane)
	// before the watchdog re-drives it. Defaults to 1 hour.
	WatchdogPublishedGrace Duration `yaml:"watchdog_published_grace"`
	// WatchdogSweepGrace is how long past the sweeps' own thresholds (a
	// SENDING claim's stale_claim_after, the end of a lease) the watchdog
	// leaves a row to them before it settles it itself. Defaults to 5
	// minutes.
	WatchdogSweepGrace Duration `yaml:"watchdog_sweep_grace"`
	// IdempotencyTTL is how long an Idempotency-Key is remembered. Defaults to 24 hours.
	IdempotencyTTL Duration `yaml:"idempotency_ttl"`
	// Retry is the schedule for definite non-sends. Defaults: 2 quick tries
	// 1 second apart, then 3 tries 10 minutes apart.
	Retry Retry `yaml:"retry"`
	// DispatchMaxAttempts is how many times the dispatcher backs a row off
	// (1, 2, 4, 8, 16, then 30 minutes) before it marks it FAILED. Defaults to 20.
	DispatchMaxAttempts int `yaml:"dispatch_max_attempts"`
	// ShutdownTimeout bounds the drain on SIGTERM. Defaults to 25 seconds.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// ShutdownDelay is how long herald goes on serving after SIGTERM, with
	// /readyz answering 503 (shutdown), before the drain closes the
	// listener: the time a load balancer takes to see it and send no more.
	// Defaults to 0 (the listener closes at once); at most 1 minute.
	ShutdownDelay Duration `yaml:"shutdown_delay"`
	// LogLevel is the least level logged: debug, info, warn or error.
	// Debug adds the lines of retries that end well (a result written on
	// its second try, a lease no longer held); no level logs personal
	// data. Defaults to info.
	LogLevel string `yaml:"log_level"`
	// ReconcileInterval is how often the leader runs a reconciliation
	// (package reconcile): it runs one when the newest kept report, from
	// the leader or from `herald reconcile`, is this old. Defaults to 1 hour.
	ReconcileInterval Duration `yaml:"reconcile_interval"`
	// LookupInterval is how often the leader asks the providers that
	// have a status look-up about their UNKNOWN deliveries (package
	// settle), a bounded page each round. Defaults to 1 minute.
	LookupInterval Duration `yaml:"lookup_interval"`
	// OperatorKeys are bearer keys for the operator's routes (GET
	// /v1/ops/reconcile), which show every tenant's figures. An operator
	// key is refused on every tenant route, and an API key on the
	// operator's; no key may be both. Defaults to none: the operator's
	// routes then refuse every request.
	OperatorKeys []string `yaml:"operator_keys"`
	// OperatorKeysFile is a file (relative to the config file's
	// directory) of more operator keys, kept out of this file: one per
	// line, or separated by white space. Load adds them to OperatorKeys.
	// Defaults to none.
	OperatorKeysFile string `yaml:"operator_keys_file"`
	// OperatorKeysEnv is an environment variable holding more operator
	// keys, separated by white space. Load adds them to OperatorKeys.
	// Defaults to none.
	OperatorKeysEnv string `yaml:"operator_keys_env"`
	// Inbox configures the recipient inbox's retention and live streams
	// (config/inbox.go). Defaults are listed per field.
	Inbox Inbox `yaml:"inbox"`
	// Limits are the per-key and per-tenant rates and the request caps
	// (limits.go). Defaults are listed per field.
	Limits Limits `yaml:"limits"`
	// Environment is production, staging or development: outside
	// production only allow-listed addresses get provider calls
	// (allowlist.go). Defaults to development.
	Environment string `yaml:"environment"`
	// AllowList is the addresses a non-production herald may send to
	// (allowlist.go). Defaults to none.
	AllowList AllowList `yaml:"allowlist"`
	// QuietHours is when marketing may be sent, in the recipient's time
	// zone (quiethours.go). Defaults to 08:00–20:50 Asia/Seoul.
	QuietHours QuietHours `yaml:"quiet_hours"`
	// EventSuppression is the at-most-one-send-per-event rule
	// (suppression.go). Defaults to on, with a 10 minute lease.
	EventSuppression EventSuppression `yaml:"event_suppression"`
	// RecipientTokens configures the tokens apps read a recipient's inbox
	// with (config/inbox.go). Defaults are listed per field.
	RecipientTokens RecipientTokens `yaml:"recipient_tokens"`
	// PersonalData holds the keys that encrypt contact fields, device
	// tokens and params at rest (personaldata.go, package seal). Defaults
	// to none: stored as plain text.
	PersonalData PersonalData `yaml:"personal_data"`

	// Server sets the HTTP server's timeouts and connection limits
	// (hardening.go). Defaults are listed per field.
	Server Server `yaml:"server"`
	// Metrics says where GET /metrics is served and who may read it
	// (hardening.go). Defaults to the API listener, without a token.
	Metrics MetricsConfig `yaml:"metrics"`
	// SendAtHorizon is how far ahead of now a send_at may be (422 beyond).
	// Defaults to 366 days.
	SendAtHorizon Duration `yaml:"send_at_horizon"`
	// CampaignDraftTTL is how long a campaign may stay DRAFT after its
	// creation (its deadline, fixed then): from then a start or a page is
	// refused and the leader ends the draft CANCELLED (reason
	// DRAFT_EXPIRED). At least 1m. Defaults to 7 days (168h).
	CampaignDraftTTL Duration `yaml:"campaign_draft_ttl"`

	// Dev is set when herald runs on its built-in defaults (no config file).
	Dev bool `yaml:"-"`
	// devAllowRemote: HERALD_DEV_ALLOW_REMOTE=1 (hardening.go).
	devAllowRemote bool

	// retrySlowGiven: the file set retry.slow (0 is a choice there, not
	// "unset").
	retrySlowGiven bool
	// kindsFrom is the kinds file Kinds were read from (KindsFile resolved
	// against the config file's directory), named in kind errors.
	kindsFrom string
	// tokenKeys are the recipient token keys with their secrets read.
	tokenKeys map[string][]KeySecret
	// pdKeys are the personal data keys with their secrets read.
	pdKeys []KeySecret
}

// APIKey maps a bearer key to a tenant.
type APIKey struct {
	Key    string `yaml:"key"`
	Tenant string `yaml:"tenant"`
	// Name names the key in the audit log. Defaults to "config".
	Name string `yaml:"name"`
	// Scopes are what the key may do (send, read, admin). Defaults to
	// every scope.
	Scopes []string `yaml:"scopes"`
}

// Provider configures one adapter.
type Provider struct {
	// Name identifies the provider in logs and metrics. Required.
	Name string `yaml:"name"`
	// Type is "webhook" or "sim". Required.
	Type string `yaml:"type"`
	// Channel is the channel this provider serves. Required.
	Channel string `yaml:"channel"`
	// URL is where a webhook provider POSTs. Required for type webhook.
	URL string `yaml:"url"`
	// Timeout bounds one provider call. Defaults to 10 seconds.
	Timeout Duration `yaml:"timeout"`
	// Latency is the simulated provider's delay per call. Defaults to 0.
	Latency Duration `yaml:"latency"`
	// Faults is the simulated provider's fault mix. Defaults to none.
	Faults Faults `yaml:"faults"`
	// ReportAfter makes the simulated provider send a delivery report
	// this long after each call that reached it (DELIVERED, or failed for
	// the ReportFailed fraction). Defaults to 0: no reports.
	ReportAfter Duration `yaml:"report_after"`
	// ReportFailed is the fraction (0..1) of the simulated provider's
	// delivery reports that say the message could not be delivered.
	// Defaults to 0.
	ReportFailed float64 `yaml:"report_failed"`
	// StatusLookup makes the simulated provider answer status look-ups
	// of UNKNOWN deliveries from its record of calls (this process's
	// memory). Defaults to false.
	StatusLookup bool `yaml:"status_lookup"`
	// RateLimit caps the calls made to this provider by every herald
	// process sharing the database. Defaults to no limit.
	RateLimit *RateLimit `yaml:"rate_limit"`
	// ProviderOptions are the real provider types' own settings
	// (providers.go). No default: each type says what it requires.
	ProviderOptions `yaml:",inline"`
}

// Faults are fractions (0..1) of calls the simulated provider answers with
// each failure class, and the destinations it answers as dead.
type Faults struct {
	NotSent   float64 `yaml:"not_sent"`
	Permanent float64 `yaml:"permanent"`
	Unknown   float64 `yaml:"unknown"`
	// DeadAddresses are device tokens (or other addresses) answered, every
	// time, as dead: a permanent failure with reason UNREGISTERED that
	// deactivates the device a push went to. Defaults to none.
	DeadAddresses []string `yaml:"dead_addresses"`
}

// Kind is a notification kind: its lane and what it says on each channel.
type Kind struct {
	Name      string              `yaml:"name"`
	Category  string              `yaml:"category"`
	Channels  []string            `yaml:"channels"`
	Templates map[string]Template `yaml:"templates"`
	// Policy is how the channels are used: all (each one) or first (the
	// first the recipient can receive on, the next only after a definite
	// failure; channelpolicy.go). Defaults to all.
	Policy string `yaml:"policy"`
	// Tenants are the tenants that may send the kind (a brand's texts,
	// its receiver): to any other it does not exist (unknown kind, not
	// listed by GET /v1/kinds). Defaults to every tenant.
	Tenants []string `yaml:"tenants"`
}

// Template is a Go text/template pair over the request's params: one
// title and body,
//
//	push: {title: "…", body: "…"}
//
// or one pair per locale, the recipient's profile language choosing among
// them at render time (package locale), "default" for everyone else:
//
//	push:
//	  ko: {title: "…", body: "…"}
//	  en: {title: "…", body: "…"}
//	  default: {title: "…", body: "…"}
type Template struct {
	Title string `yaml:"title"`
	Body  string `yaml:"body"`
	// Locales holds the per-locale pairs, keyed by BCP 47 tag or
	// "default"; nil for a single pair.
	Locales map[string]Template `yaml:"-"`
}

// plainTemplate decodes one title and body, with no other key.
type plainTemplate struct {
	Title string `yaml:"title"`
	Body  string `yaml:"body"`
}

// UnmarshalYAML reads either shape of Template: a mapping with a title or
// a body is one pair (any other key in it is unknown), else each key is a
// locale.
func (t *Template) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: cannot unmarshal a template from this value: want {title, body}, or one {title, body} per locale", n.Line)
	}
	plain := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; k == "title" || k == "body" {
			plain = true
		}
	}
	if plain {
		p, err := decodePair(n)
		*t = Template{Title: p.Title, Body: p.Body}
		return err
	}
	t.Locales = map[string]Template{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		p, err := decodePair(n.Content[i+1])
		if err != nil {
			return err
		}
		t.Locales[n.Content[i].Value] = Template{Title: p.Title, Body: p.Body}
	}
	return nil
}

// decodePair decodes one {title, body}, refusing any other key as the
// file's strict decoder would (a node's own Decode does not take the
// decoder's KnownFields).
func decodePair(n *yaml.Node) (plainTemplate, error) {
	var p plainTemplate
	if n.Kind != yaml.MappingNode {
		return p, fmt.Errorf("line %d: cannot unmarshal a template from this value: want {title, body}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value != "title" && k.Value != "body" {
			return p, fmt.Errorf("line %d: field %s not found in type config.plainTemplate", k.Line, k.Value)
		}
	}
	return p, n.Decode(&p)
}

// MarshalYAML writes the template in the shape it was read in.
func (t Template) MarshalYAML() (any, error) {
	if t.Locales == nil {
		return plainTemplate{Title: t.Title, Body: t.Body}, nil
	}
	out := map[string]plainTemplate{}
	for k, v := range t.Locales {
		out[k] = plainTemplate{Title: v.Title, Body: v.Body}
	}
	return out, nil
}

// Texts returns the template's pairs by locale key: "" for a single pair.
func (t Template) Texts() map[string]Template {
	if t.Locales == nil {
		return map[string]Template{"": {Title: t.Title, Body: t.Body}}
	}
	return t.Locales
}

// Lane configures one lane.
type Lane struct {
	// Concurrency is the number of sends in flight at once on this lane.
	// Defaults per lane: alert 16, transactional 32, marketing 16, internal 8.
	Concurrency int `yaml:"concurrency"`
	// Reserve is how many of the lane's slots are kept from the tenant
	// holding the most (db transport): a tenant holds at most concurrency
	// − reserve sends in flight, so another tenant's send finds a slot free
	// at once instead of waiting for one of a big tenant's sends to end;
	// while one scope of that tenant holds nearly all of them, half the
	// reserve (rounded down) may serve the tenant's other scopes too. 0
	// lets one tenant fill the lane. Defaults to a sixteenth of the
	// concurrency: alert 1, transactional 2, marketing 1, internal 0.
	Reserve *int `yaml:"reserve"`
}

// RabbitMQ tunes the rabbitmq transport (relay, queues, consumers).
type RabbitMQ struct {
	// Prefetch is the most jobs each lane consumer holds unacknowledged,
	// those it is sending included. The broker's prefetch counts messages,
	// so the consumer sets it to the messages that hold this many jobs,
	// following the jobs its messages carry (relay_bundle; broker/rabbitmq,
	// "Prefetch follows the bundles"). Defaults per lane to the lane's
	// concurrency.
	Prefetch map[string]int `yaml:"prefetch"`
	// RelayBatch is how many outbox rows the relay claims and publishes at
	// once. Defaults to 500.
	RelayBatch int `yaml:"relay_batch"`
	// RelayInFlight is how many claimed batches one lane's relay keeps
	// awaiting confirms at once. Defaults to 4.
	RelayInFlight int `yaml:"relay_in_flight"`
	// RelayBundle is the most jobs the relay puts in one message: the
	// broker's work is mostly per message, so a claim's rows go out in
	// bundles (broker/rabbitmq, "Bundles"). 1 publishes a message a job.
	// Defaults to 16.
	RelayBundle int `yaml:"relay_bundle"`
	// PublishWindow is the most jobs a lane's queue holds ready before
	// the relays stop publishing to it: the rest of a backlog waits in the
	// outbox, whose claims share the lane between tenants, instead of in the
	// queue's one FIFO (dispatch.RelayConfig.Window). Defaults to four times
	// the lane's prefetch, at least 256 (MinExpressPublishWindow), for a
	// lane with a reserve (its express queue), else twice the prefetch, at
	// least 128 (MinPublishWindow); -1 publishes without a window.
	PublishWindow int `yaml:"publish_window"`
	// ConfirmTimeout is how long the relay waits for a publisher confirm
	// before it returns the row to PENDING. It must be shorter than lease.
	// Defaults to 5 seconds.
	ConfirmTimeout Duration `yaml:"confirm_timeout"`
	// SingleActiveConsumer makes each lane queue deliver to one consumer at
	// a time across every herald process: a rate limit, never a duplicate
	// guard (the deliveries claim is). Defaults to false.
	SingleActiveConsumer bool `yaml:"single_active_consumer"`
	// DeliveryLimit is how many times the broker delivers one message
	// before it dead-letters it to the parking queue (a poison message that
	// keeps killing its consumer). Defaults to 20.
	DeliveryLimit int `yaml:"delivery_limit"`
	// Prefix names herald's exchanges and queues. Defaults to "herald".
	Prefix string `yaml:"prefix"`
}

// Retry is the schedule for definite non-sends (DESIGN §2): Quick tries
// QuickDelay apart, then Slow tries SlowDelay apart, then RETRY_EXHAUSTED.
type Retry struct {
	// Quick is the number of quick tries, the first call included. Defaults to 2.
	Quick int `yaml:"quick"`
	// QuickDelay is the wait after a quick try. Defaults to 1 second.
	QuickDelay Duration `yaml:"quick_delay"`
	// Slow is the number of slow tries after the quick ones; a config
	// file's slow: 0 means none. Defaults to 3.
	Slow int `yaml:"slow"`
	// SlowDelay is the wait before each slow try. Defaults to 10 minutes.
	SlowDelay Duration `yaml:"slow_delay"`
}

// Duration is a time.Duration written as "10m", "1.5s" in YAML.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: %s is not a duration (try \"10s\" or \"5m\")", n.Line, n.ShortTag())
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (try \"10s\" or \"5m\")", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Environment variables that override the file.
const (
	EnvDatabase    = "HERALD_DATABASE"
	EnvListen      = "HERALD_LISTEN"
	EnvTransport   = "HERALD_TRANSPORT"
	EnvRabbitMQURL = "HERALD_RABBITMQ_URL"
)

// Load reads path (empty: the built-in development config), applies the
// environment, fills defaults and validates.
func Load(path string, getenv func(string) string) (*Config, error) {
	return load(path, getenv, true)
}

// LoadForTools is Load for the commands that never call a provider (the
// CLI's migrate, parked, reconcile, audit, keys…): it leaves the
// providers' credentials unread, so an operator's shell needs only the
// database's and the personal-data keys' secrets, not every provider's
// (Provider.Read answers nil). Everything else is read and checked as
// Load does.
func LoadForTools(path string, getenv func(string) string) (*Config, error) {
	return load(path, getenv, false)
}

func load(path string, getenv func(string) string, providerSecrets bool) (*Config, error) {
	var c *Config
	if path == "" {
		c = Dev()
	} else {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		c, err = Parse(raw)
		if err != nil {
			return nil, err
		}
		if err := c.readKindsFile(filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	c.applyEnv(getenv)
	dir := ""
	if path != "" {
		dir = filepath.Dir(path)
	}
	if err := c.readSecrets(dir, getenv); err != nil {
		return nil, err
	}
	if err := c.readPersonalData(dir, getenv); err != nil {
		return nil, err
	}
	if providerSecrets {
		if err := c.readProviderSecrets(dir, getenv); err != nil {
			return nil, err
		}
	}
	if err := c.readHardening(dir, getenv); err != nil {
		return nil, err
	}
	c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

var (
	lineMsg = regexp.MustCompile(`(?s)^line (\d+): (.*)$`)
	// atColumn: a value's own check names the column it starts at.
	atColumn     = regexp.MustCompile(`^column (\d+): (.*)$`)
	unknownField = regexp.MustCompile(`(?s)^field (.*) not found in type \S+$`)
	duplicateKey = regexp.MustCompile(`(?s)^mapping key "(.*)" already defined at line (\d+)$`)
	// The bad value a decoder message quotes: yaml's `value`, or Duration's
	// Go-quoted "value".
	badValue = regexp.MustCompile("`([^`]*)`|(\"(?:[^\"\\\\]|\\\\.)*\")")
	notAMap  = regexp.MustCompile(`(?s)^cannot unmarshal .* into config\.(Config|kindsDoc)$`)
	// A message about a block value (a mapping or a sequence where one
	// value belongs).
	blockValue = regexp.MustCompile(`^(cannot unmarshal )?!!(seq|map)\b`)
	// wrongType is the decoder's words for a value of the wrong type:
	// its YAML tag, the value it quotes (a scalar's), the Go type.
	wrongType = regexp.MustCompile("^cannot unmarshal !!(\\w+)( `[^`]*`)? into (.+)$")
)

// plainType says a wrongType message in a config's words: "want a list,
// not the text `sms`", where the decoder said "cannot unmarshal !!str
// `sms` into []string". Any other message is returned as it is.
func plainType(msg string) string {
	m := wrongType.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	var want string
	switch t := m[3]; {
	case strings.HasPrefix(t, "[]"):
		want = "a list"
	case strings.HasPrefix(t, "map["):
		want = "a mapping of keys to values"
	case t == "config.Duration":
		want = "a duration such as 30s or 10m"
	case strings.HasPrefix(t, "config."):
		want = "a mapping of keys to values"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		want = "a whole number"
	case strings.HasPrefix(t, "float"):
		want = "a number"
	case t == "bool":
		want = "true or false"
	case t == "string":
		want = "text"
	default:
		return msg
	}
	got := map[string]string{"str": "the text", "int": "the number", "float": "the number", "bool": "the value",
		"null": "nothing", "seq": "a list", "map": "a mapping", "timestamp": "the time"}[m[1]]
	if got == "" {
		got = "!!" + m[1]
	}
	return "want " + want + ", not " + got + m[2]
}

// Parse decodes YAML strictly: an unknown key or a bad value is an error
// naming the key by its path (providers[0].url) and line.
func Parse(raw []byte) (*Config, error) {
	var c Config
	if err := decodeStrict(raw, &c, "listen"); err != nil {
		return nil, err
	}
	c.retrySlowGiven = indexKeys(raw).has("retry.slow")
	return &c, nil
}

// decodeStrict decodes raw into v, a pointer to a struct, refusing unknown
// keys. An error is a *ParseError naming each bad key by its path and line;
// firstKey is the key a file that is not a mapping is told to start with.
// An empty document decodes to nothing.
func decodeStrict(raw []byte, v any, firstKey string) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) { // an empty file is an empty config
		return nil
	}
	if err == nil {
		if msgs := wholeNumbers(raw, reflect.TypeOf(v).Elem()); len(msgs) > 0 {
			return &ParseError{Problems: msgs}
		}
		return nil
	}
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	keys := indexKeys(raw)
	known := topLevelKeys(v)
	for i, m := range msgs {
		// One line each: a value the decoder quotes may hold a newline.
		msgs[i] = strings.ReplaceAll(keys.name(m, firstKey, known), "\n", `\n`)
	}
	return &ParseError{Problems: msgs}
}

// has reports whether the file has the key at path.
func (ix keyIndex) has(path string) bool {
	for _, k := range ix {
		if !k.badKey && k.path == path {
			return true
		}
	}
	return false
}

// ParseError is a file Parse or LoadKinds could not decode: one problem per
// bad key, each naming the key (or, for YAML that does not parse, the line).
type ParseError struct {
	// File names the file for a kinds file (LoadKinds); empty for the
	// config file itself.
	File     string
	Problems []string
}

func (e *ParseError) Error() string {
	if e.File != "" {
		return "config: " + e.File + ": " + strings.Join(e.Problems, "; ")
	}
	return "config: " + strings.Join(e.Problems, "; ")
}

// keyAt is one mapping key (or sequence item) of the file: where it is,
// its full path and, for a scalar, its value.
type keyAt struct {
	line, valueLine   int
	valueColumn       int
	scalar            bool
	name, path, value string
	// badKey: a key that is a mapping or a sequence, not a name; path is
	// then its parent's and value its YAML tag.
	badKey bool
	// aliased: the value is an alias (*a); valueLine, scalar and value are
	// its anchor's, where the decoder reports a bad value.
	aliased bool
}

// topLevelKeys are the yaml names of the fields of the struct v points to.
func topLevelKeys(v any) map[string]bool {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	known := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return known
	}
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			known[name] = true
		}
	}
	return known
}

type keyIndex []keyAt

// indexKeys lists every mapping key and sequence item of raw with its
// path, so a decoder message that only has a line can name the key it is
// about.
func indexKeys(raw []byte) keyIndex {
	var doc yaml.Node
	if yaml.Unmarshal(raw, &doc) != nil {
		return nil
	}
	var out keyIndex
	aliased := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, v := range n.Content {
				walk(v, path)
			}
		case yaml.AliasNode:
			// Each anchored node is entered through an alias once at most,
			// so aliases of aliases cannot multiply the walk.
			if n.Alias != nil && !aliased[n.Alias] {
				aliased[n.Alias] = true
				walk(n.Alias, path)
			}
		case yaml.SequenceNode:
			for i, v := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				out = append(out, keyAt{line: v.Line, valueLine: v.Line, scalar: v.Kind == yaml.ScalarNode, path: p, value: v.Value})
				walk(v, p)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Kind == yaml.MappingNode || k.Kind == yaml.SequenceNode {
					out = append(out, keyAt{line: k.Line, valueLine: k.Line, path: path, value: k.ShortTag(), badKey: true})
					continue
				}
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				at := keyAt{line: k.Line, valueLine: v.Line, valueColumn: v.Column, scalar: v.Kind == yaml.ScalarNode, name: k.Value, path: p, value: v.Value}
				if v.Kind == yaml.AliasNode && v.Alias != nil {
					at.aliased, at.valueLine, at.scalar, at.value = true, v.Alias.Line, v.Alias.Kind == yaml.ScalarNode, v.Alias.Value
				}
				out = append(out, at)
				walk(v, p)
			}
		}
	}
	walk(&doc, "")
	return out
}

// name rewrites one decoder message ("line 7: ...") to name the key;
// firstKey is the key a file that is not a mapping should start with.
func (ix keyIndex) name(msg, firstKey string, known map[string]bool) string {
	m := lineMsg.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	line, _ := strconv.Atoi(m[1])
	rest := m[2]
	// path names the key called name on that line by its full path.
	path := func(name string) string {
		for _, k := range ix {
			if k.line == line && !k.badKey && k.name == name {
				return k.path
			}
		}
		return name
	}
	if f := atColumn.FindStringSubmatch(rest); f != nil {
		// A value's own check (Secret.UnmarshalYAML) says where the value
		// starts: name the key it belongs to.
		col, _ := strconv.Atoi(f[1])
		for _, k := range ix {
			if !k.badKey && k.valueLine == line && k.valueColumn == col {
				return fmt.Sprintf("line %d: %s: %s", line, k.path, f[2])
			}
		}
		return fmt.Sprintf("line %d: %s", line, f[2])
	}
	if f := unknownField.FindStringSubmatch(rest); f != nil {
		return fmt.Sprintf("line %d: unknown key %q", line, path(f[1]))
	}
	if f := duplicateKey.FindStringSubmatch(rest); f != nil {
		return fmt.Sprintf("line %d: duplicate key %q (first at line %s)", line, path(f[1]), f[2])
	}
	if strings.HasSuffix(rest, " into string") {
		for _, k := range ix {
			if k.badKey && k.line == line {
				if k.path == "" {
					return fmt.Sprintf("line %d: a key must be a name, not %s", line, k.value)
				}
				return fmt.Sprintf("line %d: %s: a key must be a name, not %s", line, k.path, k.value)
			}
		}
	}
	if notAMap.MatchString(rest) {
		// No key to name: the file itself is not a mapping.
		return fmt.Sprintf("line %d: the file must be a mapping of keys to values (%s: …)", line, firstKey)
	}
	// A bad value: name the key whose value sits on that line, preferring
	// the scalar the message quotes, then any scalar (the value itself),
	// then a block that starts there; a block first if the message is
	// about one.
	quoted, hasQuoted := quotedValue(rest)
	picks := []func(keyAt) bool{
		func(k keyAt) bool { return hasQuoted && k.scalar && k.value == quoted },
		func(k keyAt) bool { return k.scalar },
		func(k keyAt) bool { return !k.scalar },
	}
	if blockValue.MatchString(rest) {
		picks = []func(keyAt) bool{picks[2], picks[1]}
	}
	for _, pick := range picks {
		// The decoder reports a value reached through an alias at its
		// anchor's line, where an unknown key may hold it too: prefer a key
		// the file may have.
		var found *keyAt
		for i, k := range ix {
			if k.valueLine != line || !pick(k) {
				continue
			}
			if found == nil || !known[topLevel(found.path)] && known[topLevel(k.path)] {
				found = &ix[i]
			}
		}
		switch {
		case found == nil:
		case found.aliased:
			return fmt.Sprintf("line %d: %s: %s (the alias's value, at line %d)", found.line, found.path, plainType(rest), line)
		default:
			return fmt.Sprintf("line %d: %s: %s", line, found.path, plainType(rest))
		}
	}
	return msg
}

// topLevel is the first segment of a key path (providers[0].url → providers).
func topLevel(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

// quotedValue returns the value a decoder message quotes, if it quotes one.
func quotedValue(msg string) (string, bool) {
	m := badValue.FindStringSubmatch(msg)
	switch {
	case m == nil:
		return "", false
	case m[2] != "":
		v, err := strconv.Unquote(m[2])
		return v, err == nil
	}
	return m[1], true
}

func (c *Config) applyEnv(getenv func(string) string) {
	if getenv == nil {
		getenv = os.Getenv
	}
	set := func(dst *string, key string) {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
	set(&c.Database, EnvDatabase)
	set(&c.Listen, EnvListen)
	set(&c.Transport, EnvTransport)
	set(&c.RabbitMQURL, EnvRabbitMQURL)
}

// DefaultLaneConcurrency is the sender concurrency of each lane unless configured.
var DefaultLaneConcurrency = map[heraldtype.Lane]int{
	heraldtype.LaneAlert:         16,
	heraldtype.LaneTransactional: 32,
	heraldtype.LaneMarketing:     16,
	heraldtype.LaneInternal:      8,
}

// def sets *d to v when it is unset (0): every duration's default.
func def(d *Duration, v time.Duration) {
	if *d == 0 {
		*d = Duration(v)
	}
}

// setting is a duration setting and its key, for positive.
type setting struct {
	key string
	v   Duration
}

// positive refuses, naming its key, the first setting that is not more
// than zero.
func positive(settings []setting) error {
	for _, d := range settings {
		if d.v <= 0 {
			return fmt.Errorf("config: %s: must be positive, got %s", d.key, d.v.D())
		}
	}
	return nil
}

// WithDefaults fills every unset field with its documented default.
func (c *Config) WithDefaults() *Config {
	c.allowListDefaults()
	c.hardeningDefaults()
	c.quietHoursDefaults()
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Database == "" {
		c.Database = "sqlite:./herald.db"
	}
	if c.Transport == "" {
		c.Transport = "db"
	}
	def(&c.StaleClaimAfter, 10*time.Minute)
	def(&c.Lease, time.Minute)
	def(&c.PollInterval, 500*time.Millisecond)
	def(&c.ClaimCooldown, DefaultClaimCooldown)
	def(&c.SweepInterval, time.Minute)
	def(&c.WatchdogInterval, time.Minute)
	if c.Transport == "rabbitmq" {
		def(&c.WatchdogRetryGrace, time.Hour)
	}
	def(&c.WatchdogRetryGrace, 5*time.Minute)
	def(&c.WatchdogPublishedGrace, time.Hour)
	def(&c.WatchdogSweepGrace, 5*time.Minute)
	def(&c.IdempotencyTTL, 24*time.Hour)
	c.eventSuppressionDefaults() // its ttl defaults to idempotency_ttl's
	def(&c.ShutdownTimeout, 25*time.Second)
	def(&c.ReconcileInterval, time.Hour)
	def(&c.LookupInterval, time.Minute)
	def(&c.CampaignDraftTTL, 7*24*time.Hour)
	if c.Retry.Quick == 0 {
		c.Retry.Quick = 2
	}
	if c.Retry.Slow == 0 && !c.retrySlowGiven {
		c.Retry.Slow = 3 // a file's slow: 0 is a choice: no slow tries
	}
	def(&c.Retry.QuickDelay, time.Second)
	def(&c.Retry.SlowDelay, 10*time.Minute)
	if c.DispatchMaxAttempts == 0 {
		c.DispatchMaxAttempts = 20
	}
	c.RabbitMQ.withDefaults()
	c.inboxDefaults()
	c.limitsDefaults()
	for i := range c.Providers {
		def(&c.Providers[i].Timeout, 10*time.Second)
	}
	if c.Lanes == nil {
		c.Lanes = map[string]Lane{}
	}
	for _, l := range heraldtype.Lanes {
		lc := c.Lanes[string(l)]
		if lc.Concurrency == 0 {
			lc.Concurrency = DefaultLaneConcurrency[l]
		}
		c.Lanes[string(l)] = lc
	}
	if c.RabbitMQ.Prefetch == nil {
		c.RabbitMQ.Prefetch = map[string]int{}
	}
	for _, l := range heraldtype.Lanes {
		if c.RabbitMQ.Prefetch[string(l)] == 0 {
			c.RabbitMQ.Prefetch[string(l)] = c.Lanes[string(l)].Concurrency
		}
	}
	return c
}

func (r *RabbitMQ) withDefaults() {
	if r.RelayBundle == 0 {
		r.RelayBundle = 16
	}
	if r.RelayBatch == 0 {
		r.RelayBatch = 500
	}
	if r.RelayInFlight == 0 {
		r.RelayInFlight = 4
	}
	if r.ConfirmTimeout == 0 {
		r.ConfirmTimeout = Duration(5 * time.Second)
	}
	if r.DeliveryLimit == 0 {
		r.DeliveryLimit = 20
	}
	if r.Prefix == "" {
		r.Prefix = "herald"
	}
}

// LanePrefetch returns the rabbitmq consumer prefetch of l.
func (c *Config) LanePrefetch(l heraldtype.Lane) int { return c.RabbitMQ.Prefetch[string(l)] }

// DefaultClaimCooldown is ClaimCooldown's default: River's FetchCooldown
// as herald's peer benchmarks run it, and herald.Client's wake-up throttle.
const DefaultClaimCooldown = 10 * time.Millisecond

// Cooldown returns ClaimCooldown for the claimers and relays: zero (none)
// when it is negative.
func (c *Config) Cooldown() time.Duration { return max(c.ClaimCooldown.D(), 0) }

// LanePublishWindow returns the publish window of l's relays (0: none).
func (c *Config) LanePublishWindow(l heraldtype.Lane) int {
	switch w := c.RabbitMQ.PublishWindow; {
	case w < 0:
		return 0
	case w > 0:
		return w
	}
	if c.LaneReserve(l) > 0 {
		return max(4*c.LanePrefetch(l), MinExpressPublishWindow)
	}
	return max(2*c.LanePrefetch(l), MinPublishWindow)
}

// MinPublishWindow is the least default publish window. The window counts
// the messages published and not yet confirmed besides those waiting
// ready, and at a few thousand notifications a second on a loaded host the
// confirms in flight alone filled a window of 64: every claim was cut to
// the window and came back full, so intake's rows were not handed over
// (package dispatch, "Rows handed over at intake") but written PENDING and
// claimed (docs/benchmarks.md).
const MinPublishWindow = 128

// MinExpressPublishWindow is the least default publish window of a lane
// with a reserve, whose relays send a tenant's scope without a backlog to
// the express queue (dispatch.RelayConfig.Express): there a small tenant's
// message does not wait behind the lane queue's FIFO, so the window
// bounds only how far the backlogged tenants' turns blur, and a larger one
// keeps the relay taking rows from intake. At 2,000 notifications a second
// a window of 128 still refused an offer in every ten to fifteen and sent
// the rows after it to the claims; 256 did 9% more end to end on the means
// of nine alternated pairs, a gain smaller than one pair's noise
// (docs/benchmarks.md).
const MinExpressPublishWindow = 256

var namePrefix = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func (c *Config) validateRabbitMQ() error {
	r := c.RabbitMQ
	for name, n := range r.Prefetch {
		if !heraldtype.Lane(name).Valid() {
			return fmt.Errorf("config: rabbitmq.prefetch.%s: not a lane (alert, transactional, marketing, internal)", name)
		}
		if n < 1 || n > 65535 {
			return fmt.Errorf("config: rabbitmq.prefetch.%s: must be 1..65535, got %d", name, n)
		}
	}
	if r.PublishWindow < -1 || r.PublishWindow > 1000000 {
		return fmt.Errorf("config: rabbitmq.publish_window: must be -1 (none) or 0..1000000, got %d", r.PublishWindow)
	}
	if r.RelayBundle < 1 || r.RelayBundle > 500 {
		return fmt.Errorf("config: rabbitmq.relay_bundle: must be 1..500, got %d", r.RelayBundle)
	}
	if r.RelayBatch < 1 || r.RelayBatch > 10000 {
		return fmt.Errorf("config: rabbitmq.relay_batch: must be 1..10000, got %d", r.RelayBatch)
	}
	if r.RelayInFlight < 1 || r.RelayInFlight > 64 {
		return fmt.Errorf("config: rabbitmq.relay_in_flight: must be 1..64, got %d", r.RelayInFlight)
	}
	if r.ConfirmTimeout <= 0 {
		return fmt.Errorf("config: rabbitmq.confirm_timeout: must be positive, got %s", r.ConfirmTimeout.D())
	}
	if r.DeliveryLimit < 1 {
		return fmt.Errorf("config: rabbitmq.delivery_limit: must be at least 1, got %d", r.DeliveryLimit)
	}
	if !namePrefix.MatchString(r.Prefix) {
		return fmt.Errorf("config: rabbitmq.prefix: %q must be 1..64 of A-Z a-z 0-9 _ . -", r.Prefix)
	}
	if c.Transport == "rabbitmq" && c.Lease.D() <= r.ConfirmTimeout.D() {
		// The relay marks a row PUBLISHED only while it still holds the
		// lease; a confirm that may take longer than the lease would hand
		// the row to a second relay every time.
		return fmt.Errorf("config: rabbitmq.confirm_timeout: %s must be shorter than lease (%s)", r.ConfirmTimeout.D(), c.Lease.D())
	}
	return nil
}

// LaneConcurrency returns the configured concurrency of l.
func (c *Config) LaneConcurrency(l heraldtype.Lane) int { return c.Lanes[string(l)].Concurrency }

// LaneReserve returns the slots of l that one tenant never fills
// (Lane.Reserve), its default when not configured.
func (c *Config) LaneReserve(l heraldtype.Lane) int {
	lc := c.Lanes[string(l)]
	if lc.Reserve != nil {
		return *lc.Reserve
	}
	return lc.Concurrency / 16
}

// MaxProviderTimeout is the longest timeout of any configured provider.
func (c *Config) MaxProviderTimeout() time.Duration {
	var m time.Duration
	for _, p := range c.Providers {
		m = max(m, p.Timeout.D())
	}
	return m
}

// longestTimeout is the longest provider timeout and the first provider
// with it ("10s, providers[2] (sms)"): one set by default is named too.
func (c *Config) longestTimeout() string {
	m := c.MaxProviderTimeout()
	for i, p := range c.Providers {
		if p.Timeout.D() == m {
			return fmt.Sprintf("%s, providers[%d] (%s)", m, i, p.Name)
		}
	}
	return m.String()
}

// Validate returns the first problem found, naming the key.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("config: listen: %q is not host:port", c.Listen)
	}
	if _, _, err := c.DatabaseDriver(); err != nil {
		return err
	}
	if err := c.validateHardening(); err != nil {
		return err
	}
	if err := c.validatePersonalData(); err != nil {
		return err
	}
	switch c.Transport {
	case "db":
	case "rabbitmq":
		if c.RabbitMQURL == "" {
			return errors.New("config: rabbitmq_url: required when transport is rabbitmq")
		}
		if u, err := url.Parse(c.RabbitMQURL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
			return fmt.Errorf("config: rabbitmq_url: %q is not an amqp:// URL", RedactURL(c.RabbitMQURL))
		}
	default:
		return fmt.Errorf("config: transport: %q is not db or rabbitmq", c.Transport)
	}
	if _, err := c.SlogLevel(); err != nil {
		return err
	}
	if c.ShutdownDelay < 0 || c.ShutdownDelay.D() > time.Minute {
		return fmt.Errorf("config: shutdown_delay: must be 0..1m, got %s", c.ShutdownDelay.D())
	}
	if err := positive([]setting{
		{"stale_claim_after", c.StaleClaimAfter}, {"lease", c.Lease}, {"poll_interval", c.PollInterval},
		{"sweep_interval", c.SweepInterval}, {"idempotency_ttl", c.IdempotencyTTL},
		{"watchdog_interval", c.WatchdogInterval}, {"watchdog_retry_grace", c.WatchdogRetryGrace},
		{"watchdog_published_grace", c.WatchdogPublishedGrace}, {"watchdog_sweep_grace", c.WatchdogSweepGrace},
		{"shutdown_timeout", c.ShutdownTimeout}, {"reconcile_interval", c.ReconcileInterval}, {"lookup_interval", c.LookupInterval},
		{"campaign_draft_ttl", c.CampaignDraftTTL},
		{"retry.quick_delay", c.Retry.QuickDelay},
		{"retry.slow_delay", c.Retry.SlowDelay},
	}); err != nil {
		return err
	}
	if c.CampaignDraftTTL < Duration(time.Minute) {
		return fmt.Errorf("config: campaign_draft_ttl: must be at least 1m, got %s", c.CampaignDraftTTL.D())
	}
	if c.ClaimCooldown > Duration(time.Second) {
		return fmt.Errorf("config: claim_cooldown: must be at most 1s (or negative for none), got %s", c.ClaimCooldown.D())
	}
	if c.Retry.Quick < 1 || c.Retry.Slow < 0 {
		return fmt.Errorf("config: retry: quick must be at least 1 and slow at least 0, got %d and %d", c.Retry.Quick, c.Retry.Slow)
	}
	if c.DispatchMaxAttempts < 1 {
		return fmt.Errorf("config: dispatch_max_attempts: must be at least 1, got %d", c.DispatchMaxAttempts)
	}
	for name, l := range c.Lanes {
		if !heraldtype.Lane(name).Valid() {
			return fmt.Errorf("config: lanes.%s: not a lane (alert, transactional, marketing, internal)", name)
		}
		if l.Concurrency < 1 || l.Concurrency > 4096 {
			return fmt.Errorf("config: lanes.%s.concurrency: must be 1..4096, got %d", name, l.Concurrency)
		}
		if r := l.Reserve; r != nil && (*r < 0 || 2**r >= l.Concurrency) {
			return fmt.Errorf("config: lanes.%s.reserve: must be 0..%d (less than half the lane's concurrency), got %d", name, (l.Concurrency-1)/2, *r)
		}
	}
	keys := map[string]bool{}
	for i, k := range c.APIKeys {
		if k.Key == "" || k.Tenant == "" {
			return fmt.Errorf("config: api_keys[%d]: key and tenant are required", i)
		}
		if keys[k.Key] {
			return fmt.Errorf("config: api_keys[%d].key: duplicate key", i)
		}
		keys[k.Key] = true
	}
	operators := map[string]bool{}
	for i, k := range c.OperatorKeys {
		switch {
		case k == "":
			return fmt.Errorf("config: operator_keys[%d]: must not be empty", i)
		case keys[k]:
			return fmt.Errorf("config: operator_keys[%d]: also an API key; an operator key must be one of its own", i)
		case operators[k]:
			return fmt.Errorf("config: operator_keys[%d]: duplicate key", i)
		}
		operators[k] = true
	}
	if err := c.validateProviders(); err != nil {
		return err
	}
	// The send policy's rules, each in a file of its own.
	for _, validate := range []func() error{c.validateAllowList, c.validateQuietHours, c.validateEventSuppression, c.validateChannelPolicy} {
		if err := validate(); err != nil {
			return err
		}
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if err := c.validateInbox(); err != nil {
		return err
	}
	if err := c.validateRabbitMQ(); err != nil {
		return err
	}
	// A lease must outlive the one provider call made under it, or a second
	// claimer could take the row while the first is still calling.
	if c.Lease.D() <= c.MaxProviderTimeout() {
		return fmt.Errorf("config: lease: %s must be longer than the longest provider timeout (%s)", c.Lease.D(), c.longestTimeout())
	}
	// The stale sweep must not turn a call that is still in flight into UNKNOWN.
	if c.StaleClaimAfter.D() <= c.MaxProviderTimeout() {
		return fmt.Errorf("config: stale_claim_after: %s must be longer than the longest provider timeout (%s)", c.StaleClaimAfter.D(), c.longestTimeout())
	}
	return c.validateKinds()
}

// ProviderPlatform is the push device platform a provider entry serves on
// its own: "fcm" for type fcm, "apns" for type apns on the push channel;
// "" for every other entry, which serves its whole channel.
func ProviderPlatform(p Provider) string {
	if p.Channel != string(heraldtype.ChannelPush) {
		return ""
	}
	switch p.Type {
	case "fcm", "apns":
		return p.Type
	}
	return ""
}

func (c *Config) validateProviders() error {
	names := map[string]bool{}
	channels := map[string]string{} // channel → the entry that serves it
	for i, p := range c.Providers {
		key := fmt.Sprintf("providers[%d]", i)
		if p.Name == "" {
			return fmt.Errorf("config: %s.name: required", key)
		}
		if names[p.Name] {
			return fmt.Errorf("config: %s.name: duplicate provider %q", key, p.Name)
		}
		names[p.Name] = true
		if !heraldtype.Channel(p.Channel).Valid() {
			return fmt.Errorf("config: %s.channel: %q is not one of %s", key, p.Channel, heraldtype.ChannelNames())
		}
		// A channel has one provider, and push one a device platform
		// (ProviderPlatform): a second entry would be ignored, and a real
		// provider listed after a simulator would never be called.
		serves := p.Channel
		if platform := ProviderPlatform(p); platform != "" {
			serves = p.Channel + " (" + platform + " devices)"
		}
		if first, ok := channels[serves]; ok {
			return fmt.Errorf("config: %s.channel: %s is served by %s already (a channel has one provider, push one for each device platform; remove one of them)", key, serves, first)
		}
		channels[serves] = fmt.Sprintf("%s (%q)", key, p.Name)
		if p.Timeout <= 0 {
			return fmt.Errorf("config: %s.timeout: must be positive", key)
		}
		if err := p.RateLimit.validate(key); err != nil {
			return err
		}
		switch p.Type {
		case "webhook":
			u, err := url.Parse(p.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				// The value is not quoted: a webhook URL may carry a
				// secret (a password, a token in its path or query).
				return fmt.Errorf("config: %s.url: not an http(s) URL with a host (the value is not shown: a webhook URL may hold a secret)", key)
			}
			// A signing key that is not one is a mistake in the config,
			// found here (exit 2), not when the adapter is built.
			if p.Secret != "" {
				if _, err := webhook.ParseSecret(p.Secret); err != nil {
					return fmt.Errorf("config: %s.secret: %w", key, err)
				}
			}
			for j := range p.Secrets {
				if raw := p.Read(fmt.Sprintf("secrets[%d]", j)); raw != nil {
					if _, err := webhook.ParseSecret(string(raw)); err != nil {
						return fmt.Errorf("config: %s.secrets[%d]: %w", key, j, err)
					}
				}
			}
		case "sim":
			f := p.Faults
			for _, v := range []float64{f.NotSent, f.Permanent, f.Unknown} {
				if v < 0 || v > 1 {
					return fmt.Errorf("config: %s.faults: each fraction must be within 0..1", key)
				}
			}
			if f.NotSent+f.Permanent+f.Unknown > 1 {
				return fmt.Errorf("config: %s.faults: fractions add up to more than 1", key)
			}
			if p.Latency < 0 {
				return fmt.Errorf("config: %s.latency: must not be negative", key)
			}
			if p.ReportAfter < 0 {
				return fmt.Errorf("config: %s.report_after: must not be negative", key)
			}
			if p.ReportFailed < 0 || p.ReportFailed > 1 {
				return fmt.Errorf("config: %s.report_failed: must be within 0..1", key)
			}
		case "fcm", "apns", "smtp", "bizppurio", "twilio":
			if err := checkProvider(key, &p); err != nil {
				return err
			}
			if p.Type == "bizppurio" && p.Channel == "alimtalk" {
				if err := c.checkAlimTalkTemplates(key, p); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("config: %s.type: %q is not one of %s", key, p.Type, strings.Join(ProviderTypes, ", "))
		}
	}
	return nil
}

// DatabaseDriver splits Database into driver ("sqlite" or "postgres") and the
// driver's own data source.
func (c *Config) DatabaseDriver() (driver, dsn string, err error) {
	switch {
	case strings.HasPrefix(c.Database, "sqlite:"):
		p := strings.TrimPrefix(c.Database, "sqlite:")
		if p == "" {
			return "", "", errors.New("config: database: sqlite: needs a file path (sqlite:./herald.db)")
		}
		return "sqlite", p, nil
	case strings.HasPrefix(c.Database, "postgres://"), strings.HasPrefix(c.Database, "postgresql://"):
		return "postgres", c.Database, nil
	}
	// The setting may hold a password: it is printed redacted.
	return "", "", fmt.Errorf("config: database: %q is neither sqlite:PATH nor a postgres:// URL", RedactURL(c.Database))
}

// SlogLevel is LogLevel as a slog level (info when unset).
func (c *Config) SlogLevel() (slog.Level, error) {
	switch c.LogLevel {
	case "", "info":
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("config: log_level: %q is not one of debug, info, warn, error", c.LogLevel)
}

// checkAlimTalkTemplates refuses an AlimTalk provider without a template
// code for a kind that goes by alimtalk: every such send would end
// PERMANENT_FAILURE (NO_TEMPLATE) at its first call, quietly, the chain
// paying an SMS each time.
func (c *Config) checkAlimTalkTemplates(key string, p Provider) error {
	for _, k := range c.Kinds {
		if slices.Contains(k.Channels, "alimtalk") && p.Templates[k.Name] == "" {
			return fmt.Errorf("config: %s.templates: kind %s goes by alimtalk and has no template code here (the code Kakao approved for it)", key, k.Name)
		}
	}
	return nil
}
