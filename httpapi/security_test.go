package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/limits"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
)

// setupLimited is the walk's router with limits, on a fresh store, with
// a stored key of tenant a and one of tenant b.
func setupLimited(t *testing.T, driver string, lc limits.Config) (*walk, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	st := testdb.Open(t, driver, clk).Store
	cfg := fullConfig(t, st, clk)
	lc.Clock = clk
	cfg.Limits = limits.New(lc)
	cfg.Intake.Quotas = cfg.Limits // as package app wires them: one limiter
	srv := httptest.NewServer(httpapi.New(cfg))
	t.Cleanup(srv.Close)
	w := &walk{url: srv.URL, client: srv.Client()}
	w.keyA, w.keyB = mustKey(t, st, clk, "a"), mustKey(t, st, clk, "b")
	return w, clk
}

func TestLimits(t *testing.T) {
	t.Parallel()
	t.Run("KeyOverItsRateIs429WithRetryAfterAndOtherKeysGoOn", func(t *testing.T) {
		t.Parallel()
		w, clk := setupLimited(t, "sqlite", limits.Config{KeyRate: 1, KeyBurst: 2})
		for i := range 2 {
			if got, b := w.do(t, "GET", "/v1/kinds", w.keyA, ""); got != http.StatusOK {
				t.Fatalf("request %d within the burst: %d %s", i+1, got, b)
			}
		}
		resp := w.raw(t, "GET", "/v1/kinds", w.keyA, "")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("past the burst: %d, Retry-After %q, %s; want 429 problem+json with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
		}
		if got, b := w.do(t, "GET", "/v1/kinds", w.keyB, ""); got != http.StatusOK {
			t.Fatalf("another key: %d %s, want 200", got, b)
		}
		clk.Advance(time.Second)
		if got, b := w.do(t, "GET", "/v1/kinds", w.keyA, ""); got != http.StatusOK {
			t.Fatalf("after Retry-After: %d %s, want 200", got, b)
		}
	})
	t.Run("TenantOverItsSendRateIs429", func(t *testing.T) {
		t.Parallel()
		w, clk := setupLimited(t, "sqlite", limits.Config{SendRate: 0.5, SendBurst: 1})
		send := func(event string) *http.Response {
			return w.raw(t, "POST", "/v1/notifications", w.keyA,
				`{"recipient":"r1","event_id":"`+event+`","kind":"payment.approved","params":{"amount":"1","merchant":"m"}}`)
		}
		if resp := send("e1"); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("first send: %d", resp.StatusCode)
		}
		resp := send("e2")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
			t.Fatalf("second send: %d, Retry-After %q; want 429 with Retry-After 2", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		// Reads are not sends.
		if got, b := w.do(t, "GET", "/v1/notifications", w.keyA, ""); got != http.StatusOK {
			t.Fatalf("a read while sends are limited: %d %s", got, b)
		}
		clk.Advance(2 * time.Second)
		if resp := send("e2"); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("after Retry-After: %d", resp.StatusCode)
		}
	})
	t.Run("TenantOverItsLaneQuotaIs429AndNothingIsWritten", func(t *testing.T) {
		t.Parallel()
		w, clk := setupLimited(t, "sqlite", limits.Config{Quotas: []limits.Quota{
			{Lane: heraldtype.LaneMarketing, Rate: 0.5, Burst: 1},
		}})
		// send posts a notification under its own Idempotency-Key and
		// returns the answer and its body.
		send := func(key, idem, kind, event string) (*http.Response, string) {
			t.Helper()
			params := `{"amount":"1","merchant":"m"}`
			if kind == "coupon.expiring" {
				params = `{"coupon":"C","date":"d"}`
			}
			return w.send(t, "POST", "/v1/notifications", key, idem,
				`{"recipient":"r1","event_id":"`+event+`","kind":"`+kind+`","params":`+params+`}`)
		}
		want := func(resp *http.Response, body string, status int, what string) {
			t.Helper()
			if resp.StatusCode != status {
				t.Fatalf("%s: %d %s; want %d", what, resp.StatusCode, body, status)
			}
		}
		resp, first := send(w.keyA, "m1", "coupon.expiring", "e1")
		want(resp, first, http.StatusAccepted, "a's first marketing send")
		resp, body := send(w.keyA, "m2", "coupon.expiring", "e2")
		want(resp, body, http.StatusTooManyRequests, "a's second marketing send")
		if resp.Header.Get("Retry-After") != "2" || resp.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(body, "send quota in lane marketing") {
			t.Fatalf("over the quota: Retry-After %q, %s, %s; want 2, a problem naming the lane",
				resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), body)
		}
		// Another lane, and another tenant's bucket, are not a's.
		resp, body = send(w.keyA, "t1", "payment.approved", "e3")
		want(resp, body, http.StatusAccepted, "a's transactional send")
		resp, body = send(w.keyB, "m1", "coupon.expiring", "e1")
		want(resp, body, http.StatusAccepted, "b's marketing send")
		// The refused send wrote nothing: a's list holds two.
		var list struct {
			Notifications []struct {
				ID string `json:"id"`
			} `json:"notifications"`
		}
		if got, b := w.do(t, "GET", "/v1/notifications", w.keyA, ""); got != http.StatusOK || json.Unmarshal([]byte(b), &list) != nil ||
			len(list.Notifications) != 2 {
			t.Fatalf("a's notifications after the refusal: %d %s; want the two accepted", got, b)
		}
		// A replay writes nothing new and gives its token back: the send
		// refused before goes through at once after it.
		clk.Advance(2 * time.Second)
		resp, body = send(w.keyA, "m1", "coupon.expiring", "e1")
		want(resp, body, http.StatusAccepted, "the replay")
		if resp.Header.Get("Idempotent-Replayed") != "true" || body != first {
			t.Fatalf("the replay: %s, replayed %q; want %s again", body, resp.Header.Get("Idempotent-Replayed"), first)
		}
		resp, body = send(w.keyA, "m2", "coupon.expiring", "e2")
		want(resp, body, http.StatusAccepted, "the refused send after Retry-After")
		resp, body = send(w.keyA, "m3", "coupon.expiring", "e4")
		want(resp, body, http.StatusTooManyRequests, "the next at once")
		// Both refusals are counted, in their lane.
		if got, metrics := w.do(t, "GET", "/metrics", "", ""); got != http.StatusOK ||
			!strings.Contains(metrics, `herald_lane_quota_refused_total{lane="marketing"} 2`) ||
			!strings.Contains(metrics, `herald_lane_quota_refused_total{lane="transactional"} 0`) {
			t.Errorf("/metrics: %d, without 2 quota refusals in marketing and 0 in transactional:\n%s", got, metrics)
		}
	})
	t.Run("ParamsAndRenderedTextAreCapped", func(t *testing.T) {
		t.Parallel()
		w := setupWalk(t, "sqlite")
		many := make([]string, 1001)
		for i := range many {
			many[i] = `"x"`
		}
		deep := strings.Repeat(`{"a":`, 9) + `1` + strings.Repeat(`}`, 9)
		why := map[string]string{"TooMany": "at most 1000", "TooDeep": "at most 8", "TooLong": "longer than the limit"}
		list := make([]string, 100)
		for i := range list {
			list[i] = "1"
		}
		for name, params := range map[string]string{
			"TooMany": `{"amount":"1","merchant":"m","list":[` + strings.Join(many, ",") + `]}`,
			"TooDeep": `{"amount":"1","merchant":"m","deep":` + deep + `}`,
			"TooLong": `{"text":"` + strings.Repeat("y", 1000) + `","list":[` + strings.Join(list, ",") + `]}`,
		} {
			kind := "payment.approved"
			if name == "TooLong" {
				kind = "walk.amplify"
			}
			got, b := w.do(t, "POST", "/v1/notifications", w.keyA, `{"recipient":"r1","event_id":"`+name+`","kind":"`+kind+`","params":`+params+`}`)
			if got != http.StatusUnprocessableEntity || !strings.Contains(b, `"param":"params"`) || !strings.Contains(b, why[name]) {
				t.Errorf("%s: %d %s; want 422 on params", name, got, b)
			}
		}
	})
}

func TestAuditLog(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			w := setupWalk(t, driver)
			// A key made and revoked through the admin API, an erasure.
			got, b := w.do(t, "POST", "/v1/admin/keys", w.keyA, `{"name":"billing","scopes":["send"]}`)
			var made struct{ ID, Key string }
			if got != http.StatusCreated || json.Unmarshal([]byte(b), &made) != nil || !strings.HasPrefix(made.Key, "hk_"+made.ID+"_") {
				t.Fatalf("create: %d %s", got, b)
			}
			if got, b := w.do(t, "GET", "/v1/kinds", made.Key, ""); got != http.StatusForbidden {
				t.Fatalf("the new send-only key reading: %d %s, want 403", got, b)
			}
			if got, b := w.do(t, "GET", "/v1/admin/keys", w.keyA, ""); got != http.StatusOK || strings.Contains(b, made.Key) || strings.Contains(b, "pbkdf2") {
				t.Fatalf("list: %d %s; want no key and no hash", got, b)
			}
			if got, b := w.do(t, "POST", "/v1/admin/keys/"+made.ID+"/revoke", w.keyA, ""); got != http.StatusOK {
				t.Fatalf("revoke: %d %s", got, b)
			}
			// Revoked again: the key as it is, and no second entry (page 2
			// below holds the create only).
			if got, b := w.do(t, "POST", "/v1/admin/keys/"+made.ID+"/revoke", w.keyA, ""); got != http.StatusOK || !strings.Contains(b, `"revoked_at"`) {
				t.Fatalf("a second revoke: %d %s; want 200 with the key", got, b)
			}
			if got, b := w.do(t, "POST", "/v1/notifications", made.Key, `{}`); got != http.StatusUnauthorized || !strings.Contains(b, "revoked") {
				t.Fatalf("the revoked key: %d %s, want 401 revoked", got, b)
			}
			if got, b := w.do(t, "DELETE", "/v1/recipients/alice", w.keyA, ""); got != http.StatusOK {
				t.Fatalf("erase: %d %s", got, b)
			}
			// b erases its own alice: its entry is b's.
			w.do(t, "DELETE", "/v1/recipients/alice", w.keyB, "")

			got, b = w.do(t, "GET", "/v1/admin/audit?limit=2", w.keyA, "")
			var page struct {
				Entries []struct {
					Action, Target, Remote string
					ActorKey               string `json:"actor_key"`
					ActorName              string `json:"actor_name"`
				}
				NextCursor *string `json:"next_cursor"`
			}
			if got != http.StatusOK || json.Unmarshal([]byte(b), &page) != nil || len(page.Entries) != 2 || page.NextCursor == nil {
				t.Fatalf("audit page 1: %d %s", got, b)
			}
			e := page.Entries[0]
			if e.Action != audit.RecipientErase || e.Target != audit.Recipient("a", "alice") || e.ActorKey != w.keyAID || e.ActorName != "walk" || e.Remote == "" {
				t.Errorf("newest entry %+v: want a's erasure by key %s, the recipient as its digest", e, w.keyAID)
			}
			if strings.Contains(b, "alice") {
				t.Errorf("the audit log names the recipient: %s", b)
			}
			if page.Entries[1].Action != audit.KeyRevoke || page.Entries[1].Target != made.ID {
				t.Errorf("second entry %+v, want the revoke of %s", page.Entries[1], made.ID)
			}
			got, b = w.do(t, "GET", "/v1/admin/audit?cursor="+*page.NextCursor, w.keyA, "")
			if got != http.StatusOK || !strings.Contains(b, `"action":"key.create"`) || strings.Contains(b, `"action":"key.revoke"`) {
				t.Fatalf("audit page 2: %d %s; want the create only", got, b)
			}
			got, b = w.do(t, "GET", "/v1/admin/audit", w.keyB, "")
			if got != http.StatusOK || strings.Count(b, `"action"`) != 1 || strings.Contains(b, w.keyAID) {
				t.Fatalf("b's audit log: %d %s; want b's erasure only", got, b)
			}
			if got, _ := w.do(t, "GET", "/v1/admin/audit?cursor=bm9wZQ", w.keyA, ""); got != http.StatusBadRequest {
				t.Errorf("a forged cursor: %d, want 400", got)
			}
		})
	}
}

// An erasure whose client hung up is finished (erasure.go), and so is its
// audit entry.
func TestAuditEntryOutlivesAClientThatHungUp(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	ctx, hangUp := context.WithCancel(context.Background())
	st := &hangingUp{Store: testdb.Open(t, "sqlite", clk).Store, hangUp: hangUp}
	cfg := fullConfig(t, st, clk)
	key := mustKey(t, st, clk, "a")
	req := httptest.NewRequestWithContext(ctx, http.MethodDelete, "/v1/recipients/alice", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	rec := httptest.NewRecorder()
	httpapi.New(cfg).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("erase: %d %s", rec.Code, rec.Body)
	}
	entries, err := st.AuditList(context.Background(), store.AuditListParams{Tenant: "a"})
	if err != nil || len(entries) != 1 || entries[0].Action != audit.RecipientErase {
		t.Fatalf("audit after the erasure: %+v, %v; want its entry", entries, err)
	}
}

// hangingUp is a store whose erasure batches cancel the request's context
// first: the client hangs up while the erasure runs.
type hangingUp struct {
	store.Store
	hangUp context.CancelFunc
}

func (h *hangingUp) RecipientErase(ctx context.Context, p store.RecipientEraseParams) (store.RecipientEraseResult, error) {
	h.hangUp()
	return h.Store.RecipientErase(ctx, p)
}

// A key revoked through one herald process is refused by another on the
// same PostgreSQL database at once: the other hears the NOTIFY, long before
// its recheck of the revision (the fake clock never reaches it).
func TestRevokeReachesAnotherProcessAtOnceOnPostgres(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	db := testdb.Open(t, "postgres", clk)
	other, err := postgres.Open(context.Background(), db.Database, postgres.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	serve := func(st store.Store) *walk {
		srv := httptest.NewServer(httpapi.New(fullConfig(t, st, clk)))
		t.Cleanup(srv.Close)
		return &walk{url: srv.URL, client: srv.Client()}
	}
	one, two := serve(db.Store), serve(other)
	admin := mustKey(t, db.Store, clk, "a")
	got, b := one.do(t, "POST", "/v1/admin/keys", admin, `{"name":"crm","scopes":["read"]}`)
	var made struct{ ID, Key string }
	if got != http.StatusCreated || json.Unmarshal([]byte(b), &made) != nil {
		t.Fatalf("create: %d %s", got, b)
	}
	if got, b := two.do(t, "GET", "/v1/kinds", made.Key, ""); got != http.StatusOK {
		t.Fatalf("the other process, before the revoke: %d %s", got, b)
	}
	if got, b := one.do(t, "POST", "/v1/admin/keys/"+made.ID+"/revoke", admin, ""); got != http.StatusOK {
		t.Fatalf("revoke: %d %s", got, b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := two.do(t, "GET", "/v1/kinds", made.Key, "")
		if got == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other process still answers %d 10 s after the revoke", got)
		}
		runtime.Gosched()
	}
}

// A stored key on /v1/me/… is named in the 401, as a config key is.
func TestStoredKeyOnMeRoutesIsNamed(t *testing.T) {
	t.Parallel()
	w := setupWalk(t, "sqlite")
	got, b := w.do(t, "GET", "/v1/me/feed", w.keyA, "")
	if got != http.StatusUnauthorized || !strings.Contains(b, "an API key is not accepted") {
		t.Fatalf("GET /v1/me/feed with a stored key: %d %s; want 401 naming the mix-up", got, b)
	}
}

// A recipient token on an API-key route is named in the 401, as an API
// key on /v1/me/… is.
func TestARecipientTokenOnAnAPIRouteIsNamed(t *testing.T) {
	t.Parallel()
	w := setupWalk(t, "sqlite")
	got, b := w.do(t, "POST", "/v1/recipients/alice/tokens", w.keyA, `{}`)
	var minted struct {
		Token string `json:"token"`
	}
	if got != http.StatusCreated || json.Unmarshal([]byte(b), &minted) != nil || minted.Token == "" {
		t.Fatalf("mint: %d %s", got, b)
	}
	got, b = w.do(t, "GET", "/v1/notifications", minted.Token, "")
	if got != http.StatusUnauthorized || !strings.Contains(b, "a recipient token is not accepted here") {
		t.Fatalf("GET /v1/notifications with a recipient token: %d %s; want 401 naming the mix-up", got, b)
	}
}

// A kind kept for one tenant (config.Kind.Tenants) does not exist for the
// others: not listed, and unknown to their notifications and campaigns,
// so tenant b cannot send tenant a's branded text to a's receiver. Tenant
// a sends it as any kind.
func TestAKindKeptForATenant(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			w, _ := setupLimited(t, driver, limits.Config{})
			for key, listed := range map[string]bool{w.keyA: true, w.keyB: false} {
				got, b := w.do(t, "GET", "/v1/kinds", key, "")
				if got != http.StatusOK || strings.Contains(b, `"a.receipt"`) != listed {
					t.Errorf("GET /v1/kinds: %d, lists a.receipt %v; want %v", got, strings.Contains(b, `"a.receipt"`), listed)
				}
			}
			body := `{"recipient":"r1","event_id":"e1","kind":"a.receipt","params":{"total":1}}`
			if got, b := w.send(t, "POST", "/v1/notifications", w.keyB, "k-b", body); got.StatusCode != http.StatusUnprocessableEntity ||
				!strings.Contains(b, `unknown kind \"a.receipt\"`) {
				t.Errorf("tenant b sends a.receipt: %d %s; want 422 unknown kind", got.StatusCode, b)
			}
			if got, b := w.send(t, "POST", "/v1/campaigns", w.keyB, "c-b", `{"kind":"a.receipt","params":{"total":1}}`); got.StatusCode != http.StatusUnprocessableEntity ||
				!strings.Contains(b, "unknown kind") {
				t.Errorf("tenant b's campaign of a.receipt: %d %s; want 422 unknown kind", got.StatusCode, b)
			}
			if got, b := w.send(t, "POST", "/v1/notifications", w.keyA, "k-a", body); got.StatusCode != http.StatusAccepted {
				t.Errorf("tenant a sends a.receipt: %d %s; want 202", got.StatusCode, b)
			}
		})
	}
}

// A profile row copied from one tenant to another does not open for the
// second (the seal binds each value to its tenant), and the answer says
// so, not that the key is missing: the key is held.
func TestASealedValueCopiedToAnotherTenantSaysSo(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	st := testdb.Open(t, "sqlite", clk).Store
	srv := httptest.NewServer(httpapi.New(fullConfig(t, st, clk)))
	t.Cleanup(srv.Close)
	w := &walk{url: srv.URL, client: srv.Client()}
	w.keyA, w.keyB = mustKey(t, st, clk, "a"), mustKey(t, st, clk, "b")
	if got, b := w.do(t, "PUT", "/v1/recipients/r1/profile", w.keyA, `{"addresses":{"sms":"+821012345678"}}`); got/100 != 2 {
		t.Fatalf("PUT profile: %d %s", got, b)
	}
	sealed, err := st.ProfileGet(context.Background(), "a", "r1")
	if err != nil || sealed.Addresses[heraldtype.ChannelSMS] == "+821012345678" {
		t.Fatalf("a's stored profile %+v, %v; want its address sealed", sealed, err)
	}
	sealed.Tenant = "b"
	if err := st.ProfilePut(context.Background(), sealed); err != nil {
		t.Fatal(err)
	}
	got, b := w.do(t, "GET", "/v1/recipients/r1/profile", w.keyB, "")
	if got != http.StatusInternalServerError || !strings.Contains(b, "sealed for another tenant") || strings.Contains(b, "does not hold") {
		t.Fatalf("b reads the copied row: %d %s; want 500 saying it is sealed for another tenant", got, b)
	}
}
