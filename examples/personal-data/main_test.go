package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store/sqlite"
)

// TestExample runs the example as docs/personal-data.md shows it, with a
// fresh key: the notification's params are stored sealed under k1 (the
// name appears nowhere in the row), and the same key opens them. Without
// the key it refuses, and writes nothing.
func TestExample(t *testing.T) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HERALD_PD_K1", base64.StdEncoding.EncodeToString(secret))
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herald.db")
	var out bytes.Buffer
	if err := run(ctx, path, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "enqueued ntf_") {
		t.Fatalf("output %q, want the notification's id", out.String())
	}

	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var params string
	if err := db.QueryRowContext(ctx, `SELECT params FROM notifications WHERE tenant = 'clinic-7' AND event_id = 'booking-42'`).Scan(&params); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(params, "Kim") || strings.Contains(params, "May 1") {
		t.Fatalf("params stored in the clear: %s", params)
	}
	if id := seal.JSONKeyID(json.RawMessage(params)); id != "k1" {
		t.Fatalf("params sealed under key %q, want k1: %s", id, params)
	}
	ring, err := seal.New([]seal.Key{{ID: "k1", Secret: []byte(base64.StdEncoding.EncodeToString(secret))}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := ring.OpenJSON("clinic-7", json.RawMessage(params))
	if err != nil {
		t.Fatalf("the key does not open the params: %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(plain, &got); err != nil || got["name"] != "Kim Minji" {
		t.Fatalf("opened params %s (%v), want the name back", plain, err)
	}

	t.Setenv("HERALD_PD_K1", "")
	other := filepath.Join(t.TempDir(), "herald.db")
	if err := run(ctx, other, &out); err == nil || !strings.Contains(err.Error(), "HERALD_PD_K1") {
		t.Fatalf("run without the key = %v, want an error naming HERALD_PD_K1", err)
	}
}
