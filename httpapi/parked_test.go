package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/audit"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
)

// The parked-message endpoints through HTTP: on SQLite and PostgreSQL, with
// the db transport (parked.DB) and the rabbitmq transport (rabbitmq.Parking
// over a fresh vhost).

// parkedEntry is one entry of GET /v1/parked as the README lists it; a
// null field decodes as "".
type parkedEntry struct {
	MessageID      string    `json:"message_id"`
	NotificationID string    `json:"notification_id"`
	Kind           string    `json:"kind"`
	Lane           string    `json:"lane"`
	Channel        string    `json:"channel"`
	Reason         string    `json:"reason"`
	ParkedAt       time.Time `json:"parked_at"`
}

// parkedFields are the fields of every entry, present on both transports.
var parkedFields = []string{"channel", "kind", "lane", "message_id", "notification_id", "parked_at", "reason"}

// parkedEnv is the router over one store and one transport's parked
// service, with the store at hand.
type parkedEnv struct {
	*bundle
	st  store.Store
	svc parked.Service
}

// onEachStoreParked runs test against the router on SQLite and PostgreSQL;
// service makes the parked service from the store (nil: the db transport's).
func onEachStoreParked(t *testing.T, service func(t *testing.T, st store.Store) parked.Service, test func(t *testing.T, e *parkedEnv)) {
	t.Helper()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, setupParked(t, driver, service))
		})
	}
}

// setupParked serves the router with svc over a store of driver, the one
// the everyday tests open (setupEveryday), with its fake clock.
func setupParked(t *testing.T, driver string, service func(t *testing.T, st store.Store) parked.Service) *parkedEnv {
	t.Helper()
	ev := setupEveryday(t, driver, nil)
	var svc parked.Service = parked.DB{Store: ev.st}
	if service != nil {
		svc = service(t, ev.st)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	srv := httptest.NewServer(httpapi.New(httpapi.Config{
		Keys:   auth.NewKeys(map[string]string{keyA: "a", keyB: "b"}),
		Lookup: &lookup.Handler{Store: ev.st, Logger: logger},
		Parked: svc,
		Store:  ev.st,
		Logger: logger,
	}))
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 60 * time.Second // a hung request fails its test
	return &parkedEnv{bundle: &bundle{url: srv.URL, client: client, clock: ev.clock}, st: ev.st, svc: svc}
}

// park accepts a notification of tenant on one channel and parks its
// delivery with reason, at the store's (fake) time, and returns the entry
// GET /v1/parked should show for it.
func (e *parkedEnv) park(t *testing.T, tenant, id string, ch heraldtype.Channel, lane heraldtype.Lane, reason string) parkedEntry {
	t.Helper()
	ctx := context.Background()
	res, err := e.st.NotificationCreate(ctx, store.NotificationCreateParams{
		Tenant: tenant, ID: id, Recipient: "user-1", EventID: "evt-" + id, Kind: "payment.approved",
		Lane: lane, Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{ch},
	})
	if err != nil || res.Outcome != store.Created {
		t.Fatalf("create %s: %+v %v", id, res, err)
	}
	msg := store.MessageID(id, ch)
	ok, err := e.st.DeliveryDecide(ctx, store.DeliveryDecideParams{
		MessageID: msg, NotificationID: id, Tenant: tenant, Channel: ch, State: heraldtype.DeliveryParked, Reason: reason,
	})
	if err != nil || !ok {
		t.Fatalf("park %s: %v %v", msg, ok, err)
	}
	return parkedEntry{MessageID: msg, NotificationID: id, Kind: "payment.approved", Lane: string(lane), Channel: string(ch),
		Reason: reason, ParkedAt: e.clock.Now()}
}

// list calls GET /v1/parked as apiKey and checks the README's shape: every
// entry has exactly the parkedFields, none left out.
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
	for _, e := range raw.Parked {
		if got := slices.Sorted(maps.Keys(e)); !slices.Equal(got, parkedFields) {
			t.Errorf("entry has fields %v, want %v", got, parkedFields)
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
		if w.ParkedAt.IsZero() { // the broker's time: only roughly now
			w.ParkedAt = g.ParkedAt
		}
		if g.MessageID != w.MessageID || g.NotificationID != w.NotificationID || g.Kind != w.Kind || g.Lane != w.Lane ||
			g.Channel != w.Channel || g.Reason != w.Reason || !g.ParkedAt.Equal(w.ParkedAt) {
			t.Errorf("entry %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestParkedList holds GET /v1/parked with the db transport on both
// stores: the README's fields (the kind included), oldest first, the
// caller's tenant only, and ?limit.
func TestParkedList(t *testing.T) {
	t.Parallel()
	onEachStoreParked(t, nil, func(t *testing.T, e *parkedEnv) {
		var ownA []parkedEntry
		ownA = append(ownA, e.park(t, "a", "ntf_A1", heraldtype.ChannelWebhook, heraldtype.LaneTransactional, heraldtype.ReasonTemplateMissing))
		e.clock.Advance(time.Second)
		ownB := []parkedEntry{e.park(t, "b", "ntf_B1", heraldtype.ChannelSMS, heraldtype.LaneTransactional, heraldtype.ReasonUnknownKind)}
		e.clock.Advance(time.Second)
		ownA = append(ownA, e.park(t, "a", "ntf_A2", heraldtype.ChannelSMS, heraldtype.LaneAlert, heraldtype.ReasonUnknownKind))
		e.clock.Advance(time.Second)
		ownA = append(ownA, e.park(t, "a", "ntf_A3", heraldtype.ChannelPush, heraldtype.LaneMarketing, heraldtype.ReasonNoProvider))

		t.Run("FieldsOldestFirstOwnTenantOnly", func(t *testing.T) {
			wantEntries(t, e.list(t, keyA, ""), ownA)
			wantEntries(t, e.list(t, keyB, ""), ownB)
		})
		t.Run("LimitCapsTheList", func(t *testing.T) {
			wantEntries(t, e.list(t, keyA, "?limit=1"), ownA[:1])
			wantEntries(t, e.list(t, keyA, "?limit=2"), ownA[:2])
			wantEntries(t, e.list(t, keyA, "?limit=1000"), ownA)
		})
		t.Run("BadLimitIs400Problem", func(t *testing.T) {
			for _, limit := range []string{"0", "-1", "1001", "abc", "1.5", "2e1", "99999999999999999999"} {
				p := wantProblem(t, e.do(t, http.MethodGet, "/v1/parked?limit="+limit, "Bearer "+keyA, ""), http.StatusBadRequest)
				if p.Param != "limit" || !strings.Contains(p.Detail, "1..1000") {
					t.Errorf("limit=%s: param %q detail %q, want limit and its range", limit, p.Param, p.Detail)
				}
			}
		})
		t.Run("NoKeyIs401", func(t *testing.T) {
			wantProblem(t, e.do(t, http.MethodGet, "/v1/parked", "Bearer nope", ""), http.StatusUnauthorized)
		})
	})
}

// discard calls POST /v1/parked/{id}/discard as apiKey with body.
func (b *bundle) discard(t *testing.T, apiKey, id, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/parked/"+id+"/discard", "Bearer "+apiKey, body)
}

// wantDiscarded checks a 200 {"discarded": 1}.
func wantDiscarded(t *testing.T, r response) {
	t.Helper()
	var body map[string]any
	if r.status != http.StatusOK || json.Unmarshal(r.body, &body) != nil || !maps.Equal(body, map[string]any{"discarded": 1.0}) {
		t.Fatalf("discard = %d %s, want 200 {\"discarded\": 1}", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
}

// wantDelivery checks the delivery's state through GET /v1/notifications/{id}.
func (e *parkedEnv) wantDelivery(t *testing.T, apiKey, notificationID, state, reason string) {
	t.Helper()
	r := e.do(t, http.MethodGet, "/v1/notifications/"+notificationID, "Bearer "+apiKey, "")
	var v struct {
		Deliveries []struct{ State, Reason string } `json:"deliveries"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &v) != nil || len(v.Deliveries) != 1 {
		t.Fatalf("GET /v1/notifications/%s = %d %s", notificationID, r.status, r.body)
	}
	if d := v.Deliveries[0]; d.State != state || d.Reason != reason {
		t.Fatalf("delivery of %s is %s(%s), want %s(%s)", notificationID, d.State, d.Reason, state, reason)
	}
}

// wantAudit checks the discard audit rows of messageID.
func (e *parkedEnv) wantAudit(t *testing.T, messageID string, want ...store.ParkedDiscardEntry) {
	t.Helper()
	got, err := e.st.ParkedDiscardList(context.Background(), store.ParkedDiscardListParams{MessageID: messageID})
	if err != nil {
		t.Fatalf("ParkedDiscardList: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d audit rows for %s, want %d: %+v", len(got), messageID, len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Actor != w.Actor || g.MessageID != w.MessageID || g.Tenant != w.Tenant || g.ParkedReason != w.ParkedReason ||
			g.Reason != w.Reason || (!w.DiscardedAt.IsZero() && !g.DiscardedAt.Equal(w.DiscardedAt)) {
			t.Errorf("audit row %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestParkedDiscard holds POST /v1/parked/{message_id}/discard with the db
// transport on both stores: a reason is required (422), the body must be
// {"reason"} (400), another tenant's message is 404; a discard ends the
// delivery SUPPRESSED(DISCARDED), writes the audit row and takes the
// message off the list; again, or a requeue afterwards, is 404.
func TestParkedDiscard(t *testing.T) {
	t.Parallel()
	onEachStoreParked(t, nil, func(t *testing.T, e *parkedEnv) {
		a := e.park(t, "a", "ntf_A1", heraldtype.ChannelWebhook, heraldtype.LaneTransactional, heraldtype.ReasonUnknownKind)
		b := e.park(t, "b", "ntf_B1", heraldtype.ChannelWebhook, heraldtype.LaneTransactional, heraldtype.ReasonUnknownKind)
		e.clock.Advance(time.Minute)

		t.Run("ReasonIsRequiredAndAtMost500Characters", func(t *testing.T) {
			for _, c := range []struct{ name, body, detail string }{
				{"NoBody", "", "reason is required"},
				{"NoReason", `{}`, "reason is required"},
				{"EmptyReason", `{"reason": ""}`, "reason is required"},
				{"BlankReason", `{"reason": " \t "}`, "reason is required"},
				{"TooLong", `{"reason": "` + strings.Repeat("x", 501) + `"}`, "at most 500"},
				{"TooLongInCharacters", `{"reason": "` + strings.Repeat("가", 501) + `"}`, "at most 500"},
			} {
				t.Run(c.name, func(t *testing.T) {
					p := wantProblem(t, e.discard(t, keyA, a.MessageID, c.body), http.StatusUnprocessableEntity)
					if p.Param != "reason" || !strings.Contains(p.Detail, c.detail) {
						t.Errorf("param %q detail %q, want reason and %q", p.Param, p.Detail, c.detail)
					}
				})
			}
		})
		t.Run("ABodyThatIsNotAReasonIs400", func(t *testing.T) {
			for _, body := range []string{`not json`, `{"reason": 5}`, `{"reason": "x", "force": true}`, `["x"]`} {
				wantProblem(t, e.discard(t, keyA, a.MessageID, body), http.StatusBadRequest)
			}
		})
		t.Run("NoKeyIs401", func(t *testing.T) {
			wantProblem(t, e.discard(t, "nope", a.MessageID, `{"reason": "x"}`), http.StatusUnauthorized)
		})
		t.Run("AnotherTenantsMessageIs404", func(t *testing.T) {
			wantProblem(t, e.discard(t, keyB, a.MessageID, `{"reason": "not mine"}`), http.StatusNotFound)
			wantProblem(t, e.discard(t, keyA, "ntf_nope.webhook", `{"reason": "x"}`), http.StatusNotFound)
			e.wantAudit(t, a.MessageID)
		})
		// Nothing above changed anything.
		wantEntries(t, e.list(t, keyA, ""), []parkedEntry{a})

		reason := strings.Repeat("가", 499) + "!" // 500 characters, 1498 bytes
		wantDiscarded(t, e.discard(t, keyA, a.MessageID, `{"reason": "`+reason+`"}`))
		e.wantDelivery(t, keyA, a.NotificationID, "SUPPRESSED", heraldtype.ReasonDiscarded)
		e.wantAudit(t, a.MessageID, store.ParkedDiscardEntry{
			DiscardedAt: e.clock.Now(), Actor: "api:a", MessageID: a.MessageID, Tenant: "a",
			ParkedReason: heraldtype.ReasonUnknownKind, Reason: reason,
		})
		wantEntries(t, e.list(t, keyA, ""), nil)
		wantEntries(t, e.list(t, keyB, ""), []parkedEntry{b})

		t.Run("AgainIs404", func(t *testing.T) {
			wantProblem(t, e.discard(t, keyA, a.MessageID, `{"reason": "again"}`), http.StatusNotFound)
			e.wantAudit(t, a.MessageID, store.ParkedDiscardEntry{
				Actor: "api:a", MessageID: a.MessageID, Tenant: "a", ParkedReason: heraldtype.ReasonUnknownKind, Reason: reason,
			})
		})
		t.Run("ARequeueDoesNotBringItBack", func(t *testing.T) {
			wantProblem(t, e.do(t, http.MethodPost, "/v1/parked/"+a.MessageID+"/requeue", "Bearer "+keyA, ""), http.StatusNotFound)
			r := e.do(t, http.MethodPost, "/v1/parked/requeue", "Bearer "+keyA, "")
			if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"requeued":0}` {
				t.Fatalf("requeue all = %d %s, want 200 {\"requeued\":0}", r.status, r.body)
			}
			e.wantDelivery(t, keyA, a.NotificationID, "SUPPRESSED", heraldtype.ReasonDiscarded)
		})
	})
}

// mqParked is the rabbitmq transport's parking over a fresh vhost, with a
// channel to put copies in its parking queue.
type mqParked struct {
	*rabbitmq.Parking
	ch *amqp.Channel
}

func newMQParked(t *testing.T, st store.Store) *mqParked {
	t.Helper()
	url := testmq.VHost(t)
	topo := rabbitmq.Topology{}.WithDefaults()
	ch := testmq.Channel(t, url)
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &mqParked{Parking: &rabbitmq.Parking{URL: url, Topology: topo, Store: st, ConfirmTimeout: 30 * time.Second, Logger: quiet}, ch: ch}
}

// park puts msg in the parking queue with reason, confirmed.
func (m *mqParked) park(t *testing.T, msg amqp.Publishing, reason string) {
	t.Helper()
	if msg.Headers == nil {
		msg.Headers = amqp.Table{}
	}
	msg.Headers[rabbitmq.HeaderFailureReason] = reason
	topo := m.Topology
	dc, err := m.ch.PublishWithDeferredConfirm(topo.ParkingExchange(), rabbitmq.ParkedKey, true, false, msg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("park %s: ack %v (%v)", msg.MessageId, ok, err)
	}
}

// TestParkedOverRabbitMQ holds the endpoints with the rabbitmq transport on
// both stores: an entry names its kind and has every field (null where the
// message does not say), a message that names no tenant is no tenant's to
// see or discard, and a discard records the delivery SUPPRESSED(DISCARDED)
// and its audit row before it removes the parked copy.
func TestParkedOverRabbitMQ(t *testing.T) {
	t.Parallel()
	service := func(t *testing.T, st store.Store) parked.Service { return newMQParked(t, st) }
	onEachStoreParked(t, service, func(t *testing.T, e *parkedEnv) {
		mq := e.svc.(*mqParked)
		// A message the sender parked: its delivery is PARKED, its copy
		// carries the job.
		a := e.park(t, "a", "ntf_A1", heraldtype.ChannelWebhook, heraldtype.LaneTransactional, heraldtype.ReasonUnknownKind)
		job := heraldtype.Job{MessageID: a.MessageID, NotificationID: a.NotificationID, Tenant: "a", Kind: a.Kind,
			Lane: heraldtype.LaneTransactional, Channel: heraldtype.ChannelWebhook}
		msg, err := rabbitmq.JobMessage(job, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		mq.park(t, msg, heraldtype.ReasonUnknownKind)
		// A body that is not a job and names no tenant.
		mq.park(t, amqp.Publishing{MessageId: "garbage-1", Body: []byte("not json")}, rabbitmq.ReasonMalformed)
		// A body that is not a job but carries tenant a's header.
		mq.park(t, amqp.Publishing{MessageId: "garbage-a", Body: []byte("{"), Headers: amqp.Table{rabbitmq.HeaderTenant: "a"}},
			rabbitmq.ReasonMalformed)

		wantA := []parkedEntry{
			{MessageID: a.MessageID, NotificationID: a.NotificationID, Kind: a.Kind, Lane: a.Lane, Channel: a.Channel, Reason: a.Reason},
			{MessageID: "garbage-a", Reason: rabbitmq.ReasonMalformed},
		}
		wantEntries(t, e.list(t, keyA, ""), wantA)
		wantEntries(t, e.list(t, keyB, ""), nil)

		wantProblem(t, e.discard(t, keyA, "garbage-1", `{"reason": "not ours"}`), http.StatusNotFound)
		wantProblem(t, e.discard(t, keyB, a.MessageID, `{"reason": "not mine"}`), http.StatusNotFound)
		p := wantProblem(t, e.discard(t, keyA, a.MessageID, `{"reason": ""}`), http.StatusUnprocessableEntity)
		if p.Param != "reason" {
			t.Errorf("param %q, want reason", p.Param)
		}

		wantDiscarded(t, e.discard(t, keyA, a.MessageID, `{"reason": "kind retired"}`))
		e.wantDelivery(t, keyA, a.NotificationID, "SUPPRESSED", heraldtype.ReasonDiscarded)
		e.wantAudit(t, a.MessageID, store.ParkedDiscardEntry{
			Actor: "api:a", MessageID: a.MessageID, Tenant: "a", ParkedReason: heraldtype.ReasonUnknownKind, Reason: "kind retired",
		})
		wantEntries(t, e.list(t, keyA, ""), wantA[1:])
		wantProblem(t, e.discard(t, keyA, a.MessageID, `{"reason": "again"}`), http.StatusNotFound)
		wantProblem(t, e.do(t, http.MethodPost, "/v1/parked/"+a.MessageID+"/requeue", "Bearer "+keyA, ""), http.StatusNotFound)

		// The untenanted message is still parked, for the operator.
		ops, err := mq.List(context.Background(), parked.Untenanted(), 10)
		if err != nil || len(ops) != 1 || ops[0].MessageID != "garbage-1" {
			t.Fatalf("untenanted: %+v (%v), want garbage-1", ops, err)
		}
	})
}

// fakeParked holds parked entries per tenant, for the requeue endpoints.
// With failAfter > 0 a requeue fails after requeueing that many, and a
// discard fails after it recorded (a parked copy's ack lost).
type fakeParked struct {
	entries   []parked.Entry
	failAfter int
}

func (f *fakeParked) List(_ context.Context, s parked.Scope, limit int) ([]parked.Entry, error) {
	var out []parked.Entry
	for _, e := range f.entries {
		if s.Sees(e.Tenant) && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeParked) Requeue(_ context.Context, s parked.Scope, id string) (parked.Done, error) {
	done := parked.Done{}
	kept := f.entries[:0]
	var err error
	for _, e := range f.entries {
		if err == nil && s.Sees(e.Tenant) && (id == "" || e.MessageID == id) {
			if f.failAfter > 0 && done.Total() == f.failAfter {
				err = errors.New("fakeParked: the store went away")
			} else {
				done[e.Tenant]++
				continue
			}
		}
		kept = append(kept, e)
	}
	f.entries = kept
	if id != "" && len(done) == 0 && err == nil {
		return nil, parked.ErrNotFound
	}
	return done, err
}

func (f *fakeParked) Discard(_ context.Context, s parked.Scope, d parked.Discard) (parked.Done, error) {
	if f.failAfter == 0 {
		return nil, fmt.Errorf("fakeParked: discard is tested on the real services")
	}
	for _, e := range f.entries {
		if e.MessageID == d.MessageID && s.Sees(e.Tenant) {
			return parked.Done{e.Tenant: 1}, fmt.Errorf("%w: fakeParked: the ack was lost", parked.ErrCopyLeft)
		}
	}
	return nil, parked.ErrNotFound
}

func TestParkedRequeueIsTenantScoped(t *testing.T) {
	t.Parallel()
	f := &fakeParked{entries: []parked.Entry{
		{MessageID: "m1", Tenant: "a", Reason: "TEMPLATE_MISSING"},
		{MessageID: "m2", Tenant: "b", Reason: "UNKNOWN_KIND"},
		{MessageID: "m3", Reason: "MALFORMED_BODY"},
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
	// A body (a client that thought it could name ids) is refused, not
	// read as "all"; so is a listing parameter the route does not know.
	t.Run("ABodyOrAnUnknownParameterIsRefused", func(t *testing.T) {
		wantProblem(t, b.do(t, http.MethodPost, "/v1/parked/requeue", "Bearer "+keyA, `{"message_ids":["m1"]}`), http.StatusBadRequest)
		wantProblem(t, b.do(t, http.MethodGet, "/v1/parked?foo=1", "Bearer "+keyA, ""), http.StatusBadRequest)
		wantProblem(t, b.do(t, http.MethodPost, "/v1/parked/m1/requeue", "Bearer "+keyA, `{"all":true}`), http.StatusBadRequest)
		if len(f.entries) != 3 {
			t.Fatalf("left %d entries after the refusals, want 3", len(f.entries))
		}
	})
	t.Run("RequeueOfAnotherTenantsMessageIs404", func(t *testing.T) {
		wantProblem(t, b.do(t, http.MethodPost, "/v1/parked/m2/requeue", "Bearer "+keyA, ""), http.StatusNotFound)
		wantProblem(t, b.do(t, http.MethodPost, "/v1/parked/m3/requeue", "Bearer "+keyA, ""), http.StatusNotFound)
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
		// An empty object or null is no body: accepted.
		for _, body := range []string{`{}`, `null`} {
			if r := b.do(t, http.MethodPost, "/v1/parked/requeue", "Bearer "+keyA, body); r.status != http.StatusOK {
				t.Fatalf("requeue all with %s: %d %s, want 200", body, r.status, r.body)
			}
		}
	})
	if len(f.entries) != 1 || f.entries[0].MessageID != "m3" {
		t.Fatalf("left %+v, want only the untenanted m3", f.entries)
	}
}

// A requeue that fails after it moved some messages, and a discard whose
// record committed before removing its parked copy failed, answer 503 and
// are audited all the same, with what they did: the action took effect.
func TestAPartlyDoneParkedActionIsAudited(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	st := testdb.Open(t, "sqlite", clk).Store
	f := &fakeParked{failAfter: 2, entries: []parked.Entry{
		{MessageID: "m1", Tenant: "a"}, {MessageID: "m2", Tenant: "a"}, {MessageID: "m3", Tenant: "a"},
	}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(httpapi.New(httpapi.Config{
		Keys: auth.NewKeys(map[string]string{keyA: "a"}), Parked: f, Logger: logger,
		Audit: &audit.Log{Store: st, Logger: logger},
	}))
	defer srv.Close()
	b := &bundle{url: srv.URL, client: srv.Client()}

	r := b.do(t, http.MethodPost, "/v1/parked/requeue", "Bearer "+keyA, "")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "after 2 were requeued") {
		t.Fatalf("a requeue failing after 2: %d %s; want 503 naming the 2", r.status, r.body)
	}
	r = b.do(t, http.MethodPost, "/v1/parked/m3/discard", "Bearer "+keyA, `{"reason": "kind retired"}`)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "discard is recorded") {
		t.Fatalf("a discard whose copy stayed: %d %s; want 503 saying it is recorded", r.status, r.body)
	}
	entries, err := st.AuditList(context.Background(), store.AuditListParams{Tenant: "a"})
	if err != nil || len(entries) != 2 {
		t.Fatalf("audit entries %+v, %v; want the requeue's and the discard's", entries, err)
	}
	if e := entries[1]; e.Action != audit.ParkedRequeue || !strings.Contains(e.Detail, `"requeued":2`) || !strings.Contains(e.Detail, `"status":503`) {
		t.Errorf("requeue entry %+v %s; want parked.requeue with requeued 2 and status 503", e, e.Detail)
	}
	if e := entries[0]; e.Action != audit.ParkedDiscard || e.Target != "m3" || !strings.Contains(e.Detail, `"discarded":1`) {
		t.Errorf("discard entry %+v %s; want parked.discard of m3", e, e.Detail)
	}
}
