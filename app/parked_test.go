package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// The server's parked service writes through a counting store: a discard
// over HTTP enters SUPPRESSED, and herald_deliveries_total says so.
func TestHTTPDiscardIsCounted(t *testing.T) {
	t.Parallel()
	var path string
	_, base := newApp(t, func(c *config.Config) { path = strings.TrimPrefix(c.Database, "sqlite:") })
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const id = "ntf_parked1"
	if _, err := s.NotificationCreate(ctx, store.NotificationCreateParams{Tenant: config.DevTenant, ID: id,
		Recipient: "r", EventID: "e", Kind: "payment.approved", Lane: heraldtype.LaneTransactional,
		Params: json.RawMessage(`{}`), DedupKey: "d", Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}}); err != nil {
		t.Fatal(err)
	}
	msg := store.MessageID(id, heraldtype.ChannelWebhook)
	if ok, err := s.DeliveryDecide(ctx, store.DeliveryDecideParams{MessageID: msg, NotificationID: id,
		Tenant: config.DevTenant, Channel: heraldtype.ChannelWebhook, State: heraldtype.DeliveryParked,
		Reason: heraldtype.ReasonUnknownKind}); err != nil || !ok {
		t.Fatalf("park: %v %v", ok, err)
	}

	c := &http.Client{Timeout: 30 * time.Second}
	req, err := http.NewRequest(http.MethodPost, base+"/v1/parked/"+msg+"/discard", strings.NewReader(`{"reason":"kind retired"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("discard: %d %s (%v)", resp.StatusCode, body, err)
	}

	resp, err = c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := `herald_deliveries_total{channel="webhook",lane="transactional",state="SUPPRESSED"} 1`
	if !strings.Contains(string(metrics), want) {
		t.Errorf("after an HTTP discard /metrics lacks %s", want)
	}
}
