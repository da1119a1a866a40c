package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testapp"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// TestExample runs the example as the README tells a user to: herald from
// herald.yaml (whose kinds come from kinds.yaml) on a fresh PostgreSQL
// schema, then the clinic, whose client reads the same kinds.yaml. herald
// sends the confirmation, keeps the reminder SCHEDULED, and shows both to
// the tenant's API key from herald.yaml; a second run adds nothing.
func TestExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testpg.Schema(t)
	cfg, err := config.Load("herald.yaml", func(k string) string {
		if k == config.EnvDatabase {
			return url
		}
		return ""
	})
	if err != nil {
		t.Fatalf("herald.yaml: %v", err)
	}
	kinds, err := config.LoadKinds("kinds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Kinds) != 2 || len(kinds) != 2 || cfg.Kinds[0].Name != kinds[0].Name || cfg.Kinds[1].Name != kinds[1].Name {
		t.Fatalf("herald serves %+v, the clinic's file has %+v", cfg.Kinds, kinds)
	}
	h, base := testapp.Start(t, cfg)

	var out bytes.Buffer
	for range 2 {
		if err := run(ctx, url, &out); err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	if got := strings.Count(out.String(), "booking-42 confirmed: herald sends its confirmation now and a reminder on "); got != 2 {
		t.Fatalf("output %q, want two confirmations", out.String())
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT kind, id FROM notifications WHERE event_id = 'booking-42'`)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	var kind, id string
	if _, err := pgx.ForEachRow(rows, []any{&kind, &id}, func() error { ids[kind] = id; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids["booking.confirmed"] == "" || ids["booking.reminder"] == "" {
		t.Fatalf("notifications of booking-42 after two runs: %v, want one confirmation and one reminder", ids)
	}

	key := cfg.APIKeys[0].Key
	state := func(id string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/notifications/"+id, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := testenv.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Deliveries []struct{ State string } `json:"deliveries"`
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s with tenant clinic-7's key: %s", id, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		if len(v.Deliveries) != 1 {
			t.Fatalf("%s has deliveries %+v, want one", id, v.Deliveries)
		}
		return v.Deliveries[0].State
	}
	for deadline := time.Now().Add(30 * time.Second); state(ids["booking.confirmed"]) != "PROVIDER_ACCEPTED"; {
		if time.Now().After(deadline) {
			t.Fatalf("the confirmation is %s after 30 s, want PROVIDER_ACCEPTED", state(ids["booking.confirmed"]))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := state(ids["booking.reminder"]); got != "SCHEDULED" {
		t.Errorf("the reminder is %s, want SCHEDULED", got)
	}
	if n := h.Sim("clinic-hooks").Total(); n != 1 {
		t.Errorf("%d provider calls, want 1", n)
	}
}

// TestRunWithoutDatabaseSaysWhatToSet: go run . without HERALD_DATABASE.
func TestRunWithoutDatabaseSaysWhatToSet(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), "", io.Discard)
	if err == nil || !strings.Contains(err.Error(), "HERALD_DATABASE") {
		t.Fatalf("run = %v, want it to name HERALD_DATABASE", err)
	}
}
