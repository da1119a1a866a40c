package app_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/lookup"
)

// guardSink is the receiving end of the guarded providers: real webhook
// adapters on sms, email and push, whose every call it records by
// message id.
type guardSink struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newGuardSink(t *testing.T) *guardSink {
	t.Helper()
	s := &guardSink{calls: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls[r.Header.Get("X-Herald-Message-Id")]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *guardSink) callsTo(messageID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[messageID]
}

func (s *guardSink) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		n += c
	}
	return n
}

// guardedHerald runs the development herald on database (transport mq
// when set) in environment env, its sms, email and push served by webhook
// adapters calling sink, with the allow-list +821012345678, example.com
// and tok-qa, and the guard's layers in off switched off.
func guardedHerald(t *testing.T, database, mq, env string, off config.AllowListLayers, sink *guardSink) string {
	t.Helper()
	cfg := testConfig(t, database, func(c *config.Config) {
		if mq != "" {
			c.Transport, c.RabbitMQURL = "rabbitmq", mq
		}
		c.Environment = env
		c.AllowList = config.AllowList{
			Phones: []string{"+821012345678"}, EmailDomains: []string{"example.com"}, DeviceTokens: []string{"tok-qa"}, Off: off,
		}
		for i, p := range c.Providers {
			switch p.Channel {
			case "sms", "email", "push":
				c.Providers[i] = config.Provider{Name: p.Channel + "-hook", Type: "webhook", Channel: p.Channel, URL: sink.URL + "/" + p.Channel}
			}
		}
		c.Kinds = append(c.Kinds, config.Kind{
			Name: "guard.test", Category: "transactional", Channels: []string{"sms", "email", "push"},
			Templates: map[string]config.Template{
				"sms": {Body: "Code {{.code}}"}, "email": {Title: "Code", Body: "Code {{.code}}"}, "push": {Title: "Code", Body: "Code {{.code}}"},
			},
		})
	})
	a, base := newHerald(t, cfg, app.Options{})
	runHerald(t, a)
	return base
}

// guardRecipient gives recipient a profile and one push device, and sends
// it a guard.test; it returns the notification's id.
func guardRecipient(t *testing.T, base, recipient, sms, email, token string) string {
	t.Helper()
	profile := `{"addresses":{"sms":"` + sms + `","email":"` + email + `"}}`
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/"+recipient+"/profile", config.DevAPIKey, profile); code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/"+recipient+"/devices/"+url.PathEscape(token), config.DevAPIKey,
		`{"platform":"fcm"}`); code/100 != 2 {
		t.Fatalf("device: %d %s", code, body)
	}
	code, body := call(t, base, http.MethodPost, "/v1/notifications", config.DevAPIKey,
		`{"recipient":"`+recipient+`","event_id":"e-`+recipient+`","kind":"guard.test","params":{"code":"1234"}}`)
	var accepted struct{ ID string }
	if err := json.Unmarshal(body, &accepted); code != http.StatusAccepted || err != nil {
		t.Fatalf("notify: %d %s", code, body)
	}
	return accepted.ID
}

// ended waits until every entry of the notification has ended and
// returns them.
func ended(t *testing.T, base, id string) []lookup.Delivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := call(t, base, http.MethodGet, "/v1/notifications/"+id, config.DevAPIKey, "")
		var n lookup.Notification
		if err := json.Unmarshal(body, &n); code != http.StatusOK || err != nil {
			t.Fatalf("lookup %s: %d %s", id, code, body)
		}
		done := len(n.Deliveries) > 0
		for _, d := range n.Deliveries {
			done = done && heraldtype.DeliveryState(d.State).Terminal()
		}
		if done {
			return n.Deliveries
		}
		if time.Now().After(deadline) {
			t.Fatalf("notification %s has not ended after 30s: %s", id, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// expectSent checks that each of the notification's sms, email and push
// went out, once each.
func expectSent(t *testing.T, sink *guardSink, ds []lookup.Delivery) {
	t.Helper()
	if len(ds) != 3 {
		t.Fatalf("%d entries, want sms, email and one push: %+v", len(ds), ds)
	}
	for _, d := range ds {
		if d.State != string(heraldtype.DeliveryProviderAccepted) || sink.callsTo(d.MessageID) != 1 {
			t.Errorf("%s: %s(%s) after %d calls, want PROVIDER_ACCEPTED after 1", d.MessageID, d.State, d.Reason, sink.callsTo(d.MessageID))
		}
	}
}

// The non-production guard checks three times, each layer on its own:
// switched off one at a time, the other two still block; left alone, each
// blocks by itself; with all three off (the control) the same sends go
// out. Allow-listed destinations — written in another form than the list
// (010-… against +8210…) — get their calls whatever is switched off. Only
// the adapter's own layer blocks after the claim: its entry shows the one
// attempt that did not leave herald (not_sent, NOT_ALLOWLISTED), and no
// provider call is counted.
func TestTheNonProductionGuardBlocksInEachLayer(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name      string
				off       config.AllowListLayers
				blocks    bool
				byAdapter bool // the adapter's layer is the one that blocks
			}{
				{"AllLayers", config.AllowListLayers{}, true, false},
				{"DispatcherOff", config.AllowListLayers{Dispatcher: true}, true, false},
				{"SenderOff", config.AllowListLayers{Sender: true}, true, false},
				{"AdapterOff", config.AllowListLayers{Adapter: true}, true, false},
				{"DispatcherAlone", config.AllowListLayers{Sender: true, Adapter: true}, true, false},
				{"SenderAlone", config.AllowListLayers{Dispatcher: true, Adapter: true}, true, false},
				{"AdapterAlone", config.AllowListLayers{Dispatcher: true, Sender: true}, true, true},
				{"NoLayerSendsEverything", config.AllowListLayers{Dispatcher: true, Sender: true, Adapter: true}, false, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					database := ""
					if driver == "postgres" {
						database = testpg.Schema(t)
					}
					sink := newGuardSink(t)
					base := guardedHerald(t, database, "", config.EnvDevelopment, tc.off, sink)
					checkGuard(t, base, sink, tc.blocks, tc.byAdapter)
				})
			}
		})
	}
}

// With the rabbitmq transport there is no dispatcher's layer (the relay
// publishes without reading profiles): the sender's and the adapter's
// still block, each on its own.
func TestTheNonProductionGuardWithRabbitMQ(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		off       config.AllowListLayers
		byAdapter bool
	}{
		{"SenderBlocks", config.AllowListLayers{Adapter: true}, false},
		{"AdapterBlocks", config.AllowListLayers{Sender: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sink := newGuardSink(t)
			base := guardedHerald(t, testpg.Schema(t), testmq.VHost(t), config.EnvStaging, tc.off, sink)
			checkGuard(t, base, sink, true, tc.byAdapter)
		})
	}
}

// checkGuard sends to an allow-listed recipient and to a real one, and
// checks who got what.
func checkGuard(t *testing.T, base string, sink *guardSink, blocks, byAdapter bool) {
	t.Helper()
	qa := guardRecipient(t, base, "r-qa", "010-1234-5678", "dev@Example.com", "tok-qa")
	stranger := guardRecipient(t, base, "r-real", "+82 10-9999-0000", "ceo@customer.example", "tok-real")
	expectSent(t, sink, ended(t, base, qa))
	ds := ended(t, base, stranger)
	if !blocks {
		expectSent(t, sink, ds)
		return
	}
	if len(ds) != 3 {
		t.Fatalf("%d entries, want sms, email and one push: %+v", len(ds), ds)
	}
	for _, d := range ds {
		if d.State != string(heraldtype.DeliverySuppressed) || d.Reason != heraldtype.ReasonNotAllowlisted {
			t.Errorf("%s: %s(%s), want SUPPRESSED(NOT_ALLOWLISTED)", d.MessageID, d.State, d.Reason)
		}
		if n := sink.callsTo(d.MessageID); n != 0 {
			t.Errorf("%s: the provider was called %d times", d.MessageID, n)
		}
		switch {
		case byAdapter && (d.Attempts != 1 || len(d.AttemptsLog) != 1 || d.AttemptsLog[0].Class != "not_sent" ||
			d.AttemptsLog[0].Reason != heraldtype.ReasonNotAllowlisted):
			t.Errorf("%s: attempts %d %+v, want the adapter's one not_sent NOT_ALLOWLISTED", d.MessageID, d.Attempts, d.AttemptsLog)
		case !byAdapter && (d.Attempts != 0 || len(d.AttemptsLog) != 0):
			t.Errorf("%s: attempts %d %+v, want none: decided before the claim", d.MessageID, d.Attempts, d.AttemptsLog)
		}
	}
	if sink.total() != 3 {
		t.Errorf("the providers were called %d times, want 3 (the allow-listed recipient's)", sink.total())
	}
	// A refusal is no provider call: only the three accepted ones are
	// counted.
	_, metrics := call(t, base, http.MethodGet, "/metrics", "", "")
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "herald_provider_call_seconds_count{") && strings.Contains(line, `class="not_sent"`) &&
			!strings.HasSuffix(line, " 0") {
			t.Errorf("a refusal was counted as a provider call: %s", line)
		}
	}
}

// In production the guard is off: every destination gets its call.
func TestProductionHasNoGuard(t *testing.T) {
	t.Parallel()
	sink := newGuardSink(t)
	base := guardedHerald(t, "", "", config.EnvProduction, config.AllowListLayers{}, sink)
	expectSent(t, sink, ended(t, base, guardRecipient(t, base, "r-real", "+82 10-9999-0000", "ceo@customer.example", "tok-real")))
}

// The built-in development config guards nothing: its providers are
// simulators, which reach nobody, so the README's first commands work
// with an empty allow-list.
func TestTheDevelopmentConfigSendsToTheSimulators(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "", nil)
	if cfg.Environment != config.EnvDevelopment || cfg.AllowList.Phones != nil {
		t.Fatalf("built-in config: environment %q, allow-list %+v", cfg.Environment, cfg.AllowList)
	}
	a, base := newHerald(t, cfg, app.Options{})
	runHerald(t, a)
	if code, body := call(t, base, http.MethodPut, "/v1/recipients/user-1/profile", config.DevAPIKey,
		`{"addresses":{"push":"device-token-abc","sms":"+821012345678"},"consent":{"push":true}}`); code != http.StatusNoContent {
		t.Fatalf("profile: %d %s", code, body)
	}
	for _, send := range []string{
		`{"recipient":"user-1","event_id":"order-1042","kind":"payment.approved","params":{"amount":12000,"merchant":"Cafe Mori"}}`,
		`{"recipient":"user-1","event_id":"fraud-1","kind":"fraud.alert","params":{"amount":990000}}`,
	} {
		code, body := call(t, base, http.MethodPost, "/v1/notifications", config.DevAPIKey, send)
		var accepted struct{ ID string }
		if err := json.Unmarshal(body, &accepted); code != http.StatusAccepted || err != nil {
			t.Fatalf("notify: %d %s", code, body)
		}
		for _, d := range ended(t, base, accepted.ID) {
			if d.State != string(heraldtype.DeliveryProviderAccepted) {
				t.Errorf("%s: %s(%s), want PROVIDER_ACCEPTED from the simulator", d.MessageID, d.State, d.Reason)
			}
		}
	}
}
