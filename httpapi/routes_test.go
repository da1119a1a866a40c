package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/inbox"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/settle"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/stream"
)

func init() { apikeys.Iterations = 1000 } // the tests' stored keys

// routesWithoutAPIKey are the routes that take no API key, and what an API
// key gets there. Every other route of the router must have a scope
// (httpapi.RouteScope).
var routesWithoutAPIKey = map[string]int{
	"GET /v1/me/feed":                http.StatusUnauthorized,
	"GET /v1/me/badge":               http.StatusUnauthorized,
	"POST /v1/me/read":               http.StatusUnauthorized,
	"POST /v1/me/items/{id}/archive": http.StatusUnauthorized,
	"POST /v1/me/receipts":           http.StatusUnauthorized,
	"GET /v1/me/stream":              http.StatusUnauthorized,
	"GET /v1/ops/reconcile":          http.StatusForbidden,
	"POST /v1/ops/inbox/recount":     http.StatusForbidden,
	"POST /v1/callbacks/{provider}":  0, // the provider's own check
	"GET /healthz":                   0,
	"GET /readyz":                    0,
	"GET /metrics":                   0,
	"/":                              0,
}

// walkConfigOptional are the fields of httpapi.Config that add no route;
// every other field is set by fullConfig, so that Routes lists every route
// the router can serve.
var walkConfigOptional = map[string]bool{"Keys": true, "Operators": true, "Limits": true, "Audit": true,
	"Now": true, "MetricsToken": true, "MetricsApart": true, "CampaignMaxRecipients": true,
	"CampaignDraftTTL": true, "CampaignBodies": true, "CampaignBodyWait": true}

type walk struct {
	url    string
	client *http.Client
	routes []string
	// keys: tenant a with every scope, tenant b with every scope, and
	// tenant a with every scope but one.
	keyA, keyB string
	lacking    map[apikeys.Scope]string
	// a's data, which b must never see.
	notificationID, messageID, keyAID string
}

// fullConfig is the router with every part that adds routes, over st.
func fullConfig(t testing.TB, st store.Store, clk clock.Clock) httpapi.Config {
	t.Helper()
	secret := []byte("walk-test-secret-one-0123456789abcdef")
	tokens, err := auth.NewRecipientTokens(auth.RecipientTokensConfig{
		Keys: map[string][]auth.RecipientKey{"a": {{ID: "k1", Secret: secret}}, "b": {{ID: "k1", Secret: secret}}},
		TTL:  time.Hour, MaxTTL: 24 * time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// walk.amplify renders its text once per element of list: a body
	// under 64 KiB can ask for more than the rendered cap.
	kinds := append(config.Dev().Kinds, config.Kind{Name: "walk.amplify", Category: "transactional", Channels: []string{"webhook"},
		Templates: map[string]config.Template{"webhook": {Title: "t", Body: "{{range .list}}{{$.text}}{{end}}"}}},
		// a.receipt is tenant a's own (TestAKindKeptForATenant).
		config.Kind{Name: "a.receipt", Category: "transactional", Channels: []string{"webhook"}, Tenants: []string{"a"},
			Templates: map[string]config.Template{"webhook": {Title: "[A] Receipt", Body: "{{.total}}"}}})
	cat, err := catalog.New(kinds)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	m := metrics.New(nil)
	// Personal data is sealed on the walk: every route that stores or
	// shows it goes through the keyring.
	ring, err := seal.New([]seal.Key{{ID: "walk", Secret: secret}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpapi.Config{
		Keys:      auth.NewKeys(map[string]string{}),
		Operators: auth.NewKeys(map[string]string{"ops-key": "operator"}),
		APIKeys:   apikeys.NewVerifier(apikeys.Config{Store: st, Clock: clk}),
		Intake:    &intake.Handler{Store: st, Catalog: cat, Clock: clk, IdempotencyTTL: time.Hour, Logger: logger, Metrics: m, Seal: ring},
		Seal:      ring,
		Lookup:    &lookup.Handler{Store: st, Logger: logger},
		Parked:    parked.DB{Store: st},
		Store:     st,
		Metrics:   m,
		Logger:    logger,
		Inbox:     &inbox.API{Store: st, Tokens: tokens, Metrics: m, Logger: logger},
		Stream:    stream.New(stream.Config{Store: st, Clock: clk, Logger: logger, Metrics: m}),
		Callbacks: &settle.CallbackHandler{Store: st, Receivers: map[string]provider.CallbackReceiver{}, Metrics: m, Logger: logger},
		Ready:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
		Audit:     &audit.Log{Store: st, Logger: logger},
		Now:       clk.Now,
	}
	t.Cleanup(cfg.Stream.Close)
	v := reflect.ValueOf(cfg)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.IsExported() && !walkConfigOptional[f.Name] && v.Field(i).IsZero() {
			t.Fatalf("httpapi.Config.%s is not set: set it in fullConfig, or list it in walkConfigOptional if it adds no route", f.Name)
		}
	}
	return cfg
}

func setupWalk(t *testing.T, driver string) *walk {
	t.Helper()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	st := testdb.Open(t, driver, clk).Store
	cfg := fullConfig(t, st, clk)
	srv := httptest.NewServer(httpapi.New(cfg))
	t.Cleanup(srv.Close)
	w := &walk{url: srv.URL, client: srv.Client(), routes: httpapi.Routes(cfg), lacking: map[apikeys.Scope]string{}}
	w.client.Timeout = 30 * time.Second
	ctx := context.Background()
	mk := func(tenant string, scopes ...apikeys.Scope) (store.APIKey, string) {
		names := make([]string, len(scopes))
		for i, s := range scopes {
			names[i] = string(s)
		}
		row, key, err := apikeys.Create(ctx, st, apikeys.CreateParams{Tenant: tenant, Name: "walk", Scopes: names, Now: clk.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return row, key
	}
	var rowA store.APIKey
	rowA, w.keyA = mk("a", apikeys.Scopes...)
	w.keyAID = rowA.ID
	_, w.keyB = mk("b", apikeys.Scopes...)
	for _, lack := range apikeys.Scopes {
		var others []apikeys.Scope
		for _, s := range apikeys.Scopes {
			if s != lack {
				others = append(others, s)
			}
		}
		_, w.lacking[lack] = mk("a", others...)
	}
	// a's data: a notification, a profile with an address, a device.
	status, body := w.do(t, "POST", "/v1/notifications", w.keyA, `{"recipient":"alice","event_id":"e1","kind":"payment.approved","params":{"amount":"1000","merchant":"Cafe"}}`)
	if status != http.StatusAccepted {
		t.Fatalf("a's notification: %d %s", status, body)
	}
	w.notificationID = strings.Split(strings.Split(body, `"id":"`)[1], `"`)[0]
	w.messageID = store.MessageID(w.notificationID, "webhook")
	if status, body := w.do(t, "PUT", "/v1/recipients/alice/profile", w.keyA, `{"addresses":{"email":"alice@example.com"},"consent":{"email":true}}`); status != http.StatusNoContent {
		t.Fatalf("a's profile: %d %s", status, body)
	}
	if status, body := w.do(t, "PUT", "/v1/recipients/alice/devices/alice-device-token-0123456789", w.keyA, `{"platform":"fcm"}`); status/100 != 2 {
		t.Fatalf("a's device: %d %s", status, body)
	}
	return w
}

func (w *walk) do(t *testing.T, method, path, key, body string) (int, string) {
	t.Helper()
	resp, b := w.send(t, method, path, key, "walk-"+method+path, body)
	return resp.StatusCode, b
}

// send calls method path with the bearer key (none when "") under the
// Idempotency-Key idem and returns the answer and its body.
func (w *walk) send(t *testing.T, method, path, key, idem, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Idempotency-Key", idem)
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// request is a route's method and a path that names a's things.
func (w *walk) request(pattern string) (method, path, body string) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "GET", "/no-such-route"
	}
	id := w.notificationID
	if strings.HasPrefix(path, "/v1/admin/keys/") {
		id = w.keyAID
	}
	path = strings.NewReplacer("{id}", id, "{recipient}", "alice", "{token}", "alice-device-token-0123456789",
		"{message_id}", w.messageID, "{provider}", "sim").Replace(path)
	body = "{}"
	switch pattern {
	case "POST /v1/notifications":
		body = `{"recipient":"alice","event_id":"e1","kind":"payment.approved","params":{"amount":"1000","merchant":"Cafe"}}`
	case "PUT /v1/recipients/{recipient}/profile":
		body = `{"addresses":{},"consent":{}}`
	case "PUT /v1/recipients/{recipient}/devices/{token}":
		body = `{"platform":"fcm"}`
	case "POST /v1/admin/keys":
		body = `{"name":"x","scopes":["read"]}`
	case "POST /v1/parked/{message_id}/discard":
		body = `{"reason":"walk"}`
	case "POST /v1/deliveries/{message_id}/settle":
		body = `{"result":"failed"}`
	}
	return method, path, body
}

// TestEveryRouteRefusesTheWrongTenantAndTheWrongScope walks every route of
// the router, as the router lists them, with no key, with a key of another
// tenant and with a key of the right tenant that lacks the route's scope.
func TestEveryRouteRefusesTheWrongTenantAndTheWrongScope(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			w := setupWalk(t, driver)
			if len(w.routes) < 20 {
				t.Fatalf("the router lists %d routes: %v", len(w.routes), w.routes)
			}
			secrets := []string{w.notificationID, w.messageID, "alice@example.com", "alice-device-token", w.keyAID}
			for _, pattern := range w.routes {
				method, path, body := w.request(pattern)
				scope, hasScope := httpapi.RouteScope(pattern)
				if !hasScope {
					want, listed := routesWithoutAPIKey[pattern]
					if !listed {
						t.Errorf("%s has no scope and is not a route without API key: give it a scope in httpapi's routeScopes", pattern)
						continue
					}
					if want != 0 {
						if got, b := w.do(t, method, path, w.keyA, body); got != want {
							t.Errorf("%s with an API key: %d %s, want %d", pattern, got, b, want)
						}
					}
					continue
				}
				if got, b := w.do(t, method, path, "", body); got != http.StatusUnauthorized {
					t.Errorf("%s without a key: %d %s, want 401", pattern, got, b)
				}
				if got, b := w.do(t, method, path, w.lacking[scope], body); got != http.StatusForbidden {
					t.Errorf("%s with a key of tenant a without %s: %d %s, want 403", pattern, scope, got, b)
				}
				got, b := w.do(t, method, path, w.keyB, body)
				if got >= 500 {
					t.Errorf("%s with tenant b's key: %d %s", pattern, got, b)
				}
				for _, s := range secrets {
					if strings.Contains(b, s) {
						t.Errorf("%s with tenant b's key answered %d with a's %q: %s", pattern, got, s, b)
					}
				}
			}
			// a's things are as they were.
			if got, b := w.do(t, "GET", "/v1/notifications/"+w.notificationID, w.keyA, ""); got != http.StatusOK {
				t.Errorf("a's notification after the walk: %d %s", got, b)
			}
			if got, b := w.do(t, "GET", "/v1/recipients/alice/profile", w.keyA, ""); got != http.StatusOK || !strings.Contains(b, "alice@example.com") {
				t.Errorf("a's profile after the walk: %d %s", got, b)
			}
			if got, b := w.do(t, "GET", "/v1/recipients/alice/devices", w.keyA, ""); got != http.StatusOK || !strings.Contains(b, "fcm") {
				t.Errorf("a's devices after the walk: %d %s", got, b)
			}
			if got, b := w.do(t, "GET", "/v1/kinds", w.keyA, ""); got != http.StatusOK {
				t.Errorf("a's key after the walk: %d %s", got, b)
			}
		})
	}
}

// raw is do that returns the response (its body read and closed).
func (w *walk) raw(t *testing.T, method, path, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Idempotency-Key", "raw-"+method+path+body)
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// mustKey makes a stored key of tenant with every scope.
func mustKey(t testing.TB, st store.Store, clk clock.Clock, tenant string) string {
	t.Helper()
	_, key, err := apikeys.Create(context.Background(), st, apikeys.CreateParams{Tenant: tenant, Name: "walk",
		Scopes: []string{"send", "read", "admin"}, Now: clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestTwoAuthorizationHeadersAreRefused walks every route that takes a
// credential with two Authorization headers, tenant b's key then a's: HTTP
// allows one, and with two, which one counts would depend on which one each
// hop reads (a proxy in front that checks the last, herald the first). Each
// is 400 naming the header, before any key is looked at.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	t.Parallel()
	w := setupWalk(t, "sqlite")
	for _, pattern := range w.routes {
		method, path, body := w.request(pattern)
		if _, hasScope := httpapi.RouteScope(pattern); !hasScope && routesWithoutAPIKey[pattern] == 0 {
			continue // no credential: nothing to choose between
		}
		req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("Authorization", "Bearer "+w.keyB)
		req.Header.Add("Authorization", "Bearer "+w.keyA)
		req.Header.Set("Idempotency-Key", "two-"+method+path)
		resp, err := w.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		var p problemBody
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || p.Param != "Authorization" {
			t.Errorf("%s with two Authorization headers: %d %+v, want 400 naming Authorization", pattern, resp.StatusCode, p)
		}
	}
	// The same key twice (a retry layer adding it again) is that key.
	req, _ := http.NewRequest("GET", w.url+"/v1/notifications/"+w.notificationID, nil)
	req.Header.Add("Authorization", "Bearer "+w.keyA)
	req.Header.Add("Authorization", "Bearer "+w.keyA)
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a's notification with a's key twice: %d, want 200", resp.StatusCode)
	}
}
