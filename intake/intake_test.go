package intake_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver, to count rows from outside the app

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
)

// The two tenants of every test app.
const (
	keyA = config.DevAPIKey // tenant "dev"
	keyB = "other-key"      // tenant "other"
)

// now is the fixed time of the app's clock, so "past" and "future" are exact.
var now = time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC)

// bundle is a herald API served over real HTTP on its own SQLite file.
type bundle struct {
	url    string
	client *http.Client
	app    *app.App
	dbPath string
	clock  *clock.Fake
	cfg    *config.Config
}

// setup builds the app on config.Dev() (plus a second tenant) and a SQLite
// file in a temporary directory, and serves its router. Nothing claims or
// sends: the app is never Run, so every delivery stays as intake left it.
func setup(t testing.TB) *bundle {
	t.Helper()
	return setupLogging(t, t.Output())
}

// setupLogging is setup with the app's log written to log.
func setupLogging(t testing.TB, log io.Writer) *bundle {
	t.Helper()
	dbPath := testsqlite.Path(t)
	cfg := config.Dev()
	cfg.Database = "sqlite:" + dbPath
	cfg.APIKeys = append(cfg.APIKeys, config.APIKey{Key: keyB, Tenant: "other"})
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	clk := clock.NewFake(now)
	a, err := app.New(context.Background(), cfg, app.Options{
		Logger: slog.New(slog.NewTextHandler(log, nil)),
		Clock:  clk,
	})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("close the app: %v", err)
		}
	})
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close) // runs before a.Close
	client := srv.Client()
	client.Timeout = 30 * time.Second // a hung request fails its test
	return &bundle{url: srv.URL, client: client, app: a, dbPath: dbPath, clock: clk, cfg: cfg}
}

// request is one API call.
type request struct {
	method, path string
	apiKey       string   // "" sends no Authorization header
	idemKey      string   // "" sends no Idempotency-Key header
	moreKeys     []string // more Idempotency-Key headers, after idemKey's
	body         string
}

// response is what came back, body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (b *bundle) do(t *testing.T, r request) response {
	t.Helper()
	req, err := http.NewRequest(r.method, b.url+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.apiKey)
	}
	if r.idemKey != "" {
		req.Header.Set("Idempotency-Key", r.idemKey)
	}
	for _, k := range r.moreKeys {
		req.Header.Add("Idempotency-Key", k)
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", r.method, r.path, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: body}
}

// post sends POST /v1/notifications as tenant apiKey.
func (b *bundle) post(t *testing.T, apiKey, idemKey, body string) response {
	t.Helper()
	return b.do(t, request{method: http.MethodPost, path: "/v1/notifications", apiKey: apiKey, idemKey: idemKey, body: body})
}

// get sends GET path as tenant apiKey.
func (b *bundle) get(t *testing.T, apiKey, path string) response {
	t.Helper()
	return b.do(t, request{method: http.MethodGet, path: path, apiKey: apiKey})
}

// accepted asserts a 202 {"id"} with its Location and returns the id.
func accepted(t *testing.T, r response) string {
	t.Helper()
	if r.status != http.StatusAccepted {
		t.Fatalf("status = %d, want 202; body %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(r.body, &a); err != nil || a.ID == "" {
		t.Fatalf("202 body %s has no id (%v)", r.body, err)
	}
	if loc := r.header.Get("Location"); loc != "/v1/notifications/"+a.ID {
		t.Errorf("Location = %q, want /v1/notifications/%s", loc, a.ID)
	}
	return a.ID
}

// problemBody is an application/problem+json answer.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Param  string `json:"param"`
}

// wantProblem asserts r is an application/problem+json of the given status.
func wantProblem(t *testing.T, r response, status int) problemBody {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p problemBody
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != status {
		t.Errorf("problem status = %d, want %d", p.Status, status)
	}
	if p.Title == "" {
		t.Errorf("problem %s has no title", r.body)
	}
	return p
}

// notification is the body of GET /v1/notifications/{id} (DESIGN §8).
type notification struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	Recipient  string `json:"recipient"`
	Deliveries []struct {
		MessageID string    `json:"message_id"`
		Channel   string    `json:"channel"`
		State     string    `json:"state"`
		Reason    string    `json:"reason"`
		Attempts  int       `json:"attempts"`
		UpdatedAt time.Time `json:"updated_at"`
	} `json:"deliveries"`
}

func (b *bundle) notification(t *testing.T, apiKey, id string) notification {
	t.Helper()
	r := b.get(t, apiKey, "/v1/notifications/"+id)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %s", id, r.status, r.body)
	}
	var n notification
	if err := json.Unmarshal(r.body, &n); err != nil {
		t.Fatalf("GET %s: %v in %s", id, err, r.body)
	}
	return n
}

// writtenTables are the tables a request to intake could write.
var writtenTables = []string{"notifications", "outbox", "idempotency_keys", "deliveries", "delivery_attempts"}

// countRows counts the rows of writtenTables straight from the SQLite file,
// read-only.
func (b *bundle) countRows(t *testing.T) map[string]int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+b.dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	counts := map[string]int{}
	for _, table := range writtenTables {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", table, err)
		}
		counts[table] = n
	}
	return counts
}

// countNotifications counts the notification rows in the SQLite file.
func (b *bundle) countNotifications(t *testing.T) int {
	t.Helper()
	return b.countRows(t)["notifications"]
}

// wantNothingWritten asserts that no table intake writes holds a row.
func (b *bundle) wantNothingWritten(t *testing.T) {
	t.Helper()
	for table, n := range b.countRows(t) {
		if n != 0 {
			t.Errorf("%d rows in %s for a refused request", n, table)
		}
	}
}

// payment is a valid payment.approved body (channels webhook and push).
const payment = `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":12000,"merchant":"Cafe Mori"}}`

func TestPostNotification(t *testing.T) {
	t.Parallel()

	t.Run("AcceptedWithIDAndLocation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.post(t, keyA, "k-1", payment)
		id := accepted(t, r)
		if !strings.HasPrefix(id, "ntf_") {
			t.Errorf("id %q lacks the ntf_ prefix", id)
		}
		if r.header.Get("Idempotent-Replayed") != "" {
			t.Error("a first request is marked Idempotent-Replayed")
		}
	})

	t.Run("GetShowsOnePendingDeliveryPerChannel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := accepted(t, b.post(t, keyA, "k-1", payment))
		n := b.notification(t, keyA, id)
		if n.ID != id || n.Kind != "payment.approved" || n.Recipient != "user-1" {
			t.Errorf("GET = id %q kind %q recipient %q", n.ID, n.Kind, n.Recipient)
		}
		channels := map[string]bool{}
		for _, d := range n.Deliveries {
			channels[d.Channel] = true
			if d.State != "PENDING" {
				t.Errorf("delivery %s state = %q, want PENDING", d.Channel, d.State)
			}
			if d.MessageID == "" || !strings.HasPrefix(d.MessageID, id) {
				t.Errorf("delivery %s message_id = %q, want one derived from %s", d.Channel, d.MessageID, id)
			}
			if d.Attempts != 0 {
				t.Errorf("delivery %s attempts = %d before any send", d.Channel, d.Attempts)
			}
		}
		if len(n.Deliveries) != 2 || !channels["webhook"] || !channels["push"] {
			t.Errorf("deliveries = %+v, want one each on webhook and push", n.Deliveries)
		}
	})

	// A scope (a clinic, a brand) is kept with the notification and shown
	// by GET; a body without one shows none. It is part of the body, so
	// the same key with another scope is another request (409).
	t.Run("ScopeIsKeptAndShown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		scoped := strings.TrimSuffix(payment, "}") + `,"scope":"clinic-7/seoul"}`
		id := accepted(t, b.post(t, keyA, "k-1", scoped))
		read := func(id string) string {
			var v struct {
				Scope *string `json:"scope"`
			}
			r := b.get(t, keyA, "/v1/notifications/"+id)
			if err := json.Unmarshal(r.body, &v); err != nil || r.status != http.StatusOK {
				t.Fatalf("GET %s: %d %s", id, r.status, r.body)
			}
			if v.Scope == nil {
				return "(absent)"
			}
			return *v.Scope
		}
		if got := read(id); got != "clinic-7/seoul" {
			t.Errorf("scope = %s, want clinic-7/seoul", got)
		}
		if got := read(accepted(t, b.post(t, keyA, "k-2", payment))); got != "(absent)" {
			t.Errorf("an unscoped notification's scope = %s, want it absent", got)
		}
		wantProblem(t, b.post(t, keyA, "k-1", strings.Replace(scoped, "clinic-7", "clinic-8", 1)), http.StatusConflict)
		if again := accepted(t, b.post(t, keyA, "k-1", scoped)); again != id {
			t.Errorf("replay answered %s, want %s", again, id)
		}
	})

	t.Run("GetFollowsLocation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.post(t, keyA, "k-1", payment)
		id := accepted(t, r)
		g := b.get(t, keyA, r.header.Get("Location"))
		if g.status != http.StatusOK || !bytes.Contains(g.body, []byte(id)) {
			t.Errorf("GET Location: %d %s", g.status, g.body)
		}
	})

	t.Run("FutureSendAtIsScheduled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		body := `{"recipient":"user-1","event_id":"evt-1","kind":"appointment.reminder",` +
			`"params":{"date":"2030-03-15","time":"10:00"},"send_at":"` + now.Add(24*time.Hour).Format(time.RFC3339) + `"}`
		id := accepted(t, b.post(t, keyA, "k-1", body))
		n := b.notification(t, keyA, id)
		if len(n.Deliveries) != 1 || n.Deliveries[0].Channel != "sms" || n.Deliveries[0].State != "SCHEDULED" {
			t.Errorf("deliveries = %+v, want one sms SCHEDULED", n.Deliveries)
		}
	})

	t.Run("PastSendAtIsPending", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		body := `{"recipient":"user-1","event_id":"evt-1","kind":"appointment.reminder",` +
			`"params":{"date":"2030-03-15","time":"10:00"},"send_at":"` + now.Add(-time.Minute).Format(time.RFC3339) + `"}`
		id := accepted(t, b.post(t, keyA, "k-1", body))
		n := b.notification(t, keyA, id)
		if len(n.Deliveries) != 1 || n.Deliveries[0].State != "PENDING" {
			t.Errorf("deliveries = %+v, want one PENDING", n.Deliveries)
		}
	})

	t.Run("OtherTenantGets404", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := accepted(t, b.post(t, keyA, "k-1", payment))
		wantProblem(t, b.get(t, keyB, "/v1/notifications/"+id), http.StatusNotFound)
	})

	t.Run("UnknownIDIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wantProblem(t, b.get(t, keyA, "/v1/notifications/ntf_NOSUCHID"), http.StatusNotFound)
	})

	t.Run("MissingAuthorizationIs401", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.post(t, "", "k-1", payment)
		wantProblem(t, r, http.StatusUnauthorized)
		if r.header.Get("WWW-Authenticate") == "" {
			t.Error("401 without WWW-Authenticate")
		}
		wantProblem(t, b.get(t, "", "/v1/notifications/ntf_X"), http.StatusUnauthorized)
	})

	t.Run("WrongKeyIs401", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wantProblem(t, b.post(t, "not-a-key", "k-1", payment), http.StatusUnauthorized)
	})

	t.Run("NoIdempotencyKeyIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := wantProblem(t, b.post(t, keyA, "", payment), http.StatusBadRequest)
		if p.Param != "Idempotency-Key" {
			t.Errorf("param = %q, want Idempotency-Key", p.Param)
		}
	})

	t.Run("TwoIdempotencyKeysAre400", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := wantProblem(t, b.do(t, request{method: http.MethodPost, path: "/v1/notifications", apiKey: keyA, idemKey: "k-1",
			moreKeys: []string{"k-2"}, body: payment}), http.StatusBadRequest)
		if p.Param != "Idempotency-Key" || p.Detail != "send one Idempotency-Key header, not 2" {
			t.Errorf("problem %+v, want one naming the two Idempotency-Key headers", p)
		}
		b.wantNothingWritten(t)
		// The same key twice (a retry layer adding it again) is that key.
		accepted(t, b.do(t, request{method: http.MethodPost, path: "/v1/notifications", apiKey: keyA, idemKey: "k-1",
			moreKeys: []string{"k-1"}, body: payment}))
	})

	t.Run("OverlongIdempotencyKeyIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wantProblem(t, b.post(t, keyA, strings.Repeat("k", 256), payment), http.StatusBadRequest)
	})

	for _, tc := range []struct{ name, body string }{
		{"MalformedJSONIs400", `{"recipient":"user-1",`},
		{"NotAnObjectIs400", `["user-1"]`},
		{"UnknownFieldIs400", `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},"priority":"high"}`},
		{"WrongFieldTypeIs400", `{"recipient":7,"event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"}}`},
		{"TwoObjectsIs400", payment + payment},
		{"TrailingBraceIs400", payment + `}`},
		{"TrailingBracketIs400", payment + `]`},
		{"EmptyBodyIs400", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			wantProblem(t, b.post(t, keyA, "k-1", tc.body), http.StatusBadRequest)
			b.wantNothingWritten(t)
		})
	}

	for _, tc := range []struct{ name, body, param, detail string }{
		{
			name:  "UnknownKindIs422",
			body:  `{"recipient":"user-1","event_id":"evt-1","kind":"payment.refunded","params":{}}`,
			param: "kind", detail: "payment.refunded",
		},
		{
			name:  "MissingTemplateParamIs422",
			body:  `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":12000}}`,
			param: "params.merchant", detail: `"merchant"`,
		},
		{
			name:  "NoParamsIs422",
			body:  `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved"}`,
			param: "params.amount", detail: `"amount"`,
		},
		{
			name:  "ParamsArrayIs422",
			body:  `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":[12000,"Cafe"]}`,
			param: "params", detail: "object",
		},
		{
			name:  "ParamsStringIs422",
			body:  `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":"amount=12000"}`,
			param: "params", detail: "object",
		},
		{
			name:  "MissingRecipientIs422",
			body:  `{"event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"}}`,
			param: "recipient", detail: "recipient",
		},
		{
			name:  "MissingEventIDIs422",
			body:  `{"recipient":"user-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"}}`,
			param: "event_id", detail: "event_id",
		},
		{
			name:  "MissingKindIs422",
			body:  `{"recipient":"user-1","event_id":"evt-1","params":{}}`,
			param: "kind", detail: "kind",
		},
		{
			name:  "ScopeWithASpaceIs422",
			body:  `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},"scope":"clinic 7"}`,
			param: "scope", detail: "scope",
		},
		{
			name: "OverlongScopeIs422",
			body: `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},"scope":"` +
				strings.Repeat("s", 65) + `"}`,
			param: "scope", detail: "64",
		},
		{
			name: "ExpiresAtInThePastIs422",
			body: `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},` +
				`"expires_at":"` + now.Add(-time.Minute).Format(time.RFC3339) + `"}`,
			param: "expires_at", detail: "past",
		},
		{
			name: "ExpiresAtBeforeSendAtIs422",
			body: `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},` +
				`"send_at":"` + now.Add(2*time.Hour).Format(time.RFC3339) + `","expires_at":"` + now.Add(time.Hour).Format(time.RFC3339) + `"}`,
			param: "expires_at", detail: "send_at",
		},
		// Issue 13: a due-by a millisecond after the send could only expire
		// (and alert); a send_at in the year 9999 waits for ever.
		{
			name: "ExpiresAtAMillisecondAfterSendAtIs422",
			body: `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},` +
				`"send_at":"` + now.Add(time.Hour).Format(time.RFC3339Nano) + `","expires_at":"` + now.Add(time.Hour+time.Millisecond).Format(time.RFC3339Nano) + `"}`,
			param: "expires_at", detail: "at least 1s after send_at",
		},
		{
			name: "ExpiresAtAMillisecondFromNowIs422",
			body: `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},` +
				`"expires_at":"` + now.Add(time.Millisecond).Format(time.RFC3339Nano) + `"}`,
			param: "expires_at", detail: "at least 1s",
		},
		{
			name: "SendAtInTheYear9999Is422",
			body: `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},` +
				`"send_at":"9999-12-31T00:00:00Z"}`,
			param: "send_at", detail: "ahead",
		},
		{
			name: "SendAtPastTheHorizonIs422",
			body: `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},` +
				`"send_at":"` + now.Add(catalog.DefaultSendAtHorizon+time.Second).Format(time.RFC3339) + `"}`,
			param: "send_at", detail: "ahead",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := wantProblem(t, b.post(t, keyA, "k-1", tc.body), http.StatusUnprocessableEntity)
			if p.Param != tc.param {
				t.Errorf("param = %q, want %q", p.Param, tc.param)
			}
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q does not mention %q", p.Detail, tc.detail)
			}
			b.wantNothingWritten(t)
		})
	}

	t.Run("SendAtAndExpiryAtTheirLimitsAre202", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		sendAt := now.Add(catalog.DefaultSendAtHorizon)
		body := `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"m"},` +
			`"send_at":"` + sendAt.Format(time.RFC3339) + `","expires_at":"` + sendAt.Add(catalog.MinExpiryWindow).Format(time.RFC3339) + `"}`
		if r := b.post(t, keyA, "k-1", body); r.status != http.StatusAccepted {
			t.Fatalf("send_at at the horizon, expires_at the least window after: %d %s, want 202", r.status, r.body)
		}
	})

	t.Run("BodyOver64KiBIs413", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		big := `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"` +
			strings.Repeat("m", intake.MaxBody) + `"}}`
		wantProblem(t, b.post(t, keyA, "k-1", big), http.StatusRequestEntityTooLarge)
		b.wantNothingWritten(t)
	})

	t.Run("BodyJustUnder64KiBIsAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		head := `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":1,"merchant":"`
		tail := `"}}`
		body := head + strings.Repeat("m", intake.MaxBody-len(head)-len(tail)) + tail
		if len(body) != intake.MaxBody {
			t.Fatalf("body is %d bytes, want exactly %d", len(body), intake.MaxBody)
		}
		accepted(t, b.post(t, keyA, "k-1", body))
	})
}

func TestPostNotificationIdempotency(t *testing.T) {
	t.Parallel()

	t.Run("SameKeySameBodyReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.post(t, keyA, "k-1", payment)
		id := accepted(t, first)
		again := b.post(t, keyA, "k-1", payment)
		if got := accepted(t, again); got != id {
			t.Errorf("replayed id = %q, want %q", got, id)
		}
		if !bytes.Equal(again.body, first.body) {
			t.Errorf("replayed body %s differs from first %s", again.body, first.body)
		}
		if h := again.header.Get("Idempotent-Replayed"); h != "true" {
			t.Errorf("Idempotent-Replayed = %q, want true", h)
		}
		if n := b.countNotifications(t); n != 1 {
			t.Errorf("notifications = %d, want 1", n)
		}
	})

	t.Run("ReorderedAndRespacedBodyReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.post(t, keyA, "k-1", payment)
		accepted(t, first)
		reordered := "{\n  \"params\": { \"merchant\": \"Cafe Mori\",\t\"amount\": 12000 },\n" +
			"  \"kind\": \"payment.approved\",\n  \"event_id\": \"evt-1\",\n  \"recipient\": \"user-1\"\n}\n"
		again := b.post(t, keyA, "k-1", reordered)
		if again.status != http.StatusAccepted || !bytes.Equal(again.body, first.body) {
			t.Errorf("reordered body: %d %s, want the first 202 %s", again.status, again.body, first.body)
		}
		if h := again.header.Get("Idempotent-Replayed"); h != "true" {
			t.Errorf("Idempotent-Replayed = %q, want true", h)
		}
	})

	t.Run("SameKeyDifferentBodyIs409", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		accepted(t, b.post(t, keyA, "k-1", payment))
		changed := strings.Replace(payment, `"amount":12000`, `"amount":12001`, 1)
		p := wantProblem(t, b.post(t, keyA, "k-1", changed), http.StatusConflict)
		if p.Param != "Idempotency-Key" {
			t.Errorf("param = %q, want Idempotency-Key", p.Param)
		}
		if n := b.countNotifications(t); n != 1 {
			t.Errorf("notifications = %d, want 1", n)
		}
	})

	t.Run("NumberWrittenDifferentlyIs409", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		accepted(t, b.post(t, keyA, "k-1", payment))
		// Numbers are hashed as written: 12000.0 is another request.
		changed := strings.Replace(payment, `"amount":12000`, `"amount":12000.0`, 1)
		wantProblem(t, b.post(t, keyA, "k-1", changed), http.StatusConflict)
	})

	t.Run("RefusedRequestDoesNotTakeTheKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wantProblem(t, b.post(t, keyA, "k-1", `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{}}`), http.StatusUnprocessableEntity)
		accepted(t, b.post(t, keyA, "k-1", payment))
	})

	t.Run("DifferentKeysAreDifferentNotifications", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id1 := accepted(t, b.post(t, keyA, "k-1", payment))
		id2 := accepted(t, b.post(t, keyA, "k-2", payment))
		if id1 == id2 {
			t.Errorf("two keys gave one id %q", id1)
		}
	})

	t.Run("SameKeyUnderTwoTenantsIsTwoNotifications", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ra := b.post(t, keyA, "k-1", payment)
		rb := b.post(t, keyB, "k-1", payment)
		idA, idB := accepted(t, ra), accepted(t, rb)
		if idA == idB {
			t.Fatalf("two tenants share notification %q", idA)
		}
		if rb.header.Get("Idempotent-Replayed") != "" {
			t.Error("the second tenant's first request was replayed from the first tenant's")
		}
		b.notification(t, keyA, idA)
		b.notification(t, keyB, idB)
		wantProblem(t, b.get(t, keyA, "/v1/notifications/"+idB), http.StatusNotFound)
		wantProblem(t, b.get(t, keyB, "/v1/notifications/"+idA), http.StatusNotFound)
		if n := b.countNotifications(t); n != 2 {
			t.Errorf("notifications = %d, want 2", n)
		}
	})

	t.Run("ConcurrentIdenticalRequestsMakeOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 50
		start := make(chan struct{})
		results := make([]response, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodPost, b.url+"/v1/notifications", strings.NewReader(payment))
				if err != nil {
					errs[i] = err
					return
				}
				req.Header.Set("Authorization", "Bearer "+keyA)
				req.Header.Set("Idempotency-Key", "k-race")
				<-start // every request is built; release them together
				res, err := b.client.Do(req)
				if err != nil {
					errs[i] = err
					return
				}
				defer res.Body.Close()
				body, err := io.ReadAll(res.Body)
				results[i], errs[i] = response{status: res.StatusCode, header: res.Header, body: body}, err
			})
		}
		close(start)
		wg.Wait()

		ids := map[string]int{}
		replayed := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("request %d: %v", i, errs[i])
			}
			ids[accepted(t, results[i])]++
			if results[i].header.Get("Idempotent-Replayed") == "true" {
				replayed++
			}
		}
		if len(ids) != 1 {
			t.Fatalf("%d concurrent identical requests gave %d ids: %v", n, len(ids), ids)
		}
		if replayed != n-1 {
			t.Errorf("%d answers marked replayed, want %d (all but the one that created it)", replayed, n-1)
		}
		for id := range ids {
			if got := b.notification(t, keyA, id); len(got.Deliveries) != 2 {
				t.Errorf("deliveries = %d, want 2", len(got.Deliveries))
			}
		}
		if got := b.countNotifications(t); got != 1 {
			t.Errorf("notifications rows = %d, want exactly 1", got)
		}
	})
}

// TestIdempotencyKeyIsRememberedForItsTTL holds the README's "Keys are
// remembered for 24 hours" (idempotency_ttl, by default 24h) on the app's
// clock: a key replays its first answer until the TTL has passed, and is a
// new request from then on.
func TestIdempotencyKeyIsRememberedForItsTTL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ttl := b.cfg.IdempotencyTTL.D()
	if ttl != 24*time.Hour {
		t.Fatalf("idempotency_ttl = %s by default, want 24h as the README says", ttl)
	}
	changed := strings.Replace(payment, `"amount":12000`, `"amount":12001`, 1)
	first := b.post(t, keyA, "k-1", payment)
	id := accepted(t, first)

	b.clock.Advance(ttl - time.Millisecond)
	again := b.post(t, keyA, "k-1", payment)
	if got := accepted(t, again); got != id || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("just before the TTL: id %s replayed %q, want the first answer %s replayed", got, again.header.Get("Idempotent-Replayed"), id)
	}
	wantProblem(t, b.post(t, keyA, "k-1", changed), http.StatusConflict)

	b.clock.Advance(time.Millisecond)
	later := b.post(t, keyA, "k-1", changed)
	newID := accepted(t, later)
	if newID == id || later.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("once the TTL passed: id %s (first %s), replayed %q; want a new notification", newID, id, later.header.Get("Idempotent-Replayed"))
	}
	if n := b.countNotifications(t); n != 2 {
		t.Errorf("notifications = %d, want 2", n)
	}
	// The key now holds the new request, for a TTL of its own.
	b.clock.Advance(ttl - time.Millisecond)
	if got := accepted(t, b.post(t, keyA, "k-1", changed)); got != newID {
		t.Errorf("the key's new answer: id %s, want %s", got, newID)
	}
	wantProblem(t, b.post(t, keyA, "k-1", payment), http.StatusConflict)
}

// An outage answers every request 503, and the log says so once a second
// with a count, not once a request.
func TestStoreUnavailableIsOneLogLineASecond(t *testing.T) {
	t.Parallel()
	var log testenv.Buffer
	b := setupLogging(t, &log)
	if err := b.app.Store().Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		wantProblem(t, b.post(t, keyA, fmt.Sprintf("k-%d", i), payment), http.StatusServiceUnavailable)
	}
	if n := strings.Count(log.String(), "intake: store unavailable"); n < 1 || n > 2 {
		t.Fatalf("20 requests of an outage logged %d lines:\n%s", n, log.String())
	}
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := accepted(t, b.post(t, keyA, "k-1", payment))
	if r := b.get(t, "", "/readyz"); r.status != http.StatusOK {
		t.Fatalf("readyz before close = %d %s", r.status, r.body)
	}
	if err := b.app.Store().Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}

	// README: "503 (application/problem+json, Retry-After: 1) for any
	// request it could not commit, and nothing of it is written".
	r := b.post(t, keyA, "k-2", payment)
	wantProblem(t, r, http.StatusServiceUnavailable)
	if got := r.header.Values("Retry-After"); len(got) != 1 || got[0] != "1" {
		t.Errorf("Retry-After = %q, want [\"1\"]", got)
	}
	// A replay cannot be answered either: the store holds the first answer.
	r = b.post(t, keyA, "k-1", payment)
	wantProblem(t, r, http.StatusServiceUnavailable)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q on the replay, want 1", got)
	}
	want := map[string]int{"notifications": 1, "outbox": 2, "idempotency_keys": 1, "deliveries": 0, "delivery_attempts": 0}
	if got := b.countRows(t); !maps.Equal(got, want) {
		t.Errorf("rows after the 503s: %v, want only the first request's %v", got, want)
	}
	wantProblem(t, b.get(t, keyA, "/v1/notifications/"+id), http.StatusServiceUnavailable)
	wantProblem(t, b.get(t, "", "/readyz"), http.StatusServiceUnavailable)
	// The process is alive even though the store is not.
	if r := b.get(t, "", "/healthz"); r.status != http.StatusOK {
		t.Errorf("healthz = %d, want 200", r.status)
	}
}

func TestOperationalEndpoints(t *testing.T) {
	t.Parallel()

	t.Run("Healthz", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if r := b.get(t, "", "/healthz"); r.status != http.StatusOK {
			t.Errorf("healthz = %d %s", r.status, r.body)
		}
	})

	t.Run("Readyz", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if r := b.get(t, "", "/readyz"); r.status != http.StatusOK {
			t.Errorf("readyz = %d %s", r.status, r.body)
		}
	})

	t.Run("MetricsBeforeAnyRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.get(t, "", "/metrics")
		if r.status != http.StatusOK || !bytes.Contains(r.body, []byte("herald_notifications_accepted_total")) {
			t.Errorf("metrics = %d, want herald_notifications_accepted_total in:\n%s", r.status, r.body)
		}
	})

	t.Run("MetricsCountAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		accepted(t, b.post(t, keyA, "k-1", payment))
		accepted(t, b.post(t, keyA, "k-1", payment)) // a replay is not a second acceptance
		r := b.get(t, "", "/metrics")
		for _, want := range []string{
			`herald_notifications_accepted_total{lane="transactional"} 1`,
			`herald_intake_responses_total{code="202"} 2`,
		} {
			if !bytes.Contains(r.body, []byte(want)) {
				t.Errorf("metrics lack %q", want)
			}
		}
	})

	t.Run("UnknownEndpointIs404Problem", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wantProblem(t, b.get(t, keyA, "/v1/nope"), http.StatusNotFound)
	})
}
