package config_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
)

// minimal is a config file that sets nothing it need not: every other
// value is a default.
const minimal = `api_keys:
  - {key: change-me, tenant: shop}
providers:
  - {name: hooks, type: webhook, channel: webhook, url: "https://example.com/herald"}
kinds:
  - name: payment.approved
    category: transactional
    channels: [webhook]
    templates:
      webhook: {title: "Payment approved", body: "Paid {{.amount}} won"}
`

// fieldDocs returns the doc comment of every field of the struct types in
// config.go that a config file can set, keyed "Type.Field", with white
// space collapsed.
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		for _, field := range st.Fields.List {
			if field.Tag != nil && strings.Contains(field.Tag.Value, `yaml:"-"`) {
				continue // not a key of the file
			}
			for _, name := range field.Names {
				if name.IsExported() {
					docs[ts.Name.Name+"."+name.Name] = strings.Join(strings.Fields(field.Doc.Text()), " ")
				}
			}
		}
		return false
	})
	return docs
}

// TestDefaultsAreDocumented holds every default three ways: the value a
// minimal config file loads with, the sentence that ends the field's doc
// comment in config.go (STYLE: "each field's doc comment ends with its
// default"), and what the documentation (README.md and docs/) says.
func TestDefaultsAreDocumented(t *testing.T) {
	t.Parallel()
	c, err := config.Load(writeFile(t, minimal), noEnv)
	if err != nil {
		t.Fatalf("Load(minimal) = %v", err)
	}
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var text []string
	for _, p := range append([]string{"../README.md"}, pages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text = append(text, strings.Join(strings.Fields(string(b)), " "))
	}
	readme := strings.Join(text, " ")
	docs := fieldDocs(t)
	lanes := map[string]config.Lane{"alert": {Concurrency: 16}, "transactional": {Concurrency: 32}, "marketing": {Concurrency: 16}, "internal": {Concurrency: 8}}
	prefetch := map[string]int{"alert": 16, "transactional": 32, "marketing": 16, "internal": 8}
	for _, d := range []struct {
		field     string // Type.Field in config.go
		got, want any
		doc       string   // how the field's doc comment ends
		readme    []string // what the README says about it
	}{
		{"Config.Listen", c.Listen, "127.0.0.1:8080", "Defaults to 127.0.0.1:8080.", []string{"listen: 127.0.0.1:8080", "listening on http://127.0.0.1:8080"}},
		{"Config.Database", c.Database, "sqlite:./herald.db", "Defaults to sqlite:./herald.db.", []string{"database: sqlite:./herald.db", "It uses `./herald.db`"}},
		{"Config.Transport", c.Transport, "db", "Defaults to db.", []string{"transport: db"}},
		{"Config.StaleClaimAfter", c.StaleClaimAfter.D(), 10 * time.Minute, "Defaults to 10 minutes.", []string{"stale_claim_after: 10m"}},
		{"Config.Lease", c.Lease.D(), time.Minute, "Defaults to 1 minute.", []string{"lease: 1m"}},
		{"Config.PollInterval", c.PollInterval.D(), 500 * time.Millisecond, "Defaults to 500 milliseconds.", []string{"poll_interval: 500ms"}},
		{"Config.ClaimCooldown", c.ClaimCooldown.D(), 10 * time.Millisecond, "Defaults to 10 milliseconds.", []string{"claim_cooldown: 10ms"}},
		{"Config.SweepInterval", c.SweepInterval.D(), time.Minute, "Defaults to 1 minute.", []string{"sweep_interval: 1m"}},
		{"Config.WatchdogInterval", c.WatchdogInterval.D(), time.Minute, "Defaults to 1 minute.", []string{"watchdog_interval: 1m"}},
		{"Config.WatchdogRetryGrace", c.WatchdogRetryGrace.D(), 5 * time.Minute, "Defaults to 5 minutes, or 1 hour with transport rabbitmq.", []string{"watchdog_retry_grace: 5m"}},
		{"Config.WatchdogPublishedGrace", c.WatchdogPublishedGrace.D(), time.Hour, "Defaults to 1 hour.", []string{"watchdog_published_grace: 1h"}},
		{"Config.WatchdogSweepGrace", c.WatchdogSweepGrace.D(), 5 * time.Minute, "Defaults to 5 minutes.", []string{"watchdog_sweep_grace: 5m"}},
		{"Config.IdempotencyTTL", c.IdempotencyTTL.D(), 24 * time.Hour, "Defaults to 24 hours.", []string{"idempotency_ttl: 24h", "Keys are remembered for 24 hours."}},
		{"Config.Retry", c.Retry, config.Retry{Quick: 2, QuickDelay: config.Duration(time.Second), Slow: 3, SlowDelay: config.Duration(10 * time.Minute)},
			"Defaults: 2 quick tries 1 second apart, then 3 tries 10 minutes apart.",
			[]string{"retry: {quick: 2, quick_delay: 1s, slow: 3, slow_delay: 10m}", "2 quick tries 1 s apart, then 3 tries 10 minutes apart"}},
		{"Retry.Quick", c.Retry.Quick, 2, "Defaults to 2.", nil},
		{"Retry.QuickDelay", c.Retry.QuickDelay.D(), time.Second, "Defaults to 1 second.", nil},
		{"Retry.Slow", c.Retry.Slow, 3, "Defaults to 3.", nil},
		{"Retry.SlowDelay", c.Retry.SlowDelay.D(), 10 * time.Minute, "Defaults to 10 minutes.", nil},
		{"Config.DispatchMaxAttempts", c.DispatchMaxAttempts, 20, "Defaults to 20.", []string{"dispatch_max_attempts: 20"}},
		{"Config.ShutdownTimeout", c.ShutdownTimeout.D(), 25 * time.Second, "Defaults to 25 seconds.", []string{"shutdown_timeout: 25s"}},
		{"Config.ReconcileInterval", c.ReconcileInterval.D(), time.Hour, "Defaults to 1 hour.", []string{"reconcile_interval: 1h"}},
		{"Config.LookupInterval", c.LookupInterval.D(), time.Minute, "Defaults to 1 minute.", []string{"lookup_interval: 1m"}},
		{"Config.CampaignDraftTTL", c.CampaignDraftTTL.D(), 168 * time.Hour, "Defaults to 7 days (168h).", []string{"campaign_draft_ttl: 168h"}},
		{"Config.OperatorKeys", c.OperatorKeys, []string(nil), "Defaults to none: the operator's routes then refuse every request.", nil},
		{"Config.Lanes", c.Lanes, lanes, "Defaults per lane: alert 16, transactional 32, marketing 16, internal 8.", []string{"transactional: {concurrency: 32, reserve: 2}"}},
		{"Lane.Concurrency", c.Lanes["alert"].Concurrency, 16, "Defaults per lane: alert 16, transactional 32, marketing 16, internal 8.", nil},
		{"Lane.Reserve", []int{c.LaneReserve("alert"), c.LaneReserve("transactional"), c.LaneReserve("marketing"), c.LaneReserve("internal")},
			[]int{1, 2, 1, 0}, "Defaults to a sixteenth of the concurrency: alert 1, transactional 2, marketing 1, internal 0.",
			[]string{"transactional: {concurrency: 32, reserve: 2}"}},
		{"Provider.Timeout", c.Providers[0].Timeout.D(), 10 * time.Second, "Defaults to 10 seconds.", []string{"timeout: 10s"}},
		{"RabbitMQ.Prefetch", c.RabbitMQ.Prefetch, prefetch, "Defaults per lane to the lane's concurrency.", []string{"default: the lane's concurrency"}},
		{"RabbitMQ.RelayBatch", c.RabbitMQ.RelayBatch, 500, "Defaults to 500.", []string{"relay_batch: 500"}},
		{"RabbitMQ.RelayInFlight", c.RabbitMQ.RelayInFlight, 4, "Defaults to 4.", []string{"relay_in_flight: 4"}},
		{"RabbitMQ.RelayBundle", c.RabbitMQ.RelayBundle, 16, "Defaults to 16.", []string{"relay_bundle: 16"}},
		{"RabbitMQ.ConfirmTimeout", c.RabbitMQ.ConfirmTimeout.D(), 5 * time.Second, "Defaults to 5 seconds.", []string{"confirm_timeout: 5s"}},
		{"RabbitMQ.SingleActiveConsumer", c.RabbitMQ.SingleActiveConsumer, false, "Defaults to false.", []string{"single_active_consumer: false"}},
		{"RabbitMQ.DeliveryLimit", c.RabbitMQ.DeliveryLimit, 20, "Defaults to 20.", []string{"delivery_limit: 20"}},
		{"RabbitMQ.Prefix", c.RabbitMQ.Prefix, "herald", `Defaults to "herald".`, []string{"prefix: herald"}},
	} {
		if !reflect.DeepEqual(d.got, d.want) {
			t.Errorf("%s loads as %v, want %v", d.field, d.got, d.want)
		}
		doc, ok := docs[d.field]
		if !ok {
			t.Errorf("config.go has no field %s", d.field)
		} else if !strings.HasSuffix(doc, d.doc) {
			t.Errorf("%s's doc comment %q does not end with %q", d.field, doc, d.doc)
		}
		for _, r := range d.readme {
			if !strings.Contains(readme, r) {
				t.Errorf("%s: neither README.md nor docs/ says %q any longer", d.field, r)
			}
		}
	}

	// Every other field of these types says its default (or that it has
	// none, or is required) last.
	for field, doc := range docs {
		typ, _, _ := strings.Cut(field, ".")
		switch typ {
		case "Config", "RabbitMQ", "Retry", "Lane", "Provider":
		default:
			continue
		}
		i := strings.LastIndex(strings.TrimSuffix(doc, "."), ". ")
		last := doc[i+2:]
		if !strings.HasPrefix(last, "Defaults") && !strings.HasPrefix(last, "No default") && !strings.HasPrefix(last, "Required") {
			t.Errorf("%s's doc comment %q does not end with its default", field, doc)
		}
	}
}

// TestRetryBlockWithoutSlowKeepsTheSlowDefault: a retry block that sets
// only some keys gets the documented default for the rest, slow included;
// slow: 0 written out means no slow tries.
func TestRetryBlockWithoutSlowKeepsTheSlowDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want config.Retry
	}{
		{"retry: {slow_delay: 5m}\n", config.Retry{Quick: 2, QuickDelay: config.Duration(time.Second), Slow: 3, SlowDelay: config.Duration(5 * time.Minute)}},
		{"retry: {quick: 4}\n", config.Retry{Quick: 4, QuickDelay: config.Duration(time.Second), Slow: 3, SlowDelay: config.Duration(10 * time.Minute)}},
		{"retry: {slow: 0}\n", config.Retry{Quick: 2, QuickDelay: config.Duration(time.Second), Slow: 0, SlowDelay: config.Duration(10 * time.Minute)}},
	} {
		c, err := config.Load(writeFile(t, tc.text), noEnv)
		if err != nil {
			t.Fatalf("%q: %v", tc.text, err)
		}
		if c.Retry != tc.want {
			t.Errorf("%q: retry = %+v, want %+v", tc.text, c.Retry, tc.want)
		}
	}
}
