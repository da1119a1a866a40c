package intake_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzPostNotification drives POST /v1/notifications through the real router
// and handler on a real SQLite store, with any body and Idempotency-Key.
// Whatever the input, nothing panics and nothing is a 5xx: the answer is a
// 202 or a 4xx application/problem+json whose status field is the status. A
// refused request writes no notification; a 202 wrote one (or replayed
// one), reads back with GET, and replays itself under the same key.
// Seeds: testdata/fuzz/FuzzPostNotification.
func FuzzPostNotification(f *testing.F) {
	f.Add("k-1", []byte(payment))
	f.Add("k-2", []byte(`{"recipient":"user-1",`))
	b := setup(f)
	h := b.app.Handler()
	db, err := sql.Open("sqlite", "file:"+b.dbPath+"?mode=ro")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	count := func(t *testing.T) int {
		t.Helper()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM notifications`).Scan(&n); err != nil {
			t.Fatalf("count notifications: %v", err)
		}
		return n
	}
	post := func(key string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/notifications", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keyA)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	f.Fuzz(func(t *testing.T, key string, body []byte) {
		before := count(t)
		r := post(key, body)
		written := count(t) - before
		switch r.Code {
		case http.StatusAccepted:
		case http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			wantProblem(t, response{status: r.Code, header: r.Header(), body: r.Body.Bytes()}, r.Code)
			if written != 0 {
				t.Fatalf("a %d wrote %d notifications", r.Code, written)
			}
			return
		default:
			t.Fatalf("status %d for key %q body %q: want 202, 400, 409, 413 or 422; body %s", r.Code, key, body, r.Body)
		}
		replayed := r.Header().Get("Idempotent-Replayed") == "true"
		if want := map[bool]int{false: 1, true: 0}[replayed]; written != want {
			t.Fatalf("a 202 (replayed %v) wrote %d notifications, want %d", replayed, written, want)
		}
		var a struct {
			ID string `json:"id"`
		}
		if ct := r.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("202 with Content-Type %q", ct)
		}
		if err := json.Unmarshal(r.Body.Bytes(), &a); err != nil || a.ID == "" {
			t.Fatalf("202 body %s has no id (%v)", r.Body, err)
		}
		get := httptest.NewRequest(http.MethodGet, "/v1/notifications/"+a.ID, nil)
		get.Header.Set("Authorization", "Bearer "+keyA)
		g := httptest.NewRecorder()
		h.ServeHTTP(g, get)
		if g.Code != http.StatusOK {
			t.Fatalf("GET after 202: %d %s", g.Code, g.Body)
		}
		again := post(key, body)
		if again.Code != http.StatusAccepted || !bytes.Equal(again.Body.Bytes(), r.Body.Bytes()) || again.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the same request again: %d %s (replayed %q), want the first 202 %s replayed",
				again.Code, again.Body, again.Header().Get("Idempotent-Replayed"), r.Body)
		}
	})
}
