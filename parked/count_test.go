package parked_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/httpapi"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// counting is the server's parked API over a store whose parked writes are
// counted (parked.Counted), with the store and the metrics at hand.
type counting struct {
	ctx    context.Context
	clk    *clock.Fake
	st     store.Store
	counts store.Store // st, counted
	m      *metrics.Metrics
	url    string
	client *http.Client
}

// onEachStore runs test on SQLite and on PostgreSQL.
func onEachStore(t *testing.T, test func(t *testing.T, c *counting)) {
	t.Helper()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			test(t, setupCounting(t, driver))
		})
	}
}

func setupCounting(t *testing.T, driver string) *counting {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2030, 3, 14, 9, 0, 0, 0, time.UTC))
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	var st store.Store
	var err error
	switch driver {
	case "sqlite":
		st, err = sqlite.Open(ctx, testsqlite.Path(t), sqlite.Options{Clock: clk})
	case "postgres":
		st, err = postgres.Open(ctx, testpg.Schema(t), postgres.Options{Clock: clk, Logger: logger})
	}
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	c := &counting{ctx: ctx, clk: clk, st: st, m: metrics.New(nil)}
	c.counts = parked.Counted(st, c.m, logger)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{
		Keys:   auth.NewKeys(map[string]string{"key-a": "a", "key-b": "b"}),
		Parked: parked.DB{Store: c.counts},
		Store:  st,
		Logger: logger,
	}))
	t.Cleanup(srv.Close)
	c.url, c.client = srv.URL, srv.Client()
	c.client.Timeout = time.Minute // a hung request fails its test
	return c
}

// park accepts tenant's notification id on one channel and parks its
// delivery as the db transport does (the sender's decision, then the
// claimer's DONE), and returns its message id.
func (c *counting) park(t *testing.T, tenant, id string, lane heraldtype.Lane, ch heraldtype.Channel) string {
	t.Helper()
	res, err := c.st.NotificationCreate(c.ctx, store.NotificationCreateParams{
		Tenant: tenant, ID: id, Recipient: "user-1", EventID: "evt-" + id, Kind: "payment.approved",
		Lane: lane, Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{ch},
	})
	if err != nil || res.Outcome != store.Created {
		t.Fatalf("create %s: %+v (%v)", id, res, err)
	}
	rows, err := c.st.OutboxClaim(c.ctx, store.OutboxClaimParams{Lane: lane, Owner: "w", Limit: 1, Lease: time.Minute})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim %s: %d rows (%v)", id, len(rows), err)
	}
	msg := store.MessageID(id, ch)
	ok, err := c.st.DeliveryDecide(c.ctx, store.DeliveryDecideParams{
		MessageID: msg, NotificationID: id, Tenant: tenant, Channel: ch, State: heraldtype.DeliveryParked, Reason: heraldtype.ReasonUnknownKind,
	})
	if err != nil || !ok {
		t.Fatalf("park %s: %v (%v)", msg, ok, err)
	}
	if ok, err := c.st.OutboxComplete(c.ctx, rows[0].Fence, heraldtype.OutboxDone, heraldtype.ReasonUnknownKind); err != nil || !ok {
		t.Fatalf("complete %s: %v (%v)", id, ok, err)
	}
	return msg
}

// post calls POST path as apiKey with body and checks the status.
func (c *counting) post(t *testing.T, apiKey, path, body string, want int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read the answer: %v", path, err)
	}
	if resp.StatusCode != want {
		t.Fatalf("POST %s = %d %s, want %d", path, resp.StatusCode, b, want)
	}
}

// wantCounts checks herald_deliveries_total, every series.
func (c *counting) wantCounts(t *testing.T, when string, want map[string]float64) {
	t.Helper()
	if got := metricstest.Deliveries(t, c.m); !maps.Equal(got, want) {
		t.Fatalf("%s: herald_deliveries_total is %v, want %v", when, got, want)
	}
}

// TestHTTPRequeueCountsRetryWait: each delivery an HTTP requeue turns
// RETRY_WAIT counts one RETRY_WAIT entry under its lane and channel, on
// both stores; a requeue that finds nothing parked (again, another
// tenant's) counts nothing.
func TestHTTPRequeueCountsRetryWait(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, c *counting) {
		one := c.park(t, "a", "ntf_1", heraldtype.LaneAlert, heraldtype.ChannelSMS)
		c.park(t, "a", "ntf_2", heraldtype.LaneTransactional, heraldtype.ChannelWebhook)
		c.park(t, "a", "ntf_3", heraldtype.LaneTransactional, heraldtype.ChannelWebhook)
		other := c.park(t, "b", "ntf_4", heraldtype.LaneTransactional, heraldtype.ChannelWebhook)

		c.post(t, "key-a", "/v1/parked/"+one+"/requeue", "", http.StatusOK)
		c.wantCounts(t, "one requeued", map[string]float64{"alert/sms/RETRY_WAIT": 1})
		c.post(t, "key-a", "/v1/parked/"+one+"/requeue", "", http.StatusNotFound)
		c.post(t, "key-a", "/v1/parked/"+other+"/requeue", "", http.StatusNotFound)
		c.wantCounts(t, "requeues that found nothing", map[string]float64{"alert/sms/RETRY_WAIT": 1})
		c.post(t, "key-a", "/v1/parked/requeue", "", http.StatusOK)
		c.wantCounts(t, "all of a's requeued", map[string]float64{"alert/sms/RETRY_WAIT": 1, "transactional/webhook/RETRY_WAIT": 2})
	})
}

// TestHTTPDiscardCountsSuppressed: an HTTP discard that ends a parked
// delivery SUPPRESSED(DISCARDED) counts one SUPPRESSED entry under its
// lane and channel, on both stores; a discard that finds nothing parked
// (again, another tenant's, one requeued first) counts nothing.
func TestHTTPDiscardCountsSuppressed(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, c *counting) {
		gone := c.park(t, "a", "ntf_1", heraldtype.LaneMarketing, heraldtype.ChannelPush)
		requeued := c.park(t, "a", "ntf_2", heraldtype.LaneTransactional, heraldtype.ChannelWebhook)
		const reason = `{"reason": "kind retired"}`

		c.post(t, "key-b", "/v1/parked/"+gone+"/discard", reason, http.StatusNotFound)
		c.wantCounts(t, "another tenant's discard", map[string]float64{})
		c.post(t, "key-a", "/v1/parked/"+gone+"/discard", reason, http.StatusOK)
		c.wantCounts(t, "discarded", map[string]float64{"marketing/push/SUPPRESSED": 1})
		c.post(t, "key-a", "/v1/parked/"+gone+"/discard", reason, http.StatusNotFound)
		c.post(t, "key-a", "/v1/parked/"+requeued+"/requeue", "", http.StatusOK)
		c.post(t, "key-a", "/v1/parked/"+requeued+"/discard", reason, http.StatusNotFound)
		c.wantCounts(t, "discards that found nothing", map[string]float64{
			"marketing/push/SUPPRESSED": 1, "transactional/webhook/RETRY_WAIT": 1,
		})
	})
}

// TestCountedBrokerWrites: the writes the rabbitmq transport's Parking
// makes through the same store count the same way: a discard of a parked
// copy counts SUPPRESSED only when it ended the delivery (not for a second
// copy's discard, nor for a body that names no notification), and a
// refused requeue that parks the delivery again counts PARKED.
func TestCountedBrokerWrites(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, c *counting) {
		copyOf := func(msg, id string) store.ParkedDiscardParams {
			return store.ParkedDiscardParams{Broker: true, Tenant: "a", MessageID: msg, NotificationID: id,
				Channel: heraldtype.ChannelWebhook, ParkedReason: heraldtype.ReasonUnknownKind, Reason: "poison", Actor: "api:a"}
		}
		gone := c.park(t, "a", "ntf_1", heraldtype.LaneTransactional, heraldtype.ChannelWebhook)
		for i, want := range []bool{true, false} {
			if res, err := c.counts.ParkedDiscard(c.ctx, copyOf(gone, "ntf_1")); err != nil || res.Discarded != want {
				ok := res.Discarded
				t.Fatalf("discard %d of a copy: %v (%v), want %v", i+1, ok, err, want)
			}
		}
		if res, err := c.counts.ParkedDiscard(c.ctx, store.ParkedDiscardParams{Broker: true, MessageID: "garbage-1",
			ParkedReason: "MALFORMED_BODY", Reason: "junk", Actor: "cli:ops"}); err != nil || res.Discarded {
			ok := res.Discarded
			t.Fatalf("discard of a body that is not a job: %v (%v), want false", ok, err)
		}
		c.wantCounts(t, "copies discarded", map[string]float64{"transactional/webhook/SUPPRESSED": 1})

		back := c.park(t, "a", "ntf_2", heraldtype.LaneAlert, heraldtype.ChannelSMS)
		if rows, err := c.counts.ParkedRequeue(c.ctx, store.ParkedRequeueParams{Tenant: "a", MessageID: back}); err != nil || len(rows) != 1 {
			t.Fatalf("requeue: %+v (%v)", rows, err)
		}
		for i, want := range []bool{true, false} {
			ok, err := c.counts.ParkedRestore(c.ctx, store.ParkedRestoreParams{MessageID: back, Reason: heraldtype.ReasonUnknownKind})
			if err != nil || ok != want {
				t.Fatalf("restore %d: %v (%v), want %v", i+1, ok, err, want)
			}
		}
		c.wantCounts(t, "requeue refused", map[string]float64{
			"transactional/webhook/SUPPRESSED": 1, "alert/sms/RETRY_WAIT": 1, "alert/sms/PARKED": 1,
		})
	})
}

// Counted with no metrics is the store itself: the CLI's.
func TestCountedWithoutMetricsIsTheStore(t *testing.T) {
	t.Parallel()
	st := setupCounting(t, "sqlite").st
	if got := parked.Counted(st, nil, nil); got != st {
		t.Fatalf("Counted(st, nil) = %T, want st itself", got)
	}
}
