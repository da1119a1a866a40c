package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/parked"
)

// fakeParked holds parked entries per tenant.
type fakeParked struct{ entries []parked.Entry }

func (f *fakeParked) List(_ context.Context, tenant string, limit int) ([]parked.Entry, error) {
	var out []parked.Entry
	for _, e := range f.entries {
		if e.Tenant == tenant && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeParked) Requeue(_ context.Context, tenant, id string) (int, error) {
	n := 0
	kept := f.entries[:0]
	for _, e := range f.entries {
		if e.Tenant == tenant && (id == "" || e.MessageID == id) {
			n++
			continue
		}
		kept = append(kept, e)
	}
	f.entries = kept
	if id != "" && n == 0 {
		return 0, parked.ErrNotFound
	}
	return n, nil
}

func TestParkedAPIIsTenantScoped(t *testing.T) {
	t.Parallel()
	f := &fakeParked{entries: []parked.Entry{
		{MessageID: "m1", Tenant: "a", Reason: "TEMPLATE_MISSING"},
		{MessageID: "m2", Tenant: "b", Reason: "UNKNOWN_KIND"},
	}}
	h := httpapi.New(httpapi.Config{
		Keys: auth.NewKeys(map[string]string{keyA: "a", keyB: "b"}), Parked: f,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(method, path, key string) (int, map[string]any) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	t.Run("ListShowsOnlyOwnWithReason", func(t *testing.T) {
		code, body := do("GET", "/v1/parked", keyA)
		list, _ := body["parked"].([]any)
		if code != 200 || len(list) != 1 || list[0].(map[string]any)["message_id"] != "m1" || list[0].(map[string]any)["reason"] != "TEMPLATE_MISSING" {
			t.Fatalf("%d %v", code, body)
		}
	})
	t.Run("RequeueOfAnotherTenantsMessageIs404", func(t *testing.T) {
		if code, _ := do("POST", "/v1/parked/m2/requeue", keyA); code != 404 {
			t.Fatalf("status %d, want 404", code)
		}
	})
	t.Run("RequeueOneThenAll", func(t *testing.T) {
		if code, body := do("POST", "/v1/parked/m1/requeue", keyA); code != 200 || body["requeued"] != float64(1) {
			t.Fatalf("%d %v", code, body)
		}
		if code, body := do("POST", "/v1/parked/requeue", keyB); code != 200 || body["requeued"] != float64(1) {
			t.Fatalf("%d %v", code, body)
		}
	})
	t.Run("BadLimitIs400", func(t *testing.T) {
		if code, _ := do("GET", "/v1/parked?limit=0", keyA); code != 400 {
			t.Fatalf("status %d", code)
		}
	})
	t.Run("NoKeyIs401", func(t *testing.T) {
		if code, _ := do("GET", "/v1/parked", "nope"); code != 401 {
			t.Fatalf("status %d", code)
		}
	})
}
