package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
)

// signalLog records the inbox signals a store hands its watchers:
// "tenant/recipient" per changed inbox, "missed" per InboxMissed.
type signalLog chan string

func watchSignals(t *testing.T, s *Store) signalLog {
	t.Helper()
	l := make(signalLog, 1000)
	t.Cleanup(s.InboxSignals().Watch(l))
	return l
}

func (l signalLog) InboxChanged(keys []store.InboxKey) {
	for _, k := range keys {
		l <- k.Tenant + "/" + k.Recipient
	}
}

func (l signalLog) InboxMissed() { l <- "missed" }

// connected waits until s's listener is connected and forgets the Missed
// it may have said when it connected: said before the watcher was added,
// it is not in the log, and after, it is.
func (l signalLog) connected(t *testing.T, s *Store) {
	t.Helper()
	waitFor(t, 10*time.Second, "the listener is connected", s.listening.Load)
	for {
		select {
		case got := <-l:
			if got != "missed" {
				t.Fatalf("signal %q before any change", got)
			}
		default:
			return
		}
	}
}

// expect waits for each of want, in any order, and fails on anything else.
func (l signalLog) expect(t *testing.T, what string, want ...string) {
	t.Helper()
	left := map[string]int{}
	for _, w := range want {
		left[w]++
	}
	deadline := time.After(10 * time.Second)
	for len(left) > 0 {
		select {
		case got := <-l:
			if left[got] == 0 {
				t.Fatalf("%s: signal %q, want %v", what, got, want)
			}
			if left[got]--; left[got] == 0 {
				delete(left, got)
			}
		case <-deadline:
			t.Fatalf("%s: after 10s still waiting for %v", what, left)
		}
	}
}

func key(tenant, recipient string) store.InboxKey {
	return store.InboxKey{Tenant: tenant, Recipient: recipient}
}

// TestInboxSignalsCrossStoresAndSurviveAListenerDrop: a change announced on
// one store reaches its own watchers at once and another store's through
// NOTIFY; when the other's listener drops, it says Missed after it
// reconnects (what was sent meanwhile is lost) and hears again.
func TestInboxSignalsCrossStoresAndSurviveAListenerDrop(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	appB := uniqueName("hb")
	a := setup(t, url, Options{})
	b := setup(t, appURL(url, appB), Options{})
	la, lb := watchSignals(t, a), watchSignals(t, b)
	la.connected(t, a)
	lb.connected(t, b)

	a.inboxChanged(key("t1", "r1"), key("t1", "r2"))
	la.expect(t, "a's own change", "t1/r1", "t1/r2")
	lb.expect(t, "a's change, heard by b", "t1/r1", "t1/r2")
	// A recipient id is the tenant's opaque string: any text travels.
	a.inboxChanged(key("t2", "user 7/ü\x1fx"))
	lb.expect(t, "an unusual recipient id", "t2/user 7/ü\x1fx")

	before := b.listenConns.Load()
	if n := testpg.TerminateBackends(t, appB+" listener"); n != 1 {
		t.Fatalf("terminated %d listener sessions, want 1", n)
	}
	waitFor(t, 10*time.Second, "b's listener reconnected", func() bool { return b.listenConns.Load() > before && b.listening.Load() })
	lb.expect(t, "b's listener reconnected", "missed")
	a.inboxChanged(key("t1", "r3"))
	lb.expect(t, "a change after b reconnected", "t1/r3")
	// b may hear the last one before a's flush counts it.
	waitFor(t, 10*time.Second, "a sent 4 inbox NOTIFYs", func() bool { return a.inboxNotify.sent.Load() == 4 })
}

// TestInboxSignalTooLongForAPayloadSaysMissed: a key PostgreSQL cannot carry
// in one payload makes the other processes re-read everything instead of
// failing the flush.
func TestInboxSignalTooLongForAPayloadSaysMissed(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	a := setup(t, url, Options{})
	b := setup(t, url, Options{})
	lb := watchSignals(t, b)
	lb.connected(t, b)
	a.inboxChanged(key("t1", strings.Repeat("r", inboxPayloadMax)))
	lb.expect(t, "a payload too long", "missed")
	a.inboxChanged(key("t1", "r1"))
	lb.expect(t, "the next change", "t1/r1")
}

// TestInboxChannelInSQL: a statement on a caller's connection names the
// same channel in SQL (qInboxChannel) as the store does in Go, so its
// pg_notify, delivered at the caller's commit, reaches every store; stores
// in other schemas have channels of their own.
func TestInboxChannelInSQL(t *testing.T) {
	t.Parallel()
	url := testpg.Schema(t)
	a, b := setup(t, url, Options{}), setup(t, url, Options{})
	lb := watchSignals(t, b)
	lb.connected(t, b)
	var name string
	if err := a.pool.QueryRow(context.Background(), `SELECT `+qInboxChannel).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != a.inboxChannel {
		t.Fatalf("SQL names the inbox channel %q, Go %q", name, a.inboxChannel)
	}
	if _, err := a.pool.Exec(context.Background(), `SELECT pg_notify(`+qInboxChannel+`, $1::text || chr(31) || $2::text)`, "t9", "r9"); err != nil {
		t.Fatal(err)
	}
	lb.expect(t, "a NOTIFY sent in SQL", "t9/r9")

	other := setup(t, testpg.Schema(t), Options{})
	if other.inboxChannel == a.inboxChannel {
		t.Errorf("two schemas share the inbox channel %q", a.inboxChannel)
	}
	for _, ch := range a.channels {
		if ch == a.inboxChannel {
			t.Errorf("the inbox channel %q is a wake-up channel too", ch)
		}
	}
	if len(a.inboxChannel) > 63 || a.inboxChannel != strings.ToLower(a.inboxChannel) {
		t.Errorf("channel %q is not a short lower-case identifier", a.inboxChannel)
	}
}

// TestInboxPayloadsPackAndRoundTrip: many inboxes travel in few payloads,
// each within PostgreSQL's limit, and read back as the same set; one alone
// keeps the short form that a statement's pg_notify sends; a key too long
// for any payload is reported instead of breaking the others.
func TestInboxPayloadsPackAndRoundTrip(t *testing.T) {
	t.Parallel()
	var keys []store.InboxKey
	for i := range 2000 {
		keys = append(keys, key(fmt.Sprintf("tenant-%d", i%3), fmt.Sprintf("user \"%d\"/ü\x1f\x1e", i)))
	}
	long := key("t", strings.Repeat("r", inboxPayloadMax))
	payloads, tooLong := inboxPayloads(append(keys, long))
	if !tooLong {
		t.Error("a key longer than a payload was not reported")
	}
	if len(payloads) > 20 {
		t.Errorf("%d payloads for %d inboxes, want them packed", len(payloads), len(keys))
	}
	var got []store.InboxKey
	for _, p := range payloads {
		if len(p) > inboxPayloadMax {
			t.Fatalf("a payload of %d bytes", len(p))
		}
		k, ok := decodeInboxPayload(p)
		if !ok {
			t.Fatalf("payload %.40q… does not decode", p)
		}
		got = append(got, k...)
	}
	if fmt.Sprint(got) != fmt.Sprint(keys) {
		t.Fatalf("read back %d inboxes, want the %d sent in order", len(got), len(keys))
	}
	one, _ := inboxPayloads(keys[:1])
	if want := keys[0].Tenant + "\x1f" + keys[0].Recipient; len(one) != 1 || one[0] != want {
		t.Errorf("one inbox: %q, want %q", one, want)
	}
	for _, bad := range []string{"", "\x1e", "\x1e[]", "\x1e{", "no separator"} {
		if k, ok := decodeInboxPayload(bad); ok {
			t.Errorf("payload %q read as %v, want any inbox", bad, k)
		}
	}
}
