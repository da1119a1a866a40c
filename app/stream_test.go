package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/ssetest"
	"github.com/heraldhq/herald/internal/testenv"
)

// mintToken mints a recipient token through herald's API.
func mintToken(t *testing.T, base, recipient string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/recipients/"+recipient+"/tokens", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusCreated || body.Token == "" {
		t.Fatalf("mint: %s %v", resp.Status, err)
	}
	return body.Token
}

// postShipped posts the development config's inbox kind to recipient and
// returns the notification's id.
func postShipped(t *testing.T, base, recipient, key string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/notifications", strings.NewReader(`{"recipient":"`+recipient+
		`","event_id":"`+key+`","kind":"order.shipped","params":{"item":"Desk lamp","tracking":"1Z999"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %s %v", resp.Status, err)
	}
	return body.ID
}

// TestShutdownEndsOpenStreams: an item accepted by intake reaches an open
// stream, and herald's graceful stop ends the streams at once instead of
// waiting out shutdown_timeout for them.
func TestShutdownEndsOpenStreams(t *testing.T) {
	t.Parallel()
	const drain = 20 * time.Second
	cfg := testConfig(t, "", func(c *config.Config) { c.ShutdownTimeout = config.Duration(drain) })
	a, base := newHerald(t, cfg, app.Options{})
	stop := runHerald(t, a)
	token := mintToken(t, base, "alice")
	streams := []*ssetest.Client{ssetest.Open(t, base+"/v1/me/stream", token), ssetest.Open(t, base+"/v1/me/stream", token)}
	for _, s := range streams {
		s.WantBadge(t, 0)
	}
	id := postShipped(t, base, "alice", "ship-1")
	for _, s := range streams {
		if _, it := s.Item(t); it.NotificationID != id || it.Title != "Your order has shipped" {
			t.Fatalf("item %+v, want the notification %s", it, id)
		}
		s.WantBadge(t, 1)
	}
	began := time.Now()
	stop()
	took := time.Since(began)
	for _, s := range streams {
		s.Ended(t)
	}
	if took > drain/2 {
		t.Fatalf("herald took %s to stop with two streams open (shutdown_timeout %s): the streams held the drain", took, drain)
	}
	t.Logf("stopped in %s with two streams open", took.Round(time.Millisecond))
}
