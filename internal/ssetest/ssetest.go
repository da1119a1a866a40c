// Package ssetest reads a Server-Sent Events stream (GET /v1/me/stream) in
// tests: the stream tests, the app's and the e2e tests. (The stream
// benchmark's clients read raw connections of their own, to measure
// thousands of streams at a few KiB each.)
package ssetest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
)

// Event is one event, or a comment line (Comment set, the rest empty).
type Event struct {
	ID, Name, Data, Comment string
}

// Client is an open stream read line by line.
type Client struct {
	Resp   *http.Response
	cancel context.CancelFunc
	events chan Event
}

// Get requests url with the bearer token and headers (name, value, …) and
// returns the response, its body unread, and what cancels the request.
func Get(t testing.TB, url, token string, headers ...string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp, cancel
}

// Open opens the stream at url (as Get) and fails the test unless it is a
// 200 event stream with the stream's headers. It is closed when the test
// ends.
func Open(t testing.TB, url, token string, headers ...string) *Client {
	t.Helper()
	resp, cancel := Get(t, url, token, headers...)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("stream: %s %s", resp.Status, b)
	}
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	c := &Client{Resp: resp, cancel: cancel, events: make(chan Event, 1000)}
	go c.read()
	t.Cleanup(c.Close)
	return c
}

// Close drops the connection.
func (c *Client) Close() {
	c.cancel()
	c.Resp.Body.Close()
}

// read parses the body into events until it ends, then closes events.
func (c *Client) read() {
	defer close(c.events)
	sc := bufio.NewScanner(c.Resp.Body)
	var ev Event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev != (Event{}) {
				c.events <- ev
			}
			ev = Event{}
		case strings.HasPrefix(line, ":"):
			ev.Comment = strings.TrimSpace(line[1:])
		default:
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "id":
				ev.ID = v
			case "event":
				ev.Name = v
			case "data":
				ev.Data = v
			}
		}
	}
}

// Recv returns the next event or comment, false once the stream ended; it
// fails the test after testenv.Patience, saying it waited for what.
func (c *Client) Recv(t testing.TB, what string) (Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		return ev, ok
	case <-time.After(testenv.Patience):
		t.Fatalf("timed out after %s waiting for %s", testenv.Patience, what)
		panic("unreachable")
	}
}

// Next returns the next event that is not a comment.
func (c *Client) Next(t testing.TB) Event {
	t.Helper()
	for {
		ev, ok := c.Recv(t, "an event")
		if !ok {
			t.Fatal("the stream ended")
		}
		if ev.Comment == "" {
			return ev
		}
	}
}

// Ended waits for the stream to end, whatever comes before it (events,
// heartbeats), for testenv.Patience at most, and returns the last thing
// that came.
func (c *Client) Ended(t testing.TB) Event {
	t.Helper()
	var last Event
	deadline := time.After(testenv.Patience)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				return last
			}
			last = ev
		case <-deadline:
			t.Fatalf("the stream did not end within %s", testenv.Patience)
		}
	}
}

// Item is an item event's data.
type Item struct {
	ID, NotificationID, Kind, Title, Body string
	CreatedAt                             time.Time
	ReadAt, ArchivedAt                    any
}

// itemKeys are the keys of an item event's data, exactly.
const itemKeys = "archived_at body created_at id kind notification_id read_at title"

// Item returns the next event, which must be an item with exactly a feed
// item's keys, and its id (the item's seq).
func (c *Client) Item(t testing.TB) (seq int64, it Item) {
	t.Helper()
	ev := c.Next(t)
	if ev.Name != "item" {
		t.Fatalf("got event %q (%s), want an item", ev.Name, ev.Data)
	}
	seq, err := strconv.ParseInt(ev.ID, 10, 64)
	if err != nil {
		t.Fatalf("item id %q: %v", ev.ID, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
		t.Fatalf("item data %s: %v", ev.Data, err)
	}
	if keys := slices.Sorted(maps.Keys(m)); strings.Join(keys, " ") != itemKeys {
		t.Fatalf("item data has keys %v, want %s", keys, itemKeys)
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	created, err := time.Parse(time.RFC3339Nano, str("created_at"))
	if err != nil {
		t.Fatalf("created_at %q: %v", str("created_at"), err)
	}
	return seq, Item{ID: str("id"), NotificationID: str("notification_id"), Kind: str("kind"), Title: str("title"),
		Body: str("body"), CreatedAt: created, ReadAt: m["read_at"], ArchivedAt: m["archived_at"]}
}

// Badge returns the next event, which must be a badge, and its id.
func (c *Client) Badge(t testing.TB) (unread int64, id string) {
	t.Helper()
	ev := c.Next(t)
	if ev.Name != "badge" {
		t.Fatalf("got event %q (%s), want a badge", ev.Name, ev.Data)
	}
	var b struct {
		Unread *int64 `json:"unread_count"`
	}
	if err := json.Unmarshal([]byte(ev.Data), &b); err != nil || b.Unread == nil {
		t.Fatalf("badge data %s: %v", ev.Data, err)
	}
	return *b.Unread, ev.ID
}

// WantBadge reads the next event, which must be a badge of unread.
func (c *Client) WantBadge(t testing.TB, unread int64) {
	t.Helper()
	if got, _ := c.Badge(t); got != unread {
		t.Fatalf("badge %d, want %d", got, unread)
	}
}
