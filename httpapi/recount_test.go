package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/store"
)

// setupRecount serves the router with the operator key keyOps over a
// fresh store of driver, and returns a way to run SQL on its database
// behind the store's back.
func setupRecount(t *testing.T, driver string) (*bundle, store.Store, *metrics.Metrics, func(query string)) {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	db := testdb.Open(t, driver, clk)
	st := db.Store
	exec := func(query string) { db.Exec(t, query) }
	m := metrics.New(nil)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{
		Keys:      auth.NewKeys(map[string]string{keyA: "a"}),
		Operators: auth.NewKeys(map[string]string{keyOps: "operator"}),
		Store:     st, Metrics: m, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}))
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 30 * time.Second
	for _, r := range []string{"u1", "u1", "u1", "u2"} {
		id := ids.New("ntf", clk.Now())
		clk.Advance(time.Millisecond)
		if _, err := st.NotificationCreate(ctx, store.NotificationCreateParams{
			Tenant: "a", ID: id, Recipient: r, EventID: id, Kind: "order.shipped", Lane: heraldtype.LaneTransactional,
			Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelInbox},
			Inbox: []store.InboxText{{Title: "Shipped", Body: "On its way"}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return &bundle{url: srv.URL, client: client, clock: clk}, st, m, exec
}

// POST /v1/ops/inbox/recount repairs a counter broken on purpose (the
// badge was wrong before it, right after it) and lists it; a tenant's key
// is refused.
func TestOpsInboxRecount(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b, st, m, exec := setupRecount(t, driver)
			ctx := context.Background()
			exec(`UPDATE inbox_counters SET unread = 17 WHERE tenant = 'a' AND recipient = 'u1'`)
			if bd, _ := st.InboxBadge(ctx, "a", "u1"); bd.Unread != 17 {
				t.Fatalf("broken badge %+v, want 17: the break did not take", bd)
			}

			wantProblem(t, b.do(t, http.MethodPost, "/v1/ops/inbox/recount", "Bearer "+keyA, ""), http.StatusForbidden)
			wantProblem(t, b.do(t, http.MethodPost, "/v1/ops/inbox/recount", "Bearer "+keyOps, `{"recipient":"u1"}`), http.StatusUnprocessableEntity)
			wantProblem(t, b.do(t, http.MethodPost, "/v1/ops/inbox/recount", "Bearer "+keyOps, `{"tenant":`), http.StatusBadRequest)
			wantProblem(t, b.do(t, http.MethodPost, "/v1/ops/inbox/recount", "Bearer "+keyOps, `{"tenants":"a"}`), http.StatusBadRequest)

			r := b.do(t, http.MethodPost, "/v1/ops/inbox/recount", "Bearer "+keyOps, `{"tenant":"a"}`)
			want := `{"tenant":"a","checked":2,"repaired":1,"drifted":[{"tenant":"a","recipient":"u1","was":{"unread":17,"seq":3},"now":{"unread":3,"seq":3}}]}` + "\n"
			if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || string(r.body) != want {
				t.Fatalf("POST /v1/ops/inbox/recount: %d %s %s, want 200 %s", r.status, r.header.Get("Content-Type"), r.body, want)
			}
			if bd, _ := st.InboxBadge(ctx, "a", "u1"); bd.Unread != 3 {
				t.Errorf("badge after the recount %+v, want 3", bd)
			}
			if got := metricstest.Series(t, m, "herald_inbox_recount_repaired_total")[""]; got != 1 {
				t.Errorf("herald_inbox_recount_repaired_total %v, want 1", got)
			}
			// No body: every tenant; nothing left to repair.
			r = b.do(t, http.MethodPost, "/v1/ops/inbox/recount", "Bearer "+keyOps, "")
			if want := `{"checked":2,"repaired":0,"drifted":[]}` + "\n"; r.status != http.StatusOK || string(r.body) != want {
				t.Errorf("a second recount: %d %s, want %s", r.status, r.body, want)
			}
		})
	}
}
