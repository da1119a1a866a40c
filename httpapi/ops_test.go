package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/reconcile"
	"github.com/heraldhq/herald/store"
)

// The operator's routes (GET /v1/ops/reconcile) through HTTP on both
// stores, and an operator key on a tenant's routes.

const keyOps = "key-ops"

// setupOps serves the router with the operator key keyOps (none when
// operators is false) over a store of driver, the one the everyday tests
// open.
func setupOps(t *testing.T, driver string, operators bool) (*bundle, store.Store) {
	t.Helper()
	ev := setupEveryday(t, driver, nil)
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	cfg := httpapi.Config{
		Keys:   auth.NewKeys(map[string]string{keyA: "a"}),
		Parked: parked.DB{Store: ev.st},
		Store:  ev.st,
		Logger: logger,
	}
	if operators {
		cfg.Operators = auth.NewKeys(map[string]string{keyOps: "operator"})
	}
	srv := httptest.NewServer(httpapi.New(cfg))
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 30 * time.Second
	return &bundle{url: srv.URL, client: client, clock: ev.clock}, ev.st
}

func TestOpsReconcile(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b, st := setupOps(t, driver, true)

			wantProblem(t, b.do(t, http.MethodGet, "/v1/ops/reconcile", "Bearer "+keyOps, ""), http.StatusNotFound)

			rec := reconcile.New(reconcile.Config{Store: st, Duty: 1, RunBy: "test", Clock: b.clock,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			rep, err := rec.Run(context.Background())
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			r := b.do(t, http.MethodGet, "/v1/ops/reconcile", "Bearer "+keyOps, "")
			if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("GET /v1/ops/reconcile: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
			}
			var got map[string]any
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			for _, k := range []string{"accepted", "by_state", "unowned", "repaired", "unknown", "started_at", "finished_at"} {
				if _, ok := got[k]; !ok {
					t.Errorf("the report has no %q: %s", k, r.body)
				}
			}
			want, _ := json.Marshal(rep)
			if string(r.body) != string(want)+"\n" {
				t.Fatalf("served %s, want the kept report %s", r.body, want)
			}
		})
	}
}

func TestOpsRoutesTakeOnlyAnOperatorKey(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b, _ := setupOps(t, driver, true)
			wantProblem(t, b.do(t, http.MethodGet, "/v1/ops/reconcile", "Bearer "+keyA, ""), http.StatusForbidden)
			for _, authz := range []string{"", "Bearer nope", "Basic " + keyOps} {
				r := b.do(t, http.MethodGet, "/v1/ops/reconcile", authz, "")
				wantProblem(t, r, http.StatusUnauthorized)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("%q: 401 without WWW-Authenticate", authz)
				}
			}
			// An operator key is no tenant's key.
			for _, route := range []struct{ method, path, body string }{
				{http.MethodGet, "/v1/notifications", ""},
				{http.MethodGet, "/v1/notifications/ntf_x", ""},
				{http.MethodPost, "/v1/notifications", `{}`},
				{http.MethodGet, "/v1/parked", ""},
				{http.MethodGet, "/v1/recipients/u1/profile", ""},
			} {
				r := b.do(t, route.method, route.path, "Bearer "+keyOps, route.body)
				if r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "an operator key opens /v1/ops/") {
					t.Errorf("%s %s with the operator key: %d %s, want 401 saying what an operator key opens", route.method, route.path, r.status, r.body)
				}
			}
		})
	}
}

func TestOpsRoutesWithoutOperatorKeysRefuseEveryone(t *testing.T) {
	t.Parallel()
	b, _ := setupOps(t, "sqlite", false)
	wantProblem(t, b.do(t, http.MethodGet, "/v1/ops/reconcile", "Bearer "+keyOps, ""), http.StatusUnauthorized)
	wantProblem(t, b.do(t, http.MethodGet, "/v1/ops/reconcile", "Bearer "+keyA, ""), http.StatusForbidden)
}
