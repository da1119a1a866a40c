package rabbitmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
)

// socket records each write(2) a coalescer makes; fail makes the next
// ones fail.
type socket struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	fail   error
	closed bool
}

func (s *socket) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return 0, s.fail
	}
	s.writes = append(s.writes, bytes.Clone(p))
	return len(p), nil
}

func (s *socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *socket) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes)
}

func (s *socket) joined() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(bytes.Join(s.writes, nil))
}

func write(t *testing.T, c *coalescer, s string) {
	t.Helper()
	if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
		t.Fatalf("Write(%q) = %d, %v", s, n, err)
	}
}

func TestAnUnheldSocketWritesThrough(t *testing.T) {
	s := &socket{}
	c := &coalescer{Conn: s}
	write(t, c, "a")
	write(t, c, "b")
	if s.count() != 2 || s.joined() != "ab" {
		t.Fatalf("writes %q, want two: a, b", s.writes)
	}
}

func TestAHeldSocketGathersUntilItsRelease(t *testing.T) {
	s := &socket{}
	c := &coalescer{Conn: s}
	c.hold()
	for _, p := range []string{"one ", "two ", "three"} {
		write(t, c, p)
	}
	if s.count() != 0 {
		t.Fatalf("held: %d writes reached the socket, want none before the release", s.count())
	}
	c.release()
	if s.count() != 1 || s.joined() != "one two three" {
		t.Fatalf("released: writes %q, want one: %q", s.writes, "one two three")
	}
	write(t, c, "after")
	if s.count() != 2 {
		t.Fatalf("after the release: %d writes, want the next one through", s.count())
	}
}

func TestEachReleaseWritesOutWhatNestedHoldsGathered(t *testing.T) {
	s := &socket{}
	c := &coalescer{Conn: s}
	c.hold() // one relay's batch
	write(t, c, "a1 ")
	c.hold() // another's, beside it
	write(t, c, "b1 ")
	c.release() // the second ends: both go, so the first's wait no longer
	if s.joined() != "a1 b1 " || s.count() != 1 {
		t.Fatalf("after the inner release: writes %q, want one: %q", s.writes, "a1 b1 ")
	}
	write(t, c, "a2")
	if s.count() != 1 {
		t.Fatal("the outer hold still holds: a write went through")
	}
	c.release()
	if s.joined() != "a1 b1 a2" || s.count() != 2 {
		t.Fatalf("after the outer release: writes %q", s.writes)
	}
}

func TestAHoldWritesOutPastItsBound(t *testing.T) {
	s := &socket{}
	c := &coalescer{Conn: s}
	c.hold()
	frame := string(bytes.Repeat([]byte{'x'}, 1000))
	frames := coalesceMax/len(frame) + 2 // the bound is passed at the one before last
	for range frames {
		write(t, c, frame)
	}
	if s.count() != 1 {
		t.Fatalf("%d writes after %d bytes held, want one at the bound (%d bytes)", s.count(), frames*len(frame), coalesceMax)
	}
	if c.release(); s.count() != 2 {
		t.Fatalf("released: %d writes, want the rest out", s.count())
	}
}

func TestAFailedGatheredWriteFailsTheNextAndClosesTheSocket(t *testing.T) {
	broken := errors.New("connection reset by peer")
	s := &socket{}
	c := &coalescer{Conn: s}
	c.hold()
	write(t, c, "reported written, not yet sent")
	s.fail = broken
	c.release()
	if !s.closed {
		t.Fatal("the socket is still open after a write failed: the library's reader would not notice")
	}
	for range 2 {
		if _, err := c.Write([]byte("heartbeat")); !errors.Is(err, broken) {
			t.Fatalf("Write after the failed release = %v, want %v", err, broken)
		}
	}
}

// The publisher holds its socket through a batch: the broker gets a batch
// in a few writes, not one a message, and every message is confirmed.
func TestThePublisherSendsABatchInAFewWrites(t *testing.T) {
	pub, out := connectedPublisher(t)
	const n = 500
	before := out.written()
	errs := pub.Publish(context.Background(), heraldtype.LaneTransactional, dispatch.LaneQueue, jobs(n)).Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	// JobMessage's frames are about 700 bytes: 500 of them in a few
	// coalesceMax writes; the confirms' own traffic adds none (the channel
	// only reads them).
	if w := out.written() - before; w > n/50 {
		t.Fatalf("%d writes for a batch of %d, want a few", w, n)
	}
}

// A batch larger than the channel's unconfirmed bound waits for confirms
// of its own first messages; those must have left the held socket first,
// even were the hold's own bound (lifted here) never reached.
func TestABatchPastTheConfirmBoundIsNotHeldBackFromItsOwnConfirms(t *testing.T) {
	bound := coalesceMax
	coalesceMax = 1 << 30
	t.Cleanup(func() { coalesceMax = bound })
	pub, _ := connectedPublisher(t)
	n := maxInFlight + 500
	done := make(chan []error, 1)
	go func() {
		done <- pub.Publish(context.Background(), heraldtype.LaneTransactional, dispatch.LaneQueue, jobs(n)).Wait()
	}()
	select {
	case errs := <-done:
		for i, err := range errs {
			if err != nil {
				t.Fatalf("message %d of %d: %v", i, n, err)
			}
		}
	case <-time.After(testenv.Patience):
		t.Fatalf("a batch of %d (bound %d) not confirmed after %s", n, maxInFlight, testenv.Patience)
	}
}

// connectedPublisher runs a publisher on a fresh vhost and returns it
// with its connection's socket.
func connectedPublisher(t *testing.T) (*Publisher, *coalescer) {
	t.Helper()
	pub := startPublisher(t, testmq.VHost(t))
	return pub, connected(t, pub).out
}

// startPublisher runs a publisher on url until the test ends.
func startPublisher(t *testing.T, url string) *Publisher {
	t.Helper()
	pub := NewPublisher(PublisherConfig{URL: url, Name: "test-coalesce", ConfirmTimeout: testenv.Patience, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(testenv.Start(t, pub.Run))
	return pub
}

// connected waits until pub is connected and returns its confirming
// channel.
func connected(t *testing.T, pub *Publisher) *confirmer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	if err := pub.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	return pub.cur
}

func jobs(n int) []heraldtype.Job {
	js := make([]heraldtype.Job, n)
	for i := range js {
		id := fmt.Sprintf("ntf_coalesce%06d", i)
		js[i] = heraldtype.Job{MessageID: id + ".webhook", NotificationID: id, Tenant: "t1", Recipient: "r", EventID: id,
			Kind: "k", Lane: heraldtype.LaneTransactional, Channel: "webhook"}
	}
	return js
}

// Messages gathered by a hold when the broker drops the connection never
// reached it: each settles as lost (the relay offers it again), none as
// confirmed or by a timeout, and the publisher comes back on a new
// connection whose batches are confirmed.
func TestGatheredMessagesOfADroppedConnectionSettleAsLost(t *testing.T) {
	url := testmq.VHost(t)
	pub := startPublisher(t, url)
	c := connected(t, pub)
	const n = 20
	b := newBatch(n, testenv.Patience)
	c.out.hold()
	for i, job := range jobs(n) {
		msg, err := JobMessage(job, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.publish(context.Background(), b, i, pub.cfg.Topology.Exchange(), pub.cfg.Topology.Key(heraldtype.LaneTransactional, dispatch.LaneQueue), msg); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	testmq.CloseConnections(t, url)
	select {
	case <-c.done: // the library saw the connection go
	case <-time.After(testenv.Patience):
		t.Fatalf("the publishing channel still open %s after its connection was closed", testenv.Patience)
	}
	c.out.release()
	for i, err := range b.Wait() {
		if !errors.Is(err, dispatch.ErrConnectionLost) {
			t.Fatalf("gathered message %d settled as %v, want %v", i, err, dispatch.ErrConnectionLost)
		}
	}
	// The session lets go of the dropped connection a moment after its
	// channel closed (its own select sees it): until then Ready still
	// answers with the old one.
	testenv.WaitFor(t, "the publisher on a new connection", testenv.Patience, func() bool { return connected(t, pub) != c })
	for i, err := range pub.Publish(context.Background(), heraldtype.LaneTransactional, dispatch.LaneQueue, jobs(n)).Wait() {
		if err != nil {
			t.Fatalf("after the reconnect, message %d: %v", i, err)
		}
	}
}
