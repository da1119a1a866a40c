package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/ssetest"
	"github.com/heraldhq/herald/internal/testpg"
)

// streamConfig is a herald on database with an inbox kind, note.posted,
// and recipient token keys for its tenant. Streams read again on their own
// only every hour, so within the test only a signal (NOTIFY between
// processes) brings an item.
func streamConfig(t *testing.T, addr, database string) string {
	path := filepath.Join(t.TempDir(), "herald.yaml")
	writeFile(t, path, fmt.Sprintf(`listen: %s
database: %s
api_keys:
  - {key: stream-key, tenant: acme}
recipient_tokens:
  keys:
    acme:
      - {id: k1, secret: "e2e-stream-test-secret-0123456789abcdef"}
kinds:
  - name: note.posted
    category: transactional
    channels: [inbox]
    templates:
      inbox: {title: "Note {{.n}}", body: "Body of note {{.n}}"}
inbox:
  stream_resync: 1h
poll_interval: 100ms
`, addr, database))
	return path
}

// mint mints a recipient token through c's herald.
func (c *client) mint(t *testing.T, recipient string) string {
	t.Helper()
	code, out := apiDo(t, http.MethodPost, c.ep.get(), c.key, "/v1/recipients/"+recipient+"/tokens", "", []byte(`{}`))
	var body struct{ Token string }
	if err := json.Unmarshal(out, &body); err != nil || code != http.StatusCreated {
		t.Fatalf("mint on %s: %d %s %v", c.base(), code, out, err)
	}
	return body.Token
}

// TestStreamAcrossProcesses runs two herald processes on one PostgreSQL
// database. An item accepted by process 1's intake reaches a stream held
// on process 2 (LISTEN/NOTIFY between them); a stream dropped on process 2
// and resumed on process 1 with Last-Event-ID gets exactly the items
// accepted in between, through either process, then live ones.
func TestStreamAcrossProcesses(t *testing.T) {
	skipShort(t, "multi-process test")
	t.Parallel()
	dbURL := testpg.Database(t)
	servers := make([]*server, 2)
	clients := make([]*client, 2)
	for i := range servers {
		addr := freeAddr(t)
		servers[i] = newServer(t, streamConfig(t, addr, dbURL), addr)
		servers[i].start() // one at a time: the first applies the migrations
		clients[i] = servers[i].client("stream-key")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := 0
	post := func(c *client, recipient string) string {
		t.Helper()
		n++
		id, err := c.post(ctx, "note-"+strconv.Itoa(n), map[string]any{
			"recipient": recipient, "event_id": "note-" + strconv.Itoa(n), "kind": "note.posted", "params": map[string]any{"n": n},
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	url := func(c *client) string { return c.base() + "/v1/me/stream" }
	token := clients[1].mint(t, "alice")
	// A token minted by one process verifies on the other: same keys.
	bob := ssetest.Open(t, url(clients[1]), clients[0].mint(t, "bob"))
	bob.WantBadge(t, 0)

	s2 := ssetest.Open(t, url(clients[1]), token)
	s2.WantBadge(t, 0)
	began := time.Now()
	id := post(clients[0], "alice")
	seq, it := s2.Item(t)
	t.Logf("an item accepted by process 1 reached the stream on process 2 in %s", time.Since(began).Round(time.Millisecond))
	if seq != 1 || it.NotificationID != id || it.Title != "Note 1" {
		t.Fatalf("item %d %+v, want seq 1 of %s", seq, it, id)
	}
	s2.WantBadge(t, 1)

	// Dropped on process 2 after seq 1; three items arrive meanwhile,
	// through both processes; resumed on process 1.
	s2.Close()
	missed := []string{post(clients[1], "alice"), post(clients[0], "alice"), post(clients[1], "alice")}
	s1 := ssetest.Open(t, url(clients[0]), token, "Last-Event-ID", "1")
	for i, want := range missed {
		seq, it := s1.Item(t)
		if seq != int64(i+2) || it.NotificationID != want {
			t.Fatalf("replayed item %d: seq %d of %s, want seq %d of %s", i+1, seq, it.NotificationID, i+2, want)
		}
	}
	s1.WantBadge(t, 4)
	// Live on process 1 from process 2's intake.
	id = post(clients[1], "alice")
	if seq, it := s1.Item(t); seq != 5 || it.NotificationID != id {
		t.Fatalf("live item: seq %d of %s, want seq 5 of %s", seq, it.NotificationID, id)
	}
	s1.WantBadge(t, 5)
	// Bob, on process 2 all along, saw none of alice's items; his own
	// arrives.
	id = post(clients[0], "bob")
	if seq, it := bob.Item(t); seq != 1 || it.NotificationID != id {
		t.Fatalf("bob's stream: seq %d of %s, want seq 1 of %s", seq, it.NotificationID, id)
	}
	for _, s := range servers {
		if code := s.stop(30 * time.Second); code != 0 {
			t.Fatalf("herald exited with %d on SIGTERM with streams open:\n%s", code, s.tail())
		}
	}
	s1.Ended(t)
	bob.Ended(t)
}
