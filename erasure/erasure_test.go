package erasure_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/erasure"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testdb"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// batches is a store.Erasure that answers a script of batches, recording
// the params it was called with; a batch with err fails.
type batches struct {
	script []store.RecipientEraseResult
	err    error
	failAt int
	calls  []store.RecipientEraseParams
}

func (b *batches) RecipientErase(_ context.Context, p store.RecipientEraseParams) (store.RecipientEraseResult, error) {
	b.calls = append(b.calls, p)
	n := len(b.calls)
	if b.err != nil && n == b.failAt {
		return store.RecipientEraseResult{}, b.err
	}
	return b.script[n-1], nil
}

func (b *batches) NotificationErased(context.Context, string) (bool, error) { return false, nil }

func pos(id string) *store.ListPosition {
	return &store.ListPosition{CreatedAt: time.Unix(1, 0), ID: id}
}

func TestEraseRunsBatchesUntilNothingIsLeftAndSumsThem(t *testing.T) {
	t.Parallel()
	send := func(id string) store.ErasedSend {
		return store.ErasedSend{MessageID: id, Lane: heraldtype.LaneTransactional, Channel: heraldtype.ChannelWebhook}
	}
	st := &batches{script: []store.RecipientEraseResult{
		{Profile: true, Devices: 2, Notifications: 2, InboxItems: 2, Suppressed: []store.ErasedSend{send("a")}, Next: pos("n2")},
		{Notifications: 2, InboxItems: 1, Next: pos("n4")},
		{Notifications: 1, Suppressed: []store.ErasedSend{send("b"), send("c")}},
	}}
	m := metrics.New(nil)
	sum, err := erasure.New(erasure.Config{Store: st, Batch: 2, Metrics: m, Logger: quiet}).Erase(context.Background(), "t1", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if want := (erasure.Summary{Profile: true, Devices: 2, Notifications: 5, InboxItems: 3, Suppressed: 3, Batches: 3}); sum != want {
		t.Errorf("summary %+v, want %+v", sum, want)
	}
	if len(st.calls) != 3 || st.calls[0].After != nil || st.calls[1].After.ID != "n2" || st.calls[2].After.ID != "n4" {
		t.Errorf("calls %+v: want the first without After, then each batch's Next", st.calls)
	}
	for _, c := range st.calls {
		if c.Tenant != "t1" || c.Recipient != "r1" || c.Limit != 2 {
			t.Errorf("call %+v, want t1's r1 with limit 2", c)
		}
	}
	if got := metricstest.Series(t, m, "herald_erasures_total", "result"); got["done"] != 1 || got["failed"] != 0 {
		t.Errorf("herald_erasures_total %v", got)
	}
	if got := metricstest.Series(t, m, "herald_erasure_suppressed_total")[""]; got != 3 {
		t.Errorf("herald_erasure_suppressed_total %v, want 3", got)
	}
	if got := metricstest.Deliveries(t, m)["transactional/webhook/SUPPRESSED"]; got != 3 {
		t.Errorf("herald_deliveries_total SUPPRESSED %v, want 3", got)
	}
}

func TestAFailedBatchStopsTheErasureAndSaysWhatWasErased(t *testing.T) {
	t.Parallel()
	down := errors.New("database down")
	st := &batches{script: []store.RecipientEraseResult{{Profile: true, Notifications: 2, Next: pos("n2")}}, err: down, failAt: 2}
	m := metrics.New(nil)
	sum, err := erasure.New(erasure.Config{Store: st, Batch: 2, Metrics: m, Logger: quiet}).Erase(context.Background(), "t1", "r1")
	if !errors.Is(err, down) {
		t.Fatalf("err %v, want the store's", err)
	}
	if !sum.Profile || sum.Notifications != 2 || sum.Batches != 1 {
		t.Errorf("summary %+v, want what the first batch erased", sum)
	}
	if got := metricstest.Series(t, m, "herald_erasures_total", "result"); got["done"] != 0 || got["failed"] != 1 {
		t.Errorf("herald_erasures_total %v", got)
	}
}

// TestMeasureErasure times the erasure of one recipient with many
// notifications and inbox items on both stores. It runs only with
// HERALD_MEASURE_ERASURE=N (the notifications; as many inbox items).
func TestMeasureErasure(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("HERALD_MEASURE_ERASURE"))
	if n <= 0 {
		t.Skip("set HERALD_MEASURE_ERASURE=N to measure")
	}
	ctx := context.Background()
	for _, driver := range testdb.Drivers {
		t.Run(driver, func(t *testing.T) {
			st := testdb.Open(t, driver, nil).Store
			start := time.Now()
			for i := range n {
				id := ids.New("ntf", clock.Real{}.Now())
				if _, err := st.NotificationCreate(ctx, store.NotificationCreateParams{
					Tenant: "t1", ID: id, Recipient: "r1", EventID: fmt.Sprint(i), Kind: "k", Lane: heraldtype.LaneTransactional,
					Params: json.RawMessage(`{"name":"Kim"}`), Channels: []heraldtype.Channel{heraldtype.ChannelInbox, heraldtype.ChannelWebhook},
					Inbox: []store.InboxText{{Title: "Hello Kim", Body: "Dear Kim"}},
				}); err != nil {
					t.Fatal(err)
				}
			}
			filled := time.Since(start)
			start = time.Now()
			sum, err := erasure.New(erasure.Config{Store: st, Logger: quiet}).Erase(ctx, "t1", "r1")
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			t.Logf("%s: %d notifications and items (filled in %s): erased %+v in %s, %s a batch", driver, n, filled.Round(time.Millisecond),
				sum, took.Round(time.Millisecond), (took / time.Duration(sum.Batches)).Round(time.Microsecond))
		})
	}
}
