package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
)

// parkedEntry is one entry of GET /v1/parked as the README lists it.
type parkedEntry struct {
	MessageID      string    `json:"message_id"`
	NotificationID string    `json:"notification_id"`
	Lane           string    `json:"lane"`
	Channel        string    `json:"channel"`
	Reason         string    `json:"reason"`
	ParkedAt       time.Time `json:"parked_at"`
}

// park accepts a notification of tenant on one channel and parks its
// delivery with reason, at the store's (fake) time, which it returns.
func (b *bundle) park(t *testing.T, tenant, id string, ch heraldtype.Channel, lane heraldtype.Lane, reason string) parkedEntry {
	t.Helper()
	ctx := context.Background()
	res, err := b.store.NotificationCreate(ctx, store.NotificationCreateParams{
		Tenant: tenant, ID: id, Recipient: "user-1", EventID: "evt-" + id, Kind: "payment.approved",
		Lane: lane, Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{ch},
	})
	if err != nil || res.Outcome != store.Created {
		t.Fatalf("create %s: %+v %v", id, res, err)
	}
	msg := store.MessageID(id, ch)
	ok, err := b.store.DeliveryDecide(ctx, store.DeliveryDecideParams{
		MessageID: msg, NotificationID: id, Tenant: tenant, Channel: ch, State: heraldtype.DeliveryParked, Reason: reason,
	})
	if err != nil || !ok {
		t.Fatalf("park %s: %v %v", msg, ok, err)
	}
	return parkedEntry{MessageID: msg, NotificationID: id, Lane: string(lane), Channel: string(ch), Reason: reason, ParkedAt: b.clock.Now()}
}

// list calls GET /v1/parked as apiKey and checks the README's shape: every
// entry has exactly message_id, notification_id, lane, channel, reason and
// parked_at.
func (b *bundle) list(t *testing.T, apiKey, query string) []parkedEntry {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/parked"+query, "Bearer "+apiKey, "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/parked%s = %d %s", query, r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var raw struct {
		Parked []map[string]json.RawMessage `json:"parked"`
	}
	if err := json.Unmarshal(r.body, &raw); err != nil || raw.Parked == nil {
		t.Fatalf("GET /v1/parked%s body %s: %v, want {\"parked\": [...]}", query, r.body, err)
	}
	want := []string{"channel", "lane", "message_id", "notification_id", "parked_at", "reason"}
	for _, e := range raw.Parked {
		if got := slices.Sorted(maps.Keys(e)); !slices.Equal(got, want) {
			t.Errorf("entry has fields %v, want %v", got, want)
		}
	}
	var out struct {
		Parked []parkedEntry `json:"parked"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("GET /v1/parked%s body %s: %v", query, r.body, err)
	}
	return out.Parked
}

func wantEntries(t *testing.T, got, want []parkedEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d entries %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.MessageID != w.MessageID || g.NotificationID != w.NotificationID || g.Lane != w.Lane ||
			g.Channel != w.Channel || g.Reason != w.Reason || !g.ParkedAt.Equal(w.ParkedAt) {
			t.Errorf("entry %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestParkedList holds GET /v1/parked on the real SQLite store: the README's
// fields, oldest first, the caller's tenant only, and ?limit.
func TestParkedList(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var ownA []parkedEntry
	ownA = append(ownA, b.park(t, "a", "ntf_A1", heraldtype.ChannelWebhook, heraldtype.LaneTransactional, heraldtype.ReasonTemplateMissing))
	b.clock.Advance(time.Second)
	ownB := []parkedEntry{b.park(t, "b", "ntf_B1", heraldtype.ChannelSMS, heraldtype.LaneTransactional, heraldtype.ReasonUnknownKind)}
	b.clock.Advance(time.Second)
	ownA = append(ownA, b.park(t, "a", "ntf_A2", heraldtype.ChannelSMS, heraldtype.LaneAlert, heraldtype.ReasonUnknownKind))
	b.clock.Advance(time.Second)
	ownA = append(ownA, b.park(t, "a", "ntf_A3", heraldtype.ChannelPush, heraldtype.LaneMarketing, heraldtype.ReasonNoProvider))

	t.Run("FieldsOldestFirstOwnTenantOnly", func(t *testing.T) {
		wantEntries(t, b.list(t, keyA, ""), ownA)
		wantEntries(t, b.list(t, keyB, ""), ownB)
	})
	t.Run("LimitCapsTheList", func(t *testing.T) {
		wantEntries(t, b.list(t, keyA, "?limit=1"), ownA[:1])
		wantEntries(t, b.list(t, keyA, "?limit=2"), ownA[:2])
		wantEntries(t, b.list(t, keyA, "?limit=1000"), ownA)
	})
	t.Run("BadLimitIs400Problem", func(t *testing.T) {
		for _, limit := range []string{"0", "-1", "1001", "abc", "1.5", "2e1", "99999999999999999999"} {
			p := wantProblem(t, b.do(t, http.MethodGet, "/v1/parked?limit="+limit, "Bearer "+keyA, ""), http.StatusBadRequest)
			if p.Param != "limit" || !strings.Contains(p.Detail, "1..1000") {
				t.Errorf("limit=%s: param %q detail %q, want limit and its range", limit, p.Param, p.Detail)
			}
		}
	})
	t.Run("NoKeyIs401", func(t *testing.T) {
		wantProblem(t, b.do(t, http.MethodGet, "/v1/parked", "Bearer nope", ""), http.StatusUnauthorized)
	})
}

// fakeParked holds parked entries per tenant, for the requeue endpoints.
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

func TestParkedRequeueIsTenantScoped(t *testing.T) {
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
	b := &bundle{url: srv.URL, client: srv.Client()}
	requeued := func(path, key string) int {
		t.Helper()
		r := b.do(t, http.MethodPost, path, "Bearer "+key, "")
		if r.status != http.StatusOK {
			t.Fatalf("POST %s = %d %s", path, r.status, r.body)
		}
		var body struct {
			Requeued *int `json:"requeued"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Requeued == nil {
			t.Fatalf("POST %s body %s: %v, want {\"requeued\": N}", path, r.body, err)
		}
		return *body.Requeued
	}
	t.Run("RequeueOfAnotherTenantsMessageIs404", func(t *testing.T) {
		wantProblem(t, b.do(t, http.MethodPost, "/v1/parked/m2/requeue", "Bearer "+keyA, ""), http.StatusNotFound)
	})
	t.Run("RequeueOneThenAll", func(t *testing.T) {
		if n := requeued("/v1/parked/m1/requeue", keyA); n != 1 {
			t.Fatalf("requeued %d, want 1", n)
		}
		if n := requeued("/v1/parked/requeue", keyB); n != 1 {
			t.Fatalf("requeued %d, want 1", n)
		}
		if n := requeued("/v1/parked/requeue", keyA); n != 0 {
			t.Fatalf("requeued %d after everything was, want 0", n)
		}
	})
}
