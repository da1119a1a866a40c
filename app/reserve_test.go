package app_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
)

// lanes.<lane>.reserve reaches the lane's claimer: with three slots and
// one reserved, the dev tenant's sends, hanging at the provider, hold two,
// and another tenant's send goes out beside them.
func TestLaneReserveFromConfigKeepsASlotForAnotherTenant(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	var hanging atomic.Int64
	s := sim.New(sim.Config{})
	sentB := make(chan struct{}, 1)
	s.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
		if m.Tenant == "tenant-b" {
			sentB <- struct{}{}
			return provider.Outcome{}
		}
		hanging.Add(1)
		<-release
		return provider.Outcome{}
	})
	one := 1
	cfg := testConfig(t, "", func(c *config.Config) {
		c.Lanes = map[string]config.Lane{"transactional": {Concurrency: 3, Reserve: &one}}
		c.APIKeys = append(c.APIKeys, config.APIKey{Key: "key-b", Tenant: "tenant-b"})
		c.Kinds = append(c.Kinds, config.Kind{Name: "receipt", Category: "transactional", Channels: []string{"webhook"},
			Templates: map[string]config.Template{"webhook": {Title: "Receipt", Body: "Paid {{.amount}}"}}})
	})
	a, base := newHerald(t, cfg, app.Options{Providers: map[string]provider.Provider{"sim-webhook": s}})
	runHerald(t, a)
	post := func(key, event string) {
		t.Helper()
		body := fmt.Sprintf(`{"recipient":"u1","event_id":%q,"kind":"receipt","params":{"amount":"1"}}`, event)
		if got, b := call(t, base, "POST", "/v1/notifications", key, body); got != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s", event, got, b)
		}
	}
	for i := range 5 {
		post(config.DevAPIKey, fmt.Sprint("a", i))
	}
	testenv.WaitFor(t, "two of the dev tenant's sends to hang at the provider", testenv.Patience, func() bool { return hanging.Load() >= 2 })
	post("key-b", "b1")
	testenv.Recv(t, sentB, "tenant B's send beside the dev tenant's")
	if n := hanging.Load(); n != 2 {
		t.Fatalf("the dev tenant has %d sends at the provider; want 2 (3 slots, 1 reserved)", n)
	}
}
