package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

const (
	keyA = "key-a" // tenant a
	keyB = "key-b" // tenant b
)

type bundle struct {
	url    string
	client *http.Client
	store  *sqlite.Store
	clock  *clock.Fake
}

type options struct {
	// lookupStore replaces the store behind GET /v1/notifications/{id}.
	lookupStore lookup.Store
	// ready is the readiness handler (Config.Ready).
	ready http.Handler
}

// setup serves the router over a real SQLite store in t.TempDir().
func setup(t *testing.T, opts options) *bundle {
	t.Helper()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	cat, err := catalog.New(config.Dev().Kinds)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	m := metrics.New(st.OutboxBacklog)
	var lookupStore lookup.Store = st
	if opts.lookupStore != nil {
		lookupStore = opts.lookupStore
	}
	h := httpapi.New(httpapi.Config{
		Keys:    auth.NewKeys(map[string]string{keyA: "a", keyB: "b"}),
		Intake:  &intake.Handler{Store: st, Catalog: cat, Clock: clk, IdempotencyTTL: time.Hour, Logger: logger, Metrics: m},
		Lookup:  &lookup.Handler{Store: lookupStore, Logger: logger},
		Parked:  parked.DB{Store: st},
		Store:   st,
		Metrics: m,
		Logger:  logger,
		Ready:   opts.ready,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 30 * time.Second // a hung request fails its test
	return &bundle{url: srv.URL, client: client, store: st, clock: clk}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (b *bundle) do(t *testing.T, method, path, authz, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: raw}
}

// problemBody is an application/problem+json answer.
type problemBody struct {
	Title  string `json:"title"`
	Status int    `json:"status"`
	Param  string `json:"param"`
	Detail string `json:"detail"`
}

func wantProblem(t *testing.T, r response, status int) problemBody {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p problemBody
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != status || p.Title == "" {
		t.Errorf("problem body %s: status %d title %q (%v)", r.body, p.Status, p.Title, err)
	}
	return p
}

// GET /readyz is the readiness handler httpapi is given (app's checks),
// unauthenticated; without one there is no /readyz. /healthz answers 200
// whatever readiness says.
func TestReadyz(t *testing.T) {
	t.Parallel()

	t.Run("ServesTheReadyHandler", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		b := setup(t, options{ready: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			problem.New(w, http.StatusServiceUnavailable, "not ready: store")
		})})
		if p := wantProblem(t, b.do(t, http.MethodGet, "/readyz", "", ""), http.StatusServiceUnavailable); p.Detail != "not ready: store" {
			t.Errorf("readyz detail %q, want the handler's", p.Detail)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("the ready handler ran %d times, want once", n)
		}
		if r := b.do(t, http.MethodGet, "/healthz", "", ""); r.status != http.StatusOK {
			t.Errorf("healthz while not ready = %d, want 200", r.status)
		}
	})

	t.Run("NoReadyHandlerIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		wantProblem(t, b.do(t, http.MethodGet, "/readyz", "", ""), http.StatusNotFound)
	})
}

func TestAuthorization(t *testing.T) {
	t.Parallel()
	// Each 401 says what is wrong: no key, a header of the wrong form, or
	// a key herald does not know.
	const noKey, badForm, unknown = "an API key is required", `the Authorization header must be "Bearer <key>"`, "this API key is not known"
	for _, tc := range []struct {
		name   string
		header string
		status int
		detail string
	}{
		{"NoHeaderIs401", "", http.StatusUnauthorized, noKey},
		{"BasicSchemeIs401", "Basic a2V5LWE6", http.StatusUnauthorized, badForm},
		{"NoSchemeIs401", keyA, http.StatusUnauthorized, badForm},
		{"EmptyTokenIs401", "Bearer ", http.StatusUnauthorized, badForm},
		{"UnknownKeyIs401", "Bearer key-c", http.StatusUnauthorized, unknown},
		{"KeyPrefixIs401", "Bearer key-", http.StatusUnauthorized, unknown},
		{"KnownKeyPasses", "Bearer " + keyA, http.StatusNotFound, ""},
		{"SchemeIsCaseInsensitive", "bearer " + keyA, http.StatusNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			// The notification does not exist: an authorised caller gets 404.
			r := b.do(t, http.MethodGet, "/v1/notifications/ntf_X", tc.header, "")
			wantProblem(t, r, tc.status)
			var p struct{ Detail string }
			if err := json.Unmarshal(r.body, &p); err != nil || !strings.HasPrefix(p.Detail, tc.detail) {
				t.Errorf("%q: %s (%v); want the detail %q", tc.header, r.body, err, tc.detail)
			}
		})
	}
}

func TestProfiles(t *testing.T) {
	t.Parallel()
	const profile = `{"addresses":{"sms":"+821012345678","email":"u@example.com"},"consent":{"sms":true},"language":"ko","time_zone":"Asia/Seoul"}`

	t.Run("PutThenGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		if r := b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "Bearer "+keyA, profile); r.status != http.StatusNoContent {
			t.Fatalf("PUT = %d %s", r.status, r.body)
		}
		r := b.do(t, http.MethodGet, "/v1/recipients/user-1/profile", "Bearer "+keyA, "")
		if r.status != http.StatusOK {
			t.Fatalf("GET = %d %s", r.status, r.body)
		}
		var got struct {
			Addresses map[string]string `json:"addresses"`
			Consent   map[string]bool   `json:"consent"`
			Language  string            `json:"language"`
			TimeZone  string            `json:"time_zone"`
		}
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Addresses["sms"] != "+821012345678" || got.Addresses["email"] != "u@example.com" ||
			!got.Consent["sms"] || got.Language != "ko" || got.TimeZone != "Asia/Seoul" {
			t.Errorf("GET = %s", r.body)
		}
	})

	t.Run("OtherTenantSeesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		if r := b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "Bearer "+keyA, profile); r.status != http.StatusNoContent {
			t.Fatalf("PUT = %d %s", r.status, r.body)
		}
		wantProblem(t, b.do(t, http.MethodGet, "/v1/recipients/user-1/profile", "Bearer "+keyB, ""), http.StatusNotFound)
	})

	t.Run("UnknownChannelIs422", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		wantProblem(t, b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "Bearer "+keyA, `{"addresses":{"fax":"123"}}`), http.StatusUnprocessableEntity)
		wantProblem(t, b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "Bearer "+keyA, `{"consent":{"fax":true}}`), http.StatusUnprocessableEntity)
	})

	t.Run("UnknownTimeZoneIs422", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		wantProblem(t, b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "Bearer "+keyA, `{"time_zone":"Mars/Olympus"}`), http.StatusUnprocessableEntity)
		// Go's name for the server's own zone: quiet hours would follow
		// wherever herald runs.
		if p := wantProblem(t, b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "Bearer "+keyA, `{"time_zone":"Local"}`),
			http.StatusUnprocessableEntity); p.Param != "time_zone" || !strings.Contains(p.Detail, `"Local" is not an IANA time zone`) {
			t.Fatalf("time_zone Local: %+v", p)
		}
	})

	t.Run("UnknownFieldIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		wantProblem(t, b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "Bearer "+keyA, `{"phone":"123"}`), http.StatusBadRequest)
	})

	t.Run("NeedsAPIKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		wantProblem(t, b.do(t, http.MethodPut, "/v1/recipients/user-1/profile", "", profile), http.StatusUnauthorized)
	})
}

// panicking is a store whose reads panic, to exercise the recoverer.
type panicking struct{ lookup.Store }

func (panicking) NotificationGet(context.Context, string, string) (store.NotificationView, error) {
	panic("boom")
}

func TestHandlerPanicIs500Problem(t *testing.T) {
	t.Parallel()
	b := setup(t, options{lookupStore: panicking{}})
	wantProblem(t, b.do(t, http.MethodGet, "/v1/notifications/ntf_X", "Bearer "+keyA, ""), http.StatusInternalServerError)
	// The server keeps serving.
	if r := b.do(t, http.MethodGet, "/healthz", "", ""); r.status != http.StatusOK {
		t.Errorf("healthz after a panic = %d", r.status)
	}
}

func TestUnknownRoutesAreProblems(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	wantProblem(t, b.do(t, http.MethodGet, "/v2/notifications", "Bearer "+keyA, ""), http.StatusNotFound)
	// A path another method serves: 405, naming the methods it takes.
	r := b.do(t, http.MethodDelete, "/v1/notifications", "Bearer "+keyA, "")
	wantProblem(t, r, http.StatusMethodNotAllowed)
	if allow := r.header.Get("Allow"); allow != "GET, POST" {
		t.Errorf("DELETE /v1/notifications: Allow %q, want \"GET, POST\"", allow)
	}
	if r := b.do(t, http.MethodPut, "/v1/notifications/ntf_x/cancel", "Bearer "+keyA, ""); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
		t.Errorf("PUT …/cancel = %d, Allow %q; want 405, POST", r.status, r.header.Get("Allow"))
	}
}
