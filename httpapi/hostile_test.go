package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/store"
)

// Hostile input (issue 13): bytes a store cannot hold are a 400 or 422 at
// the edge, the same on both stores, and never reach a store. On
// PostgreSQL a statement the server refuses made the group-commit pipeline
// rerun its whole batch one by one and answered 503 ("retry"), so the test
// also watches every statement sent to the server.

// statementWatch is a pgx tracer that counts the statements PostgreSQL ran
// for the store's pool and keeps the errors the server answered.
type statementWatch struct {
	mu         sync.Mutex
	statements int
	serverErrs []string
}

func (s *statementWatch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	s.statements++
	s.mu.Unlock()
	return ctx
}

func (s *statementWatch) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	s.saw(d.Err)
}

func (s *statementWatch) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *statementWatch) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.mu.Lock()
	s.statements++
	s.mu.Unlock()
	s.saw(d.Err)
}

func (s *statementWatch) TraceBatchEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	s.saw(d.Err)
}

func (s *statementWatch) saw(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		s.mu.Lock()
		s.serverErrs = append(s.serverErrs, pgErr.Code+" "+pgErr.Message)
		s.mu.Unlock()
	}
}

func (s *statementWatch) snapshot() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statements, append([]string(nil), s.serverErrs...)
}

func onEachStoreHostile(t *testing.T, test func(t *testing.T, b *bundle, watch *statementWatch)) {
	t.Helper()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			var watch *statementWatch
			var tracer pgx.QueryTracer
			if driver == "postgres" {
				watch = &statementWatch{}
				tracer = watch
			}
			test(t, setupTraced(t, driver, nil, tracer).bundle, watch)
		})
	}
}

// notification is a POST /v1/notifications body with params as given
// (raw JSON, written as is).
func notification(recipient, params string) string {
	return `{"recipient":"` + recipient + `","event_id":"evt-1","kind":"payment.approved","params":` + params + `}`
}

func TestHostileInputIsRefusedAtTheEdge(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", 201)
	cases := []struct {
		name, method, path, body string
		status                   int
	}{
		{"InvalidUTF8InAParam", "POST", "/v1/notifications", notification("user-1", "{\"amount\":1,\"merchant\":\"caf\xff\"}"), 400},
		{"NULEscapeInAParam", "POST", "/v1/notifications", notification("user-1", `{"amount":1,"merchant":"a\u0000b"}`), 400},
		{"NULEscapeInAParamKey", "POST", "/v1/notifications", notification("user-1", `{"amount":1,"merchant":"m","x\u0000":1}`), 400},
		{"LoneSurrogateInAParam", "POST", "/v1/notifications", notification("user-1", `{"amount":1,"merchant":"\ud800"}`), 400},
		{"NULEscapeInTheRecipient", "POST", "/v1/notifications", notification(`user\u0000`, `{"amount":1,"merchant":"m"}`), 400},
		{"InvalidUTF8InTheRecipient", "POST", "/v1/notifications", notification("user\xff", `{"amount":1,"merchant":"m"}`), 400},
		{"C1ControlInTheRecipient", "POST", "/v1/notifications", notification(`user\u009b31m`, `{"amount":1,"merchant":"m"}`), 422},
		{"C1ControlInAnEventID", "POST", "/v1/notifications", `{"recipient":"user-1","event_id":"e\u0085","kind":"payment.approved","params":{"amount":1,"merchant":"m"}}`, 422},
		{"C1ControlInAProfilePath", "GET", "/v1/recipients/a%C2%9Bb/profile", "", 422},
		{"C1ControlInANotificationID", "GET", "/v1/notifications/ntf%C2%85", "", 400},
		{"C1ControlInAListQuery", "GET", "/v1/notifications?recipient=a%C2%9B", "", 400},
		{"InvalidUTF8InAProfilePath", "GET", "/v1/recipients/%FF/profile", "", 422},
		{"NULInAProfilePath", "PUT", "/v1/recipients/a%00b/profile", `{"addresses":{},"consent":{}}`, 422},
		{"LongRecipientInAProfilePath", "PUT", "/v1/recipients/" + long + "/profile", `{"addresses":{},"consent":{}}`, 422},
		{"NULEscapeInAnAddress", "PUT", "/v1/recipients/user-1/profile", `{"addresses":{"webhook":"a\u0000b"},"consent":{}}`, 400},
		{"InvalidUTF8InANotificationID", "GET", "/v1/notifications/%FF", "", 400},
		{"InvalidUTF8InACancel", "POST", "/v1/notifications/%FF/cancel", "", 400},
		{"InvalidUTF8InAParkedRequeue", "POST", "/v1/parked/%FF/requeue", "", 400},
		{"NULInAParkedDiscard", "POST", "/v1/parked/a%00/discard", `{"reason":"x"}`, 400},
		{"NULEscapeInADiscardReason", "POST", "/v1/parked/m-1/discard", `{"reason":"a\u0000"}`, 400},
		{"InvalidUTF8InAListQuery", "GET", "/v1/notifications?recipient=%FF", "", 400},
		{"NULInAListQuery", "GET", "/v1/notifications?recipient=a%00", "", 400},
		{"InvalidUTF8InADeviceToken", "PUT", "/v1/recipients/user-1/devices/%FF", `{"platform":"fcm"}`, 400},
		{"InvalidUTF8InAnErasure", "DELETE", "/v1/recipients/%FF", "", 422},
		{"InvalidUTF8InConsentHistory", "GET", "/v1/recipients/%FF/consent-history", "", 422},
		// The mux would redirect these to their cleaned paths (another
		// endpoint, and no problem+json).
		{"EmptyIDInACancel", "POST", "/v1/notifications//cancel", "", 404},
		{"DotDotInAPath", "GET", "/v1/notifications/../kinds", "", 404},
		{"EscapedDotInAPath", "GET", "/v1/notifications/%2E", "", 404},
	}
	onEachStoreHostile(t, func(t *testing.T, b *bundle, watch *statementWatch) {
		var before int
		if watch != nil {
			before, _ = watch.snapshot()
		}
		for _, c := range cases {
			req, err := http.NewRequest(c.method, b.url+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+keyA)
			req.Header.Set("Idempotency-Key", "k-"+c.name)
			res, err := b.client.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			res.Body.Close()
			if res.StatusCode != c.status || res.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s: %s %s = %d %s, want %d application/problem+json", c.name, c.method, c.path, res.StatusCode, res.Header.Get("Content-Type"), c.status)
			}
		}
		if watch == nil {
			return
		}
		// Not one statement reached PostgreSQL, so none could fail in a batch
		// and make the pipeline rerun the others.
		after, serverErrs := watch.snapshot()
		if after != before || len(serverErrs) > 0 {
			t.Errorf("the refused requests sent %d statements to PostgreSQL (server errors: %q), want none", after-before, serverErrs)
		}
		// A good request still goes through, as a control that the watch sees.
		r := b.do(t, http.MethodGet, "/v1/recipients/user-1/profile", "Bearer "+keyA, "")
		if r.status != http.StatusNotFound {
			t.Fatalf("GET a profile = %d, want 404", r.status)
		}
		if n, _ := watch.snapshot(); n == after {
			t.Fatal("the watch saw no statement for a good request")
		}
	})
}

func TestProfileValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		status     int
		param      string
	}{
		{"GoodProfile", `{"addresses":{"sms":"010-1234-5678","alimtalk":"+821012345678","email":"r@example.com","push":"tok:APA91b-x_y"},"consent":{"sms":true},"language":"ko-KR","time_zone":"Asia/Seoul"}`, 204, ""},
		{"LanguageNotATag", `{"addresses":{},"consent":{},"language":"not a tag!"}`, 422, "language"},
		{"LanguageTooLong", `{"addresses":{},"consent":{},"language":"` + strings.Repeat("a", 36) + `"}`, 422, "language"},
		{"PhoneWithLetters", `{"addresses":{"sms":"call me"},"consent":{}}`, 422, "addresses.sms"},
		{"PhoneTooShort", `{"addresses":{"alimtalk":"+12"},"consent":{}}`, 422, "addresses.alimtalk"},
		{"PhoneTooLong", `{"addresses":{"sms":"+1234567890123456"},"consent":{}}`, 422, "addresses.sms"},
		{"EmailWithDisplayName", `{"addresses":{"email":"Bob <bob@example.com>"},"consent":{}}`, 422, "addresses.email"},
		{"EmailNoAt", `{"addresses":{"email":"bob.example.com"},"consent":{}}`, 422, "addresses.email"},
		{"PushTokenWithSpace", `{"addresses":{"push":"a b"},"consent":{}}`, 422, "addresses.push"},
		{"TrailingData", `{"addresses":{},"consent":{}} {}`, 400, ""},
		{"TrailingGarbage", `{"addresses":{},"consent":{}}x`, 400, ""},
		{"OversizedBody", `{"addresses":{"webhook":"` + strings.Repeat("a", 17<<10) + `"},"consent":{}}`, 413, ""},
	}
	onEachStoreHostile(t, func(t *testing.T, b *bundle, _ *statementWatch) {
		for _, c := range cases {
			r := b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "Bearer "+keyA, c.body)
			if c.status == http.StatusNoContent {
				if r.status != c.status {
					t.Errorf("%s: PUT = %d %s, want 204", c.name, r.status, r.body)
				}
				continue
			}
			if p := wantProblem(t, r, c.status); p.Param != c.param {
				t.Errorf("%s: param %q, want %q", c.name, p.Param, c.param)
			}
		}
		// A recipient of exactly the limit is fine.
		r := b.do(t, http.MethodPut, "/v1/recipients/"+strings.Repeat("r", 200)+"/profile", "Bearer "+keyA, `{"addresses":{},"consent":{}}`)
		if r.status != http.StatusNoContent {
			t.Errorf("a 200-byte recipient: PUT = %d %s, want 204", r.status, r.body)
		}
	})
}

// TestAdminKeyBodyGoesThroughTheEdge: POST /v1/admin/keys decodes its body
// as every JSON-body route does (validate.DecodeJSON).
func TestAdminKeyBodyGoesThroughTheEdge(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			w := setupWalk(t, driver)
			for body, want := range map[string]int{
				`{"name":"billing","scopes":["send"]}{}`:                          http.StatusBadRequest,
				`{"name":"bill\u0000ing","scopes":["send"]}`:                      http.StatusBadRequest,
				`{"name":"` + strings.Repeat("n", 5<<10) + `","scopes":["send"]}`: http.StatusRequestEntityTooLarge,
				"{\"name\":\"bill\xffing\",\"scopes\":[\"send\"]}":                http.StatusBadRequest,
			} {
				if got, b := w.do(t, "POST", "/v1/admin/keys", w.keyA, body); got != want {
					t.Errorf("POST /v1/admin/keys %.40q: %d %s, want %d", body, got, b, want)
				}
			}
		})
	}
}

// panickyProfiles is a store whose profile read panics, as a bug would.
type panickyProfiles struct{ store.Store }

func (panickyProfiles) ProfileGet(context.Context, string, string) (store.Profile, error) {
	panic("profile read went wrong")
}

// TestAPanicLogsTheRouteNotThePath: a handler that panics is answered 500
// and logged with its route; the path, which names the recipient (here an
// e-mail address) and a device token, stays out of the log.
func TestAPanicLogsTheRouteNotThePath(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	st := panickyProfiles{testdb.Open(t, "sqlite", clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))).Store}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{
		Keys: auth.NewKeys(map[string]string{keyA: "a"}), Store: st, Logger: logger,
	}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL+"/v1/recipients/alice@example.com/profile", nil)
	req.Header.Set("Authorization", "Bearer "+keyA)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusInternalServerError {
		t.Fatalf("GET a profile whose read panics = %d, want 500", res.StatusCode)
	}
	if out := logs.String(); strings.Contains(out, "alice@example.com") || !strings.Contains(out, "handler panicked") ||
		!strings.Contains(out, `route="GET /v1/recipients/{recipient}/profile"`) {
		t.Fatalf("the panic's log line names the recipient, or not the route:\n%s", out)
	}
}
