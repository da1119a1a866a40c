package intake_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/intake"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/store"
)

// waitingStore's create waits until the request's context ends and fails
// as a database driver does then.
type waitingStore struct {
	store.Notifications
	writing chan struct{}
}

func (s waitingStore) NotificationCreate(ctx context.Context, _ store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	close(s.writing)
	<-ctx.Done()
	return store.NotificationCreateResult{}, ctx.Err()
}

// A client that goes away while its notification is being written is not
// a store outage: no 503 is counted (an operator alerts on those) and no
// error line is logged; the request is counted 499.
func TestAClientGoneDuringTheWriteIsNotAnOutage(t *testing.T) {
	t.Parallel()
	cat, err := catalog.New(config.Dev().Kinds)
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.Buffer
	m := metrics.New(nil)
	st := waitingStore{writing: make(chan struct{})}
	h := m.CountIntake(&intake.Handler{Store: st, Catalog: cat, Clock: clock.Real{}, IdempotencyTTL: time.Hour, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	ctx, cancel := context.WithCancel(auth.WithTenant(context.Background(), "t1"))
	body := `{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":12000,"merchant":"Cafe Mori"}}`
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/notifications", bytes.NewBufferString(body))
	req.Header.Set("Idempotency-Key", "k-1")
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { defer close(done); h.ServeHTTP(rec, req) }()
	select {
	case <-st.writing:
	case <-done:
		t.Fatalf("answered %d %s before writing", rec.Code, rec.Body)
	}
	cancel()
	<-done
	if rec.Code != intake.StatusClientClosed {
		t.Fatalf("status %d, want %d", rec.Code, intake.StatusClientClosed)
	}
	codes := metricstest.Series(t, m, "herald_intake_responses_total", "code")
	if codes["503"] != 0 || codes["499"] != 1 {
		t.Fatalf("intake responses %v, want one 499 and no 503", codes)
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Fatalf("logged an error for a client gone:\n%s", log.String())
	}
}
