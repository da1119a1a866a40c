package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/heraldhq/herald/internal/testenv"
)

// hangSink is a webhook receiver that holds the first call it gets until
// release is closed (or herald drops the connection) and answers every
// other call 200 at once. It records when each message was called.
type hangSink struct {
	mu      sync.Mutex
	calls   map[string][]time.Time
	first   chan string // the first call's message id
	release chan struct{}
}

func newHangSink(t *testing.T) (*hangSink, string) {
	k := &hangSink{calls: map[string][]time.Time{}, first: make(chan string, 1), release: make(chan struct{})}
	srv := httptest.NewServer(k)
	t.Cleanup(srv.Close)
	t.Cleanup(k.unblock) // runs before srv.Close: no handler is left waiting
	return k, srv.URL
}

func (k *hangSink) unblock() {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.release:
	default:
		close(k.release)
	}
}

func (k *hangSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		MessageID string `json:"message_id"`
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil || json.Unmarshal(raw, &body) != nil || body.MessageID == "" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	k.mu.Lock()
	isFirst := len(k.calls) == 0
	k.calls[body.MessageID] = append(k.calls[body.MessageID], time.Now())
	k.mu.Unlock()
	if isFirst {
		k.first <- body.MessageID
		select {
		case <-k.release:
		case <-r.Context().Done(): // herald gave up on the call, or died
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// called returns the times message id was called.
func (k *hangSink) called(id string) []time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]time.Time(nil), k.calls[id]...)
}

// total is the number of calls so far.
func (k *hangSink) total() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, c := range k.calls {
		n += len(c)
	}
	return n
}

// TestSIGTERM holds the README's shutdown promise ("SIGTERM stops accepting
// requests and claiming rows, lets in-flight provider calls finish and
// record, and exits 0 (within shutdown_timeout)") while a provider call is
// in flight: message A's call is held by the sink, and message B waits in
// the outbox behind it (the lane's concurrency is 1). After SIGTERM herald
// must refuse new requests (its listener closes), never call B, and exit
// within shutdown_timeout (plus 5 s for a loaded machine), having recorded
// A's outcome if the call ended in time. Restarted, it sends B once and
// never calls A again. Three ways A's call can go:
//   - Released: the provider answers 200 while herald drains; A is
//     PROVIDER_ACCEPTED, exit 0.
//   - TimesOut: the provider never answers, and the provider timeout (3 s)
//     ends the call before shutdown_timeout (20 s); A is UNKNOWN/TIMEOUT,
//     recorded before exit, exit 0.
//   - OutlastsShutdown: the provider never answers and its timeout (8 s) is
//     past shutdown_timeout (2 s): herald waits shutdown_timeout, then gives
//     up, says "drain timed out" and still exits 0, leaving A SENDING; restarted, the
//     stale sweep makes A UNKNOWN/STALE_CLAIM after stale_claim_after.
func TestSIGTERM(t *testing.T) {
	t.Parallel()
	const margin = 5 * time.Second
	for _, tc := range []struct {
		name                              string
		providerTimeout, shutdownTimeout  time.Duration
		release                           bool
		drainTimesOut                     bool
		stateAtExit, finalState, reasonAt string
	}{
		{name: "Released", providerTimeout: 10 * time.Second, shutdownTimeout: 20 * time.Second, release: true,
			stateAtExit: "PROVIDER_ACCEPTED", finalState: "PROVIDER_ACCEPTED"},
		{name: "TimesOut", providerTimeout: 3 * time.Second, shutdownTimeout: 20 * time.Second,
			stateAtExit: "UNKNOWN", finalState: "UNKNOWN", reasonAt: "TIMEOUT"},
		{name: "OutlastsShutdown", providerTimeout: 8 * time.Second, shutdownTimeout: 2 * time.Second,
			drainTimesOut: true, stateAtExit: "SENDING", finalState: "UNKNOWN", reasonAt: "STALE_CLAIM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, sinkURL := newHangSink(t)
			dbPath := filepath.Join(t.TempDir(), "herald.db")
			addr := freeAddr(t)
			cfg := filepath.Join(t.TempDir(), "herald.yaml")
			writeFile(t, cfg, fmt.Sprintf(`listen: %s
database: sqlite:%s
api_keys: [{key: k, tenant: t}]
providers: [{name: sink, type: webhook, channel: webhook, url: %s, timeout: %s}]
kinds:
  - {name: ping, category: transactional, channels: [webhook], templates: {webhook: {title: "t", body: "b"}}}
lanes: {transactional: {concurrency: 1}}
shutdown_timeout: %s
lease: %s
stale_claim_after: %s
sweep_interval: 1s
poll_interval: 100ms
`, addr, dbPath, sinkURL, tc.providerTimeout, tc.shutdownTimeout, tc.providerTimeout+2*time.Second, tc.providerTimeout+time.Second))
			srv := newServer(t, cfg, addr)
			srv.start()
			c := srv.client("k")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			post := func(key string) string {
				id, err := c.post(ctx, key, map[string]any{"recipient": "r", "event_id": key, "kind": "ping"})
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			idA := post("term-a")
			var msgA string
			select {
			case msgA = <-k.first:
			case <-time.After(30 * time.Second):
				t.Fatalf("no provider call for A within 30 s:\n%s", srv.tail())
			}
			if msgA != idA+".webhook" {
				t.Fatalf("the held call is for %s, want A (%s.webhook)", msgA, idA)
			}
			idB := post("term-b")
			msgB := idB + ".webhook"
			if nv, code, err := c.get(ctx, idB); err != nil || code != http.StatusOK || len(nv.Deliveries) != 1 || nv.Deliveries[0].State != "PENDING" {
				t.Fatalf("B before SIGTERM: code %d err %v view %+v; want PENDING behind A", code, err, nv)
			}

			mark := srv.logs.Mark()
			termAt := time.Now()
			if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, "herald to log that it drains", 10*time.Second, func() bool {
				return strings.Contains(srv.logs.Since(mark), "herald: draining")
			})
			// Intake stops: the listener closes. An answer that raced the
			// close may be a 503, never a 202.
			late := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for try := 0; ; try++ {
				req, err := http.NewRequest(http.MethodPost, c.base()+"/v1/notifications",
					strings.NewReader(`{"recipient":"r","event_id":"late","kind":"ping"}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer k")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("term-late-%d", try))
				resp, err := late.Do(req)
				if err != nil {
					// Refused once the listener is closed; reset when the
					// connection was still queued in the listener's backlog as
					// it closed; closed without an answer (EOF) when it was
					// accepted just before the close: net/http drops a request
					// it reads after Shutdown began, before any handler runs.
					// Either way nothing was accepted.
					if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
						t.Fatalf("POST after SIGTERM: %v; want the connection refused, reset, or closed unanswered", err)
					}
					break
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					t.Fatalf("POST after SIGTERM was accepted (202)")
				}
				if time.Since(termAt) > 10*time.Second {
					t.Fatalf("the listener still answers (%d) 10 s after SIGTERM", resp.StatusCode)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !srv.running() {
				t.Fatalf("herald exited with A's provider call in flight:\n%s", srv.tail())
			}
			if tc.release {
				k.unblock()
			}

			// It exits within shutdown_timeout (plus margin), and not before
			// A's call ended or shutdown_timeout ran out.
			select {
			case <-srv.done:
			case <-time.After(tc.shutdownTimeout + margin):
				t.Fatalf("herald still runs %s after SIGTERM (shutdown_timeout %s):\n%s", tc.shutdownTimeout+margin, tc.shutdownTimeout, srv.tail())
			}
			exitAt := time.Now()
			took := exitAt.Sub(termAt)
			callA := k.called(msgA)
			t.Logf("exited %s after SIGTERM, %s after A's call began; exit code %d", took.Round(time.Millisecond),
				exitAt.Sub(callA[0]).Round(time.Millisecond), srv.cmd.ProcessState.ExitCode())
			switch {
			case !tc.release && tc.providerTimeout < tc.shutdownTimeout && exitAt.Sub(callA[0]) < tc.providerTimeout-500*time.Millisecond:
				t.Errorf("herald exited %s after A's call began, before the provider timeout (%s) ended it", exitAt.Sub(callA[0]), tc.providerTimeout)
			case tc.providerTimeout > tc.shutdownTimeout && took < tc.shutdownTimeout:
				t.Errorf("herald exited %s after SIGTERM, before shutdown_timeout (%s), with A's call in flight", took, tc.shutdownTimeout)
			}
			if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit code %d, want 0 (SIGTERM drains and exits 0):\n%s", code, srv.tail())
			}
			if tc.drainTimesOut && !strings.Contains(srv.logs.Since(mark), "drain timed out") {
				t.Errorf("herald exited without saying the drain timed out:\n%s", srv.tail())
			}
			if n := len(k.called(msgB)); n != 0 || k.total() != 1 {
				t.Fatalf("after SIGTERM: B was called %d times, %d calls in all; want only A's", n, k.total())
			}
			stateA, reasonA := deliveryInSQLite(t, dbPath, msgA)
			if stateA != tc.stateAtExit || (tc.stateAtExit == "UNKNOWN" && reasonA != tc.reasonAt) {
				t.Fatalf("A at exit: %s/%s, want %s", stateA, reasonA, tc.stateAtExit)
			}
			if state, reason := deliveryInSQLite(t, dbPath, msgB); state != "" {
				t.Fatalf("B at exit has a delivery %s/%s; it must still wait in the outbox", state, reason)
			}

			// Nothing is lost, nothing is sent twice: restarted, herald sends
			// B once and never calls A again.
			k.unblock()
			srv.start()
			views := awaitTerminal(t, []*client{c}, []string{idA, idB}, 60*time.Second)
			a, b := views[idA].Deliveries[0], views[idB].Deliveries[0]
			if a.State != tc.finalState || (tc.reasonAt != "" && a.Reason != tc.reasonAt) {
				t.Errorf("A after the restart: %s/%s, want %s/%s", a.State, a.Reason, tc.finalState, tc.reasonAt)
			}
			if b.State != "PROVIDER_ACCEPTED" {
				t.Errorf("B after the restart: %s/%s, want PROVIDER_ACCEPTED", b.State, b.Reason)
			}
			if na, nb := len(k.called(msgA)), len(k.called(msgB)); na != 1 || nb != 1 {
				t.Errorf("calls: A %d, B %d; want one each", na, nb)
			}
			if code := srv.stop(30 * time.Second); code != 0 {
				t.Fatalf("second SIGTERM, nothing in flight: exit code %d:\n%s", code, srv.tail())
			}
		})
	}
}

// deliveryInSQLite reads a delivery's state and reason from the SQLite
// database at path while no herald runs; "" if it has no delivery row.
func deliveryInSQLite(t *testing.T, path, messageID string) (state, reason string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.QueryRow(`SELECT state, reason FROM deliveries WHERE message_id = ?`, messageID).Scan(&state, &reason)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ""
	}
	if err != nil {
		t.Fatalf("read delivery %s: %v", messageID, err)
	}
	return state, reason
}
