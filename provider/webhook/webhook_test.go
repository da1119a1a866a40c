package webhook_test

// These tests hold the webhook adapter to DESIGN §2 ("How a provider answer is
// classified") over real HTTP: every row of the table is produced by an
// httptest server (or a raw listener, or a closed port) and the adapter's
// default client, never by a mock of net/http.
//
// Synchronisation is by channels and httptrace hooks only. A timeout is
// made to pass at a chosen step of the call (an httpcalltest.Deadline
// expired from a trace hook), never raced against the wall clock; the one
// test of the adapter's own Timeout accepts any honest class. Every other
// wait is bounded by a channel receive with a failure deadline, never by
// sleeping.

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall/httpcalltest"
	"github.com/heraldhq/herald/provider/webhook"
)

// waitLimit bounds every channel wait so a broken test fails instead of hanging.
const waitLimit = 30 * time.Second

// callTimeout is the adapter Timeout of calls that must end for another
// reason first: long enough that a loaded machine never reaches it.
const callTimeout = 30 * time.Second

// quiet swallows the server's own error log (TLS handshake failures, hijacked
// connections) so expected failures do not clutter test output.
var quiet = log.New(io.Discard, "", 0)

func message(id string) provider.Message {
	return provider.Message{
		MessageID: id,
		Tenant:    "tenant-1",
		Recipient: "user-42",
		Kind:      "payment.paid",
		Channel:   heraldtype.ChannelWebhook,
		Address:   "must-not-be-sent",
		Title:     "Payment received",
		Body:      "Paid 5,000 won",
	}
}

// hit is one request as the server saw it.
type hit struct {
	method string
	header http.Header
	body   []byte
	err    error
}

// recorder counts the requests that reached a handler.
type recorder struct {
	mu   sync.Mutex
	hits []hit
}

// record reads the whole request body and remembers the request.
func (rc *recorder) record(r *http.Request) {
	body, err := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.hits = append(rc.hits, hit{method: r.Method, header: r.Header.Clone(), body: body, err: err})
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.hits)
}

func (rc *recorder) only(t *testing.T) hit {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.hits) != 1 {
		t.Fatalf("server saw %d requests, want exactly 1", len(rc.hits))
	}
	return rc.hits[0]
}

// newServer starts an httptest server closed at the end of the test.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ErrorLog = quiet
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// newTLSServer starts an httptest TLS server, with its own certificate,
// that records each request in rec and answers status; closed at the end
// of the test.
func newTLSServer(t *testing.T, rec *recorder, status int) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		w.WriteHeader(status)
	}))
	ts.Config.ErrorLog = quiet
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

// send makes one call through a fresh adapter with its default client.
func send(t *testing.T, rawURL string, timeout time.Duration, m provider.Message) provider.Outcome {
	t.Helper()
	return webhook.New(webhook.Config{URL: rawURL, Timeout: timeout}).Send(context.Background(), m)
}

func wantOutcome(t *testing.T, got provider.Outcome, class provider.Class, reasons ...string) {
	t.Helper()
	if got.Class != class {
		t.Fatalf("outcome = %+v (class %v), want class %v", got, got.Class, class)
	}
	if len(reasons) == 0 {
		return
	}
	for _, r := range reasons {
		if got.Reason == r {
			return
		}
	}
	t.Fatalf("outcome = %+v, want reason in %q", got, reasons)
}

// wait receives from ch or fails the test after waitLimit.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// assertWireFormat checks the request exactly as DESIGN §8 fixes it.
func assertWireFormat(t *testing.T, h hit, m provider.Message) {
	t.Helper()
	if h.err != nil {
		t.Fatalf("server could not read the body: %v", h.err)
	}
	if h.method != http.MethodPost {
		t.Errorf("method = %s, want POST", h.method)
	}
	if got := h.header.Values("Idempotency-Key"); len(got) != 1 || got[0] != m.MessageID {
		t.Errorf("Idempotency-Key = %q, want [%q]", got, m.MessageID)
	}
	if got := h.header.Values("X-Herald-Message-Id"); len(got) != 1 || got[0] != m.MessageID {
		t.Errorf("X-Herald-Message-Id = %q, want [%q]", got, m.MessageID)
	}
	if got := h.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	var fields map[string]any
	if err := json.Unmarshal(h.body, &fields); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", h.body, err)
	}
	want := map[string]any{
		"message_id": m.MessageID,
		"recipient":  m.Recipient,
		"kind":       m.Kind,
		"channel":    string(m.Channel),
		"title":      m.Title,
		"body":       m.Body,
	}
	if len(fields) != len(want) {
		t.Errorf("body has fields %v, want exactly the %d fields %v", fields, len(want), want)
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("body[%q] = %v, want %v", k, fields[k], v)
		}
	}
}

// TestStatusClassification proves the status rows of DESIGN §2 over HTTP.
func TestStatusClassification(t *testing.T) {
	for _, code := range []int{200, 201, 202, 204} {
		t.Run(fmt.Sprintf("Status%dIsAccepted", code), func(t *testing.T) {
			t.Parallel()
			var rec recorder
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				rec.record(r)
				w.WriteHeader(code)
			})
			m := message(fmt.Sprintf("msg-accepted-%d", code))
			out := send(t, ts.URL+"/hook", 0, m)
			wantOutcome(t, out, provider.Accepted)
			if out.Reason != "" || out.RetryAfter != 0 {
				t.Errorf("accepted outcome carries reason %q / retry-after %v", out.Reason, out.RetryAfter)
			}
			assertWireFormat(t, rec.only(t), m)
		})
	}

	for _, code := range []int{401, 403, 429} {
		t.Run(fmt.Sprintf("Status%dIsNotSent", code), func(t *testing.T) {
			t.Parallel()
			var rec recorder
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				rec.record(r)
				w.WriteHeader(code)
			})
			out := send(t, ts.URL, 0, message(fmt.Sprintf("msg-notsent-%d", code)))
			wantOutcome(t, out, provider.NotSent, fmt.Sprintf("HTTP_%d", code))
			if out.RetryAfter != 0 {
				t.Errorf("RetryAfter = %v without a Retry-After header, want 0", out.RetryAfter)
			}
			rec.only(t)
		})
	}

	t.Run("Status429RetryAfterSecondsIsHonoured", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			rec.record(r)
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		})
		out := send(t, ts.URL, 0, message("msg-429-seconds"))
		wantOutcome(t, out, provider.NotSent, "HTTP_429")
		if out.RetryAfter != 7*time.Second {
			t.Errorf("RetryAfter = %v, want 7s", out.RetryAfter)
		}
		rec.only(t)
	})

	t.Run("Status429RetryAfterHTTPDateIsHonoured", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		const ahead = 30 * time.Second
		ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			rec.record(r)
			w.Header().Set("Retry-After", time.Now().Add(ahead).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
		})
		out := send(t, ts.URL, 0, message("msg-429-date"))
		wantOutcome(t, out, provider.NotSent, "HTTP_429")
		// An HTTP-date has whole seconds, so up to 1 s is lost to truncation.
		if out.RetryAfter <= ahead-5*time.Second || out.RetryAfter > ahead {
			t.Errorf("RetryAfter = %v, want about %v", out.RetryAfter, ahead)
		}
		rec.only(t)
	})

	// README: "Retry-After honoured up to 1 h", in both of its forms.
	for _, tc := range []struct {
		name  string
		value func() string
	}{
		{"Seconds", func() string { return "7200" }},
		{"HTTPDate", func() string { return time.Now().Add(3 * time.Hour).UTC().Format(http.TimeFormat) }},
	} {
		t.Run("Status429RetryAfterOverAnHourIsCappedAt1h"+tc.name, func(t *testing.T) {
			t.Parallel()
			var rec recorder
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				rec.record(r)
				w.Header().Set("Retry-After", tc.value())
				w.WriteHeader(http.StatusTooManyRequests)
			})
			out := send(t, ts.URL, 0, message("msg-429-capped-"+tc.name))
			wantOutcome(t, out, provider.NotSent, "HTTP_429")
			if out.RetryAfter != provider.MaxRetryAfter || provider.MaxRetryAfter != time.Hour {
				t.Errorf("RetryAfter = %v (cap %v), want 1h", out.RetryAfter, provider.MaxRetryAfter)
			}
			rec.only(t)
		})
	}

	for _, code := range []int{400, 404, 410, 413, 422} {
		t.Run(fmt.Sprintf("Status%dIsPermanent", code), func(t *testing.T) {
			t.Parallel()
			var rec recorder
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				rec.record(r)
				w.WriteHeader(code)
			})
			out := send(t, ts.URL, 0, message(fmt.Sprintf("msg-permanent-%d", code)))
			wantOutcome(t, out, provider.Permanent, fmt.Sprintf("HTTP_%d", code))
			if out.DeadDestination != (code == http.StatusGone) {
				t.Errorf("DeadDestination = %v, want it for 410 only", out.DeadDestination)
			}
			rec.only(t)
		})
	}

	for _, code := range []int{500, 502, 503, 504, 408, 409, 418, 499} {
		name := fmt.Sprintf("Status%dIsUnknown", code)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var rec recorder
			ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				rec.record(r)
				if code == http.StatusServiceUnavailable {
					// A 5xx hint does not make it a definite non-send.
					w.Header().Set("Retry-After", "7")
				}
				w.WriteHeader(code)
			})
			out := send(t, ts.URL, 0, message("msg-"+name))
			wantOutcome(t, out, provider.Unknown, fmt.Sprintf("HTTP_%d", code))
			rec.only(t)
		})
	}

	for _, code := range []int{301, 302, 303, 307, 308} {
		name := fmt.Sprintf("Redirect%dIsUnknownAndNotFollowed", code)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var target, origin recorder
			dst := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				target.record(r)
				w.WriteHeader(http.StatusOK)
			})
			src := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				origin.record(r)
				http.Redirect(w, r, dst.URL+"/elsewhere", code)
			})
			out := send(t, src.URL, 0, message("msg-"+name))
			wantOutcome(t, out, provider.Unknown, fmt.Sprintf("HTTP_%d", code))
			origin.only(t)
			if n := target.count(); n != 0 {
				t.Fatalf("redirect target got %d requests, want 0", n)
			}
		})
	}
}

// TestConcurrentSendsReachServerOnceEach shares one adapter (and its
// connection pool) between goroutines: every message arrives exactly once.
func TestConcurrentSendsReachServerOnceEach(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			MessageID string `json:"message_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.MessageID != r.Header.Get("Idempotency-Key") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen[p.MessageID]++
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	w := webhook.New(webhook.Config{URL: ts.URL, Timeout: callTimeout})
	const n = 32
	outs := make([]provider.Outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i] = w.Send(context.Background(), message(fmt.Sprintf("msg-concurrent-%d", i))) })
	}
	wg.Wait()
	for i, out := range outs {
		if out.Class != provider.Accepted {
			t.Errorf("send %d: outcome %+v, want accepted", i, out)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Errorf("server saw %d distinct messages, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s reached the server %d times, want 1", id, c)
		}
	}
}

// TestConnectionRefusedIsNotSent runs alone (no parallel listeners in this
// process) so the port just released cannot be handed to another listener
// before the dial.
func TestConnectionRefusedIsNotSent(t *testing.T) {
	addr := httpcalltest.ClosedAddr(t)
	out := send(t, "http://"+addr+"/hook", callTimeout, message("msg-refused"))
	wantOutcome(t, out, provider.NotSent, "CONNECTION_REFUSED")
}

// TestTransportFailures proves the non-status rows of DESIGN §2.
func TestTransportFailures(t *testing.T) {
	t.Run("DNSFailureIsNotSent", func(t *testing.T) {
		t.Parallel()
		out := send(t, "http://nosuch.invalid/hook", callTimeout, message("msg-dns"))
		wantOutcome(t, out, provider.NotSent, "DNS_FAILURE", "CONNECT_TIMEOUT")
	})

	t.Run("TLSFailureBeforeWriteIsNotSent", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := newTLSServer(t, &rec, http.StatusOK)

		// The default client does not trust httptest's certificate.
		out := send(t, ts.URL, callTimeout, message("msg-tls"))
		wantOutcome(t, out, provider.NotSent, "TLS_FAILURE")
		if n := rec.count(); n != 0 {
			t.Fatalf("handler was called %d times, want 0", n)
		}
	})

	t.Run("TLSWithTrustedClientIsAccepted", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := newTLSServer(t, &rec, http.StatusAccepted)

		client := ts.Client()
		m := message("msg-tls-trusted")
		out := webhook.New(webhook.Config{URL: ts.URL, Client: client}).Send(context.Background(), m)
		wantOutcome(t, out, provider.Accepted)
		assertWireFormat(t, rec.only(t), m)
		if client.CheckRedirect != nil {
			t.Error("New changed the caller's client (CheckRedirect set)")
		}
	})

	// RootCAs trust a receiver's self-signed certificate on the adapter's
	// own client (config: ca_file).
	t.Run("TLSWithRootCAsIsAccepted", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := newTLSServer(t, &rec, http.StatusOK)

		pool := x509.NewCertPool()
		pool.AddCert(ts.Certificate())
		m := message("msg-tls-rootcas")
		out := webhook.New(webhook.Config{URL: ts.URL, Timeout: callTimeout, RootCAs: pool}).Send(context.Background(), m)
		wantOutcome(t, out, provider.Accepted)
		assertWireFormat(t, rec.only(t), m)
	})

	// The deadline passes the moment the whole request has been written,
	// while the server holds its answer.
	t.Run("TimeoutAfterWriteIsUnknown", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		entered := make(chan struct{}, 1)
		ts := newServer(t, holdingHandler(t, &rec, entered))
		// The deadline passes once the receiver has the request. Expiring it
		// from the client's WroteRequest hook raced the request itself: the
		// hook runs before net/http flushes a small request to the socket,
		// so under load the connection could close with the request still
		// in the client's buffer, and the handler never ran (CI: "timed
		// out waiting for the handler").
		ctx := httpcalltest.NewDeadline()
		go func() {
			wait(t, entered, "the handler")
			ctx.Expire()
		}()
		out := sendCtx(t, ctx, ts.URL, message("msg-timeout"))
		wantOutcome(t, out, provider.Unknown, "TIMEOUT")
		assertWireFormat(t, rec.only(t), message("msg-timeout"))
	})

	// The receiver has read the headers and stopped reading the body; the
	// deadline ends the stalled write with bytes of the request already
	// there, so the call is Unknown although it was never written whole.
	t.Run("DeadlineWhileWritingIsUnknown", func(t *testing.T) {
		t.Parallel()
		entered := make(chan struct{}, 1)
		release := t.Context().Done()
		ts := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{} // never reads the body
			httpcalltest.Hang(r, release)
		})
		ctx := httpcalltest.NewDeadline()
		go func() {
			wait(t, entered, "the handler")
			ctx.Expire()
		}()
		m := message("msg-stalled")
		m.Body = strings.Repeat("x", 16<<20) // more than the loopback buffers hold
		out := sendCtx(t, ctx, ts.URL, m)
		wantOutcome(t, out, provider.Unknown, "TIMEOUT_WHILE_WRITING")
	})

	// A peer that accepts TCP but never answers the TLS handshake: the
	// deadline passes during the handshake, before a byte of the request
	// can have been written.
	t.Run("TimeoutInTLSHandshakeIsNotSent", func(t *testing.T) {
		t.Parallel()
		ln := holdingListener(t)
		ctx := httpcalltest.NewDeadline()
		ctx.Hook(&httptrace.ClientTrace{TLSHandshakeStart: ctx.Expire})
		out := sendCtx(t, ctx, "https://"+ln.Addr().String()+"/hook", message("msg-tls-hang"))
		wantOutcome(t, out, provider.NotSent, "CONNECT_TIMEOUT")
	})

	// The adapter's own Timeout ends a call to a server that never answers.
	// Whether the request was fully written by then depends on the
	// machine's load, so either honest class passes; never an answer.
	t.Run("TimeoutBoundsACallToAHungServer", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := newServer(t, holdingHandler(t, &rec, nil))
		const timeout = 500 * time.Millisecond
		done := make(chan provider.Outcome, 1)
		started := time.Now()
		go func() { done <- send(t, ts.URL, timeout, message("msg-hung")) }()
		select {
		case out := <-done:
			if took := time.Since(started); took < timeout {
				t.Errorf("the call ended after %s, before its timeout of %s", took, timeout)
			}
			switch {
			case out.Class == provider.Unknown && out.Reason == "TIMEOUT":
			case out.Class == provider.Unknown && out.Reason == "TIMEOUT_WHILE_WRITING":
			case out.Class == provider.NotSent && out.Reason == "CONNECT_TIMEOUT":
			default:
				t.Fatalf("outcome = %+v, want unknown TIMEOUT or TIMEOUT_WHILE_WRITING, or not_sent CONNECT_TIMEOUT", out)
			}
		case <-time.After(timeout + waitLimit):
			t.Fatalf("a call with a %s timeout still runs after %s", timeout, timeout+waitLimit)
		}
	})

	t.Run("ResetAfterPartialHeadersIsUnknown", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := newServer(t, hijackAndReset(t, &rec, "HTTP/1.1 200 OK\r\nContent-Type: applic"))
		out := send(t, ts.URL, callTimeout, message("msg-reset-headers"))
		// A 2xx status line without its headers is not an answer.
		wantOutcome(t, out, provider.Unknown, "CONNECTION_RESET")
		rec.only(t)
	})

	t.Run("ResetInsideStatusLineIsUnknown", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := newServer(t, hijackAndReset(t, &rec, "HTTP/1.1 20"))
		out := send(t, ts.URL, callTimeout, message("msg-reset-status"))
		// The client sees either the reset or a truncated, malformed status
		// line, depending on whether the bytes or the RST reach it first.
		wantOutcome(t, out, provider.Unknown, "CONNECTION_RESET", "TRANSPORT_ERROR")
		rec.only(t)
	})

	t.Run("ClosedWithoutAnswerIsUnknown", func(t *testing.T) {
		t.Parallel()
		var rec recorder
		ts := newServer(t, hijackAndReset(t, &rec, ""))
		out := send(t, ts.URL, callTimeout, message("msg-closed-fresh"))
		wantOutcome(t, out, provider.Unknown, "CONNECTION_RESET")
		rec.only(t)
	})

	// net/http replays a request carrying Idempotency-Key when a reused
	// keep-alive connection dies before the first response byte. The adapter
	// must not: the first call goes over a fresh connection and is answered,
	// the second reuses it and is read in full, then the connection is closed
	// without an answer.
	t.Run("ClosedWithoutAnswerOnReusedConnIsNotReplayed", func(t *testing.T) {
		t.Parallel()
		var first, second recorder
		var mu sync.Mutex
		newConns := 0
		ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Idempotency-Key") == "msg-warm-up" {
				first.record(r)
				w.WriteHeader(http.StatusNoContent)
				return
			}
			second.record(r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
		}))
		ts.Config.ErrorLog = quiet
		ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				mu.Lock()
				newConns++
				mu.Unlock()
			}
		}
		ts.Start()
		t.Cleanup(ts.Close)

		w := webhook.New(webhook.Config{URL: ts.URL, Timeout: callTimeout})
		wantOutcome(t, w.Send(context.Background(), message("msg-warm-up")), provider.Accepted)
		out := w.Send(context.Background(), message("msg-no-replay"))
		wantOutcome(t, out, provider.Unknown)
		first.only(t)
		assertWireFormat(t, second.only(t), message("msg-no-replay"))
		mu.Lock()
		defer mu.Unlock()
		if newConns != 1 {
			t.Fatalf("server saw %d connections, want 1 (the second call must reuse the first connection)", newConns)
		}
	})

	// A listener that accepts and closes at once, reading nothing, races the
	// client's write: depending on which comes first the request was never
	// written (NotSent) or written into a dead connection (Unknown). Both are
	// honest; what must hold is that it is never taken as an answer and never
	// retried on a second connection.
	t.Run("ClosedBeforeReadingIsNeverAnAnswerNorRetried", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		accepted := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				accepted++
				mu.Unlock()
				if tc, ok := c.(*net.TCPConn); ok {
					if err := tc.SetLinger(0); err != nil {
						t.Errorf("set linger: %v", err)
					}
				}
				c.Close()
			}
		}()
		t.Cleanup(func() { closeListener(t, ln, done) })

		out := send(t, "http://"+ln.Addr().String()+"/hook", callTimeout, message("msg-raw-close"))
		if out.Class != provider.NotSent && out.Class != provider.Unknown {
			t.Fatalf("outcome = %+v, want not_sent or unknown", out)
		}
		t.Logf("outcome: %+v", out)
		mu.Lock()
		defer mu.Unlock()
		if accepted != 1 {
			t.Fatalf("listener accepted %d connections, want 1", accepted)
		}
	})
}

// holdingHandler records each request (read in full), signals entered and
// then holds its answer until the client goes away or the test ends.
func holdingHandler(t *testing.T, rec *recorder, entered chan<- struct{}) http.HandlerFunc {
	// t.Context ends before any cleanup runs, so a handler whose client
	// still waits (a failing test) is released before ts.Close waits for it.
	release := t.Context().Done()
	return func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		select {
		case entered <- struct{}{}:
		default: // nobody waits for this one
		}
		httpcalltest.Hang(r, release)
	}
}

// sendCtx makes one call on ctx through a fresh adapter whose own Timeout is
// never reached, and fails the test if the call outlives waitLimit.
func sendCtx(t *testing.T, ctx context.Context, rawURL string, m provider.Message) provider.Outcome {
	t.Helper()
	done := make(chan provider.Outcome, 1)
	go func() { done <- webhook.New(webhook.Config{URL: rawURL, Timeout: time.Hour}).Send(ctx, m) }()
	select {
	case out := <-done:
		return out
	case <-time.After(waitLimit):
		t.Fatalf("the call did not end within %s of its deadline's step", waitLimit)
		return provider.Outcome{}
	}
}

// holdingListener accepts connections and holds them, silent, until the test ends.
func holdingListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		closeListener(t, ln, done)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln
}

// closeListener closes ln and waits for its accept loop to end (done).
func closeListener(t *testing.T, ln net.Listener, done <-chan struct{}) {
	t.Helper()
	if err := ln.Close(); err != nil {
		t.Errorf("close listener: %v", err)
	}
	wait(t, done, "the accept loop to end")
}

// hijackAndReset returns a handler that reads the whole request, writes
// partial (possibly empty) and then resets the connection.
func hijackAndReset(t *testing.T, rec *recorder, partial string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		if partial != "" {
			if _, err := buf.WriteString(partial); err != nil {
				t.Errorf("write: %v", err)
				return
			}
			if err := buf.Flush(); err != nil {
				t.Errorf("flush: %v", err)
				return
			}
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			if err := tc.SetLinger(0); err != nil { // close with RST, not FIN
				t.Errorf("set linger: %v", err)
			}
		}
	}
}

// TestClassifyStatus covers ClassifyStatus directly, including Retry-After
// forms a server seldom sends.
func TestClassifyStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		code       int
		retryAfter string
		class      provider.Class
		reason     string
		wait       time.Duration
	}{
		{200, "", provider.Accepted, "", 0},
		{299, "", provider.Accepted, "", 0},
		{401, "", provider.NotSent, "HTTP_401", 0},
		{403, "3", provider.NotSent, "HTTP_403", 0},
		{429, "", provider.NotSent, "HTTP_429", 0},
		{429, "0", provider.NotSent, "HTTP_429", 0},
		{429, "120", provider.NotSent, "HTTP_429", 2 * time.Minute},
		{429, "-5", provider.NotSent, "HTTP_429", 0},
		{429, "soon", provider.NotSent, "HTTP_429", 0},
		{429, now.Add(90 * time.Second).Format(http.TimeFormat), provider.NotSent, "HTTP_429", 90 * time.Second},
		{429, now.Add(-time.Minute).Format(http.TimeFormat), provider.NotSent, "HTTP_429", 0},
		{429, "1.5", provider.NotSent, "HTTP_429", 0},
		// A hint is honoured up to an hour (README), in either form.
		{429, "3599", provider.NotSent, "HTTP_429", 3599 * time.Second},
		{429, "3600", provider.NotSent, "HTTP_429", time.Hour},
		{429, "3601", provider.NotSent, "HTTP_429", time.Hour},
		{429, "86400", provider.NotSent, "HTTP_429", time.Hour},
		{429, now.Add(59 * time.Minute).Format(http.TimeFormat), provider.NotSent, "HTTP_429", 59 * time.Minute},
		{429, now.Add(61 * time.Minute).Format(http.TimeFormat), provider.NotSent, "HTTP_429", time.Hour},
		// Absurd hints are capped too, never wrapped around int64
		// nanoseconds (1e10 s would wrap to a negative wait).
		{429, "10000000000", provider.NotSent, "HTTP_429", time.Hour},
		{429, "20000000000", provider.NotSent, "HTTP_429", time.Hour},
		{429, "99999999999999999999999", provider.NotSent, "HTTP_429", time.Hour},
		{429, "-99999999999999999999999", provider.NotSent, "HTTP_429", 0},
		{429, now.AddDate(400, 0, 0).Format(http.TimeFormat), provider.NotSent, "HTTP_429", time.Hour},
		{400, "", provider.Permanent, "HTTP_400", 0},
		{404, "", provider.Permanent, "HTTP_404", 0},
		{410, "", provider.Permanent, "HTTP_410", 0},
		{413, "", provider.Permanent, "HTTP_413", 0},
		{422, "", provider.Permanent, "HTTP_422", 0},
		{100, "", provider.Unknown, "HTTP_100", 0},
		{302, "", provider.Unknown, "HTTP_302", 0},
		{405, "", provider.Unknown, "HTTP_405", 0},
		{408, "", provider.Unknown, "HTTP_408", 0},
		{409, "", provider.Unknown, "HTTP_409", 0},
		{500, "", provider.Unknown, "HTTP_500", 0},
		{503, "7", provider.Unknown, "HTTP_503", 0},
		{504, "", provider.Unknown, "HTTP_504", 0},
		{600, "", provider.Unknown, "HTTP_600", 0},
	}
	for _, c := range cases {
		got := webhook.ClassifyStatus(c.code, c.retryAfter, now)
		// A 410 says the destination is gone for good (a dead device); a
		// 429 refuses for the rate.
		want := provider.Outcome{Class: c.class, Reason: c.reason, RetryAfter: c.wait, DeadDestination: c.code == http.StatusGone,
			RateLimited: c.code == http.StatusTooManyRequests}
		if got != want {
			t.Errorf("ClassifyStatus(%d, %q) = %+v, want %+v", c.code, c.retryAfter, got, want)
		}
	}
}

// FuzzRetryAfter holds the Retry-After parsing to its contract for any
// header value and status: no panic; a wait only on 429, never negative and
// never above provider.MaxRetryAfter; a delta-seconds value under the cap
// read exactly, and an HTTP-date ahead of now read as the time until it.
// Seeds: testdata/fuzz/FuzzRetryAfter.
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Add("120", 429)
	f.Add(now.Add(90*time.Second).Format(http.TimeFormat), 429)
	f.Add("7", 503)
	f.Fuzz(func(t *testing.T, v string, code int) {
		out := webhook.ClassifyStatus(code, v, now)
		if code != http.StatusTooManyRequests {
			if out.RetryAfter != 0 {
				t.Fatalf("status %d with Retry-After %q: wait %v, want none", code, v, out.RetryAfter)
			}
			return
		}
		if out.Class != provider.NotSent || out.Reason != "HTTP_429" {
			t.Fatalf("429: %+v, want not_sent HTTP_429", out)
		}
		if out.RetryAfter < 0 || out.RetryAfter > provider.MaxRetryAfter {
			t.Fatalf("Retry-After %q: wait %v, outside 0..%v", v, out.RetryAfter, provider.MaxRetryAfter)
		}
		want := time.Duration(-1) // no exact expectation
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && n < uint64(provider.MaxRetryAfter/time.Second) {
			want = time.Duration(n) * time.Second
		} else if at, err := http.ParseTime(v); err == nil && at.After(now) && at.Sub(now) < provider.MaxRetryAfter {
			want = at.Sub(now)
		}
		if want >= 0 && out.RetryAfter != want {
			t.Fatalf("Retry-After %q: wait %v, want %v", v, out.RetryAfter, want)
		}
	})
}

// A receiver that answers 2xx and then stalls its body does not hold the
// send until the adapter's timeout: the status decided the outcome, and
// the body is read only briefly, for the connection's reuse.
func TestAStalledBodyAfterTheStatusDoesNotHoldTheSend(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("{"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	w := webhook.New(webhook.Config{URL: srv.URL, Timeout: time.Hour})
	done := make(chan provider.Outcome, 1)
	go func() {
		done <- w.Send(context.Background(), provider.Message{MessageID: "m1", Channel: heraldtype.ChannelWebhook})
	}()
	select {
	case o := <-done:
		if o.Class != provider.Accepted {
			t.Fatalf("outcome %+v, want accepted", o)
		}
	case <-time.After(waitLimit):
		t.Fatal("the send waited for the stalled body")
	}
}
