package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// The everyday API — GET /v1/notifications, the attempt history of GET
// /v1/notifications/{id}, POST /v1/notifications/{id}/cancel, GET /v1/kinds
// and the 422 naming every missing param — through HTTP on both stores.

// everyday is the router over one store, with the store at hand to put
// deliveries in the states a test needs.
type everyday struct {
	*bundle
	st store.Store
}

// onEachStore runs test against the router on SQLite and on PostgreSQL;
// wrap, when set, wraps the store the router gets.
func onEachStore(t *testing.T, wrap func(store.Store) store.Store, test func(t *testing.T, e *everyday)) {
	t.Helper()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, setupEveryday(t, driver, wrap))
		})
	}
}

func setupEveryday(t *testing.T, driver string, wrap func(store.Store) store.Store) *everyday {
	t.Helper()
	return setupTraced(t, driver, wrap, nil)
}

// setupTraced is setupEveryday with tracer, when set, tracing every
// statement of the PostgreSQL store's pool.
func setupTraced(t *testing.T, driver string, wrap func(store.Store) store.Store, tracer pgx.QueryTracer) *everyday {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	var st store.Store
	switch driver {
	case "sqlite":
		s, err := sqlite.Open(ctx, testsqlite.Path(t), sqlite.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		st = s
	case "postgres":
		s, err := postgres.Open(ctx, testpg.Schema(t), postgres.Options{Clock: clk, Logger: logger, Tracer: tracer})
		if err != nil {
			t.Fatal(err)
		}
		st = s
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	served := st
	if wrap != nil {
		served = wrap(st)
	}
	cat, err := catalog.New(config.Dev().Kinds)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(st.OutboxBacklog)
	h := httpapi.New(httpapi.Config{
		Keys:    auth.NewKeys(map[string]string{keyA: "a", keyB: "b"}),
		Intake:  &intake.Handler{Store: served, Catalog: cat, Clock: clk, IdempotencyTTL: time.Hour, Logger: logger, Metrics: m},
		Lookup:  &lookup.Handler{Store: served, Logger: logger},
		Parked:  parked.DB{Store: served},
		Store:   served,
		Metrics: m,
		Logger:  logger,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 30 * time.Second
	return &everyday{bundle: &bundle{url: srv.URL, client: client, clock: clk}, st: st}
}

// accept posts a payment.approved for recipient as tenant a and returns its id.
func (e *everyday) accept(t *testing.T, recipient string) string {
	t.Helper()
	return e.acceptKind(t, recipient, "payment.approved", `{"amount":12000,"merchant":"Cafe Mori"}`)
}

func (e *everyday) acceptKind(t *testing.T, recipient, kind, params string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+"/v1/notifications", strings.NewReader(
		`{"recipient":"`+recipient+`","event_id":"evt-`+fmt.Sprint(time.Now().UnixNano())+`","kind":"`+kind+`","params":`+params+`}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("Idempotency-Key", fmt.Sprint("k-", time.Now().UnixNano()))
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var a struct{ ID string }
	if err := json.NewDecoder(res.Body).Decode(&a); err != nil || res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/notifications = %d (%v)", res.StatusCode, err)
	}
	return a.ID
}

// getJSON GETs path as apiKey, wants 200 application/json and decodes it.
func (e *everyday) getJSON(t *testing.T, apiKey, path string, into any) response {
	t.Helper()
	r := e.do(t, http.MethodGet, path, "Bearer "+apiKey, "")
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s = %d %s; body %s", path, r.status, r.header.Get("Content-Type"), r.body)
	}
	if err := json.Unmarshal(r.body, into); err != nil {
		t.Fatalf("GET %s: %s: %v", path, r.body, err)
	}
	return r
}

// claim claims tenant a's send of notification id on ch as a sender would,
// wanting attempt number attempt.
func (e *everyday) claim(t *testing.T, id string, ch heraldtype.Channel, attempt int) {
	t.Helper()
	res, err := e.st.DeliveryClaim(context.Background(), store.DeliveryClaimParams{MessageID: store.MessageID(id, ch),
		NotificationID: id, Tenant: "a", Channel: ch, Provider: "p", Owner: "w"})
	if err != nil || !res.Claimed || res.Attempt != attempt {
		t.Fatalf("claim %s attempt %d: %+v %v", ch, attempt, res, err)
	}
}

// listed is one item of GET /v1/notifications and the body of GET
// /v1/notifications/{id}.
type listed struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Recipient  string    `json:"recipient"`
	EventID    string    `json:"event_id"`
	CreatedAt  time.Time `json:"created_at"`
	Deliveries []struct {
		MessageID     string     `json:"message_id"`
		Channel       string     `json:"channel"`
		State         string     `json:"state"`
		Reason        string     `json:"reason"`
		Attempts      int        `json:"attempts"`
		UpdatedAt     time.Time  `json:"updated_at"`
		NextAttemptAt *time.Time `json:"next_attempt_at"`
		AttemptsLog   []struct {
			Attempt    int       `json:"attempt"`
			StartedAt  time.Time `json:"started_at"`
			Class      string    `json:"class"`
			Reason     string    `json:"reason"`
			DurationMS int64     `json:"duration_ms"`
		} `json:"attempts_log"`
	} `json:"deliveries"`
}

type page struct {
	Notifications []listed `json:"notifications"`
	NextCursor    *string  `json:"next_cursor"`
}

// walkList pages through GET /v1/notifications?query with limit and
// returns the ids in order.
func (e *everyday) walkList(t *testing.T, query string, limit int) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 100 {
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		q.Set("limit", fmt.Sprint(limit))
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var p page
		e.getJSON(t, keyA, "/v1/notifications?"+q.Encode(), &p)
		if len(p.Notifications) > limit {
			t.Fatalf("a page of %d has %d items", limit, len(p.Notifications))
		}
		for _, n := range p.Notifications {
			ids = append(ids, n.ID)
		}
		if p.NextCursor == nil {
			return ids
		}
		cursor = *p.NextCursor
	}
	t.Fatal("100 pages and no end")
	return nil
}

// TestListStoredInboxEntries: state=STORED lists the notifications whose
// inbox item was written, as their entries show it.
func TestListStoredInboxEntries(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		e.accept(t, "u1")
		id := e.acceptKind(t, "u1", "order.shipped", `{"item":"Mug","tracking":"T1"}`)
		if got := e.walkList(t, "state=STORED", 10); !slices.Equal(got, []string{id}) {
			t.Errorf("state=STORED = %v, want [%s]", got, id)
		}
	})
}

func TestListNotifications(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		var empty page
		if r := e.getJSON(t, keyA, "/v1/notifications", &empty); len(empty.Notifications) != 0 || empty.NextCursor != nil ||
			!strings.Contains(string(r.body), `"notifications":[]`) || !strings.Contains(string(r.body), `"next_cursor":null`) {
			t.Fatalf("empty list = %s", r.body)
		}
		// Five in one instant, two later; recipients u1 and u2.
		var all []string
		recipient, kind := map[string]string{}, map[string]string{}
		add := func(id, r, k string) {
			all = append(all, id)
			recipient[id], kind[id] = r, k
		}
		for i := range 5 {
			r := fmt.Sprint("u", i%2+1)
			add(e.accept(t, r), r, "payment.approved")
		}
		slices.Sort(all) // one instant: by id
		e.clock.Advance(time.Second)
		add(e.acceptKind(t, "u1", "appointment.reminder", `{"date":"3/15","time":"10:00"}`), "u1", "appointment.reminder")
		e.clock.Advance(time.Second)
		add(e.accept(t, "u2"), "u2", "payment.approved")
		slices.Reverse(all)
		where := func(keep func(id string) bool) []string {
			var out []string
			for _, id := range all {
				if keep(id) {
					out = append(out, id)
				}
			}
			return out
		}

		t.Run("NewestFirstInPagesWithoutSkipOrRepeat", func(t *testing.T) {
			for _, limit := range []int{1, 2, 3, 7, 100} {
				if got := e.walkList(t, "", limit); !slices.Equal(got, all) {
					t.Errorf("pages of %d = %v, want %v", limit, got, all)
				}
			}
		})
		t.Run("ItemsHaveTheShapeOfTheRead", func(t *testing.T) {
			r := e.getJSON(t, keyA, "/v1/notifications?limit=1", &page{})
			var raw struct {
				Notifications []map[string]json.RawMessage `json:"notifications"`
			}
			if err := json.Unmarshal(r.body, &raw); err != nil || len(raw.Notifications) != 1 {
				t.Fatalf("list %s (%v)", r.body, err)
			}
			for _, k := range []string{"id", "kind", "recipient", "event_id", "created_at", "deliveries"} {
				if _, ok := raw.Notifications[0][k]; !ok {
					t.Errorf("item has no %q: %s", k, r.body)
				}
			}
			var ds []map[string]json.RawMessage
			if err := json.Unmarshal(raw.Notifications[0]["deliveries"], &ds); err != nil || len(ds) != 2 {
				t.Fatalf("deliveries %s (%v)", raw.Notifications[0]["deliveries"], err)
			}
			for _, k := range []string{"message_id", "channel", "state", "reason", "attempts", "updated_at", "next_attempt_at"} {
				if _, ok := ds[0][k]; !ok {
					t.Errorf("delivery has no %q: %s", k, r.body)
				}
			}
			if _, ok := ds[0]["attempts_log"]; ok {
				t.Errorf("a listed delivery carries attempts_log: %s", r.body)
			}
			var p page
			e.getJSON(t, keyA, "/v1/notifications?limit=1", &p)
			n := p.Notifications[0]
			if n.ID != all[0] || n.Kind != "payment.approved" || n.Recipient != "u2" || n.Deliveries[0].State != "PENDING" ||
				n.Deliveries[0].MessageID != n.ID+".webhook" {
				t.Errorf("first item %+v", n)
			}
		})
		t.Run("Filters", func(t *testing.T) {
			since := url.QueryEscape(e.clock.Now().Add(-time.Second).Format(time.RFC3339))
			for _, tc := range []struct {
				query string
				want  []string
			}{
				{"recipient=u1", where(func(id string) bool { return recipient[id] == "u1" })},
				{"kind=appointment.reminder", []string{all[1]}},
				{"recipient=u1&kind=payment.approved", where(func(id string) bool { return recipient[id] == "u1" && kind[id] == "payment.approved" })},
				{"recipient=u2&state=PENDING", where(func(id string) bool { return recipient[id] == "u2" })},
				{"since=" + since, all[:2]},
				{"state=PENDING", all},
				{"state=SCHEDULED", nil},
				{"recipient=nobody", nil},
				{"recipient=&kind=", all},
			} {
				if got := e.walkList(t, tc.query, 2); !slices.Equal(got, tc.want) {
					t.Errorf("?%s = %v, want %v", tc.query, got, tc.want)
				}
			}
		})
		t.Run("StateFilterFollowsTheCancel", func(t *testing.T) {
			var res struct{ ID string }
			if r := e.do(t, http.MethodPost, "/v1/notifications/"+all[3]+"/cancel", "Bearer "+keyA, ""); r.status != http.StatusOK ||
				json.Unmarshal(r.body, &res) != nil || res.ID != all[3] {
				t.Fatalf("cancel = %d %s", r.status, r.body)
			}
			if got := e.walkList(t, "state=SUPPRESSED", 10); !slices.Equal(got, []string{all[3]}) {
				t.Errorf("state=SUPPRESSED = %v, want [%s]", got, all[3])
			}
		})
		t.Run("OnlyTheCallersTenant", func(t *testing.T) {
			var p page
			e.getJSON(t, keyB, "/v1/notifications", &p)
			if len(p.Notifications) != 0 {
				t.Errorf("tenant b lists %d of tenant a's notifications", len(p.Notifications))
			}
			// Nor can it use a's cursor.
			var first page
			e.getJSON(t, keyA, "/v1/notifications?limit=1", &first)
			wantProblem(t, e.do(t, http.MethodGet, "/v1/notifications?limit=1&cursor="+*first.NextCursor, "Bearer "+keyB, ""), http.StatusBadRequest)
		})
		t.Run("BadInputIs400", func(t *testing.T) {
			var first page
			e.getJSON(t, keyA, "/v1/notifications?limit=1&recipient=u1", &first)
			c := *first.NextCursor
			tampered := c[:len(c)-2] + map[bool]string{true: "AA", false: "AB"}[strings.HasSuffix(c, "AB")]
			for _, tc := range []struct{ query, param string }{
				{"limit=0", "limit"}, {"limit=101", "limit"}, {"limit=-1", "limit"}, {"limit=ten", "limit"},
				{"since=yesterday", "since"}, {"since=2030-03-14", "since"},
				{"state=BOGUS", "state"}, {"state=pending", "state"},
				{"cursor=garbage", "cursor"}, {"recipient=u1&cursor=" + tampered, "cursor"},
				{"recipient=u2&cursor=" + c, "cursor"}, {"cursor=" + c, "cursor"},
				{"recipeint=u1", "recipeint"}, {"limit=1&limit=2", "limit"},
				{"recipient=" + url.QueryEscape("a\x00b"), "recipient"}, {"recipient=" + strings.Repeat("r", 201), "recipient"},
				{"%zz", ""},
			} {
				p := wantProblem(t, e.do(t, http.MethodGet, "/v1/notifications?"+tc.query, "Bearer "+keyA, ""), http.StatusBadRequest)
				if p.Param != tc.param {
					t.Errorf("?%s: param %q, want %q (%s)", tc.query, p.Param, tc.param, p.Detail)
				}
			}
			wantProblem(t, e.do(t, http.MethodGet, "/v1/notifications", "", ""), http.StatusUnauthorized)
		})
	})
}

func TestReadShowsNextAttemptAndAttemptHistory(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		ctx := context.Background()
		id := e.accept(t, "u1")
		msg := store.MessageID(id, heraldtype.ChannelWebhook)
		// The sender's first attempt on webhook: a definite non-send.
		started := e.clock.Now()
		e.claim(t, id, heraldtype.ChannelWebhook, 1)
		if res, err := e.st.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: msg, Attempt: 1, State: heraldtype.DeliveryRetryWait,
			Reason: "HTTP_429", RetryDelay: 10 * time.Minute, Owner: "w", Class: "not_sent", StartedAt: started, Duration: 12 * time.Millisecond}); err != nil || !res.Recorded {
			t.Fatalf("record: %+v %v", res, err)
		}
		var n listed
		r := e.getJSON(t, keyA, "/v1/notifications/"+id, &n)
		if n.ID != id || n.Kind != "payment.approved" || n.Recipient != "u1" || len(n.Deliveries) != 2 {
			t.Fatalf("read %s", r.body)
		}
		w, p := n.Deliveries[0], n.Deliveries[1]
		if w.Channel != "webhook" || w.State != "RETRY_WAIT" || w.Reason != "HTTP_429" || w.Attempts != 1 ||
			w.NextAttemptAt == nil || !w.NextAttemptAt.Equal(e.clock.Now().Add(10*time.Minute)) {
			t.Errorf("webhook entry %+v", w)
		}
		if len(w.AttemptsLog) != 1 {
			t.Fatalf("webhook attempts_log %s", r.body)
		}
		if a := w.AttemptsLog[0]; a.Attempt != 1 || !a.StartedAt.Equal(started) || a.Class != "not_sent" || a.Reason != "HTTP_429" || a.DurationMS != 12 {
			t.Errorf("attempt %+v", a)
		}
		if p.Channel != "push" || p.State != "PENDING" || p.NextAttemptAt != nil || p.AttemptsLog == nil || len(p.AttemptsLog) != 0 {
			t.Errorf("push entry %+v, want PENDING, next_attempt_at null, attempts_log []", p)
		}
		for _, k := range []string{`"attempts_log":[]`, `"next_attempt_at":null`} {
			if !strings.Contains(string(r.body), k) {
				t.Errorf("read has no %s: %s", k, r.body)
			}
		}
		// Once it is no longer waiting, there is no next attempt.
		e.clock.Advance(10 * time.Minute)
		e.claim(t, id, heraldtype.ChannelWebhook, 2)
		if res, err := e.st.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: msg, Attempt: 2, State: heraldtype.DeliveryProviderAccepted,
			Owner: "w", Class: "accepted", StartedAt: e.clock.Now(), Duration: 30 * time.Millisecond}); err != nil || !res.Recorded {
			t.Fatalf("record: %+v %v", res, err)
		}
		e.getJSON(t, keyA, "/v1/notifications/"+id, &n)
		if w := n.Deliveries[0]; w.State != "PROVIDER_ACCEPTED" || w.NextAttemptAt != nil || len(w.AttemptsLog) != 2 ||
			w.AttemptsLog[1].Class != "accepted" || w.AttemptsLog[1].DurationMS != 30 {
			t.Errorf("after the retry: %+v", w)
		}
		wantProblem(t, e.do(t, http.MethodGet, "/v1/notifications/"+id, "Bearer "+keyB, ""), http.StatusNotFound)
	})
}

func TestCancelNotification(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		id := e.accept(t, "u1")
		// push is already claimed by a sender: it is reported, not touched.
		push := store.MessageID(id, heraldtype.ChannelPush)
		e.claim(t, id, heraldtype.ChannelPush, 1)
		r := e.do(t, http.MethodPost, "/v1/notifications/"+id+"/cancel", "Bearer "+keyA, "")
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("cancel = %d %s", r.status, r.body)
		}
		want := `{"id":"` + id + `","deliveries":[` +
			`{"message_id":"` + id + `.webhook","channel":"webhook","state":"SUPPRESSED","reason":"CANCELLED","cancelled":true},` +
			`{"message_id":"` + push + `","channel":"push","state":"SENDING","reason":"","cancelled":false}]}` + "\n"
		if string(r.body) != want {
			t.Fatalf("cancel body\n%s\nwant\n%s", r.body, want)
		}
		// Idempotent: the very same answer.
		e.clock.Advance(time.Minute)
		if again := e.do(t, http.MethodPost, "/v1/notifications/"+id+"/cancel", "Bearer "+keyA, ""); again.status != http.StatusOK || string(again.body) != want {
			t.Fatalf("second cancel = %d %s", again.status, again.body)
		}
		var n listed
		e.getJSON(t, keyA, "/v1/notifications/"+id, &n)
		if d := n.Deliveries[0]; d.State != "SUPPRESSED" || d.Reason != "CANCELLED" {
			t.Errorf("read after cancel: %+v", d)
		}
		if d := n.Deliveries[1]; d.State != "SENDING" {
			t.Errorf("the SENDING push became %+v", d)
		}
		// Counted: one cancel that cancelled, one that found nothing left,
		// and the SUPPRESSED entry among the delivery states written.
		m := e.do(t, http.MethodGet, "/metrics", "", "")
		for _, line := range []string{
			`herald_cancels_total{result="cancelled"} 1`,
			`herald_cancels_total{result="unchanged"} 1`,
			`herald_deliveries_total{channel="webhook",lane="transactional",state="SUPPRESSED"} 1`,
		} {
			if !strings.Contains(string(m.body), line+"\n") {
				t.Errorf("/metrics has no %q", line)
			}
		}

		wantProblem(t, e.do(t, http.MethodPost, "/v1/notifications/"+id+"/cancel", "Bearer "+keyB, ""), http.StatusNotFound)
		wantProblem(t, e.do(t, http.MethodPost, "/v1/notifications/ntf_NOSUCHID/cancel", "Bearer "+keyA, ""), http.StatusNotFound)
		wantProblem(t, e.do(t, http.MethodPost, "/v1/notifications/"+id+"/cancel", "", ""), http.StatusUnauthorized)
		wantProblem(t, e.do(t, http.MethodGet, "/v1/notifications/"+id+"/cancel", "Bearer "+keyA, ""), http.StatusMethodNotAllowed)
	})
}

// failing is a store whose list and decision writes fail, as a store that
// lost its database does.
type failing struct{ store.Store }

var errDown = errors.New("database unreachable")

func (failing) NotificationList(context.Context, store.NotificationListParams) ([]store.NotificationView, error) {
	return nil, errDown
}

func (failing) AttemptList(context.Context, []string) ([]store.Attempt, error) { return nil, errDown }

func (failing) DeliveryDecide(context.Context, store.DeliveryDecideParams) (bool, error) {
	return false, errDown
}

func TestStoreFailuresAre503(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(s store.Store) store.Store { return failing{s} }, func(t *testing.T, e *everyday) {
		id := e.accept(t, "u1")
		wantProblem(t, e.do(t, http.MethodGet, "/v1/notifications", "Bearer "+keyA, ""), http.StatusServiceUnavailable)
		wantProblem(t, e.do(t, http.MethodGet, "/v1/notifications/"+id, "Bearer "+keyA, ""), http.StatusServiceUnavailable)
		r := e.do(t, http.MethodPost, "/v1/notifications/"+id+"/cancel", "Bearer "+keyA, "")
		wantProblem(t, r, http.StatusServiceUnavailable)
		if r.header.Get("Retry-After") == "" {
			t.Error("a failed cancel's 503 has no Retry-After")
		}
	})
}

func TestKinds(t *testing.T) {
	t.Parallel()
	onEachStore(t, nil, func(t *testing.T, e *everyday) {
		var body struct {
			Kinds []struct {
				Name     string          `json:"name"`
				Category string          `json:"category"`
				Channels []string        `json:"channels"`
				Params   []catalog.Param `json:"params"`
			} `json:"kinds"`
		}
		r := e.getJSON(t, keyA, "/v1/kinds", &body)
		var names []string
		for _, k := range body.Kinds {
			names = append(names, k.Name)
		}
		if want := []string{"appointment.reminder", "coupon.expiring", "fraud.alert", "order.shipped", "payment.approved"}; !slices.Equal(names, want) {
			t.Fatalf("kinds %v, want %v: %s", names, want, r.body)
		}
		pay := body.Kinds[4]
		if pay.Category != "transactional" || !slices.Equal(pay.Channels, []string{"webhook", "push"}) ||
			!slices.Equal(pay.Params, []catalog.Param{{Name: "amount", Required: true}, {Name: "merchant", Required: true}}) {
			t.Errorf("payment.approved = %+v", pay)
		}
		if !strings.Contains(string(r.body), `{"name":"amount","required":true}`) {
			t.Errorf("params are not {name, required}: %s", r.body)
		}
		wantProblem(t, e.do(t, http.MethodGet, "/v1/kinds", "", ""), http.StatusUnauthorized)

		// What GET /v1/kinds lists is what a 422 names, all at once.
		resp := e.do(t, http.MethodPost, "/v1/notifications", "Bearer "+keyA, `{"recipient":"u1","event_id":"e1","kind":"payment.approved"}`)
		if resp.status != http.StatusBadRequest { // no Idempotency-Key: the key is checked first
			t.Fatalf("POST without a key = %d", resp.status)
		}
		req, err := http.NewRequest(http.MethodPost, e.url+"/v1/notifications", strings.NewReader(`{"recipient":"u1","event_id":"e1","kind":"payment.approved","params":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("Idempotency-Key", "k-422")
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var p struct {
			Status        int      `json:"status"`
			MissingParams []string `json:"missing_params"`
		}
		if err := json.NewDecoder(res.Body).Decode(&p); err != nil || res.StatusCode != http.StatusUnprocessableEntity ||
			res.Header.Get("Content-Type") != "application/problem+json" || !slices.Equal(p.MissingParams, []string{"amount", "merchant"}) {
			t.Errorf("422 = %d %s %+v (%v)", res.StatusCode, res.Header.Get("Content-Type"), p, err)
		}
	})
}
