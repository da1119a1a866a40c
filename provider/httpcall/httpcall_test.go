package httpcall_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall"
	"github.com/heraldhq/herald/provider/httpcall/httpcalltest"
)

// waitLimit bounds every wait of these tests for something that should
// happen at once.
const waitLimit = 10 * time.Second

// bigBody is more than the loopback socket buffers and an HTTP/2 stream's
// flow-control window hold together, so a writer whose receiver stops
// reading stalls inside it.
const bigBody = 64 << 20

// TestClassify walks the table of the package doc, row by row.
func TestClassify(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error {
		return &url.Error{Op: "Post", URL: "http://example.test", Err: err}
	}
	opErr := func(op string, errno syscall.Errno) error {
		return wrap(&net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)})
	}
	cases := []struct {
		name   string
		err    error
		stage  httpcall.Stage
		class  provider.Class
		reason string
	}{
		{"DNSUnsentIsNotSent", wrap(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}), httpcall.Unsent, provider.NotSent, "DNS_FAILURE"},
		{"RefusedUnsentIsNotSent", opErr("connect", syscall.ECONNREFUSED), httpcall.Unsent, provider.NotSent, "CONNECTION_REFUSED"},
		{"DeadlineUnsentIsNotSent", wrap(context.DeadlineExceeded), httpcall.Unsent, provider.NotSent, "CONNECT_TIMEOUT"},
		{"CanceledUnsentIsNotSent", wrap(context.Canceled), httpcall.Unsent, provider.NotSent, "CONNECTION_FAILED"},
		{"OtherUnsentIsNotSent", wrap(errors.New("boom")), httpcall.Unsent, provider.NotSent, "CONNECTION_FAILED"},
		{"DeadlineWritingIsUnknown", wrap(context.DeadlineExceeded), httpcall.Writing, provider.Unknown, "TIMEOUT_WHILE_WRITING"},
		{"CanceledWritingIsUnknown", wrap(context.Canceled), httpcall.Writing, provider.Unknown, "CANCELED_WHILE_WRITING"},
		{"BrokenPipeWritingIsNotSent", opErr("write", syscall.EPIPE), httpcall.Writing, provider.NotSent, "CONNECTION_FAILED"},
		{"ResetWritingIsNotSent", opErr("write", syscall.ECONNRESET), httpcall.Writing, provider.NotSent, "CONNECTION_FAILED"},
		{"ClosedPipeWritingIsNotSent", wrap(io.ErrClosedPipe), httpcall.Writing, provider.NotSent, "CONNECTION_FAILED"},
		{"DeadlineWrittenIsUnknown", wrap(context.DeadlineExceeded), httpcall.Written, provider.Unknown, "TIMEOUT"},
		{"ResetWrittenIsUnknown", opErr("read", syscall.ECONNRESET), httpcall.Written, provider.Unknown, "CONNECTION_RESET"},
		{"EOFWrittenIsUnknown", wrap(io.EOF), httpcall.Written, provider.Unknown, "CONNECTION_RESET"},
		{"RefusedWrittenIsUnknown", opErr("connect", syscall.ECONNREFUSED), httpcall.Written, provider.Unknown, "TRANSPORT_ERROR"},
		{"OtherWrittenIsUnknown", wrap(errors.New("boom")), httpcall.Written, provider.Unknown, "TRANSPORT_ERROR"},
	}
	for _, c := range cases {
		got := httpcall.Classify(c.err, c.stage)
		want := provider.Outcome{Class: c.class, Reason: c.reason}
		if got != want {
			t.Errorf("%s: Classify(%v, %v) = %+v, want %+v", c.name, c.err, c.stage, got, want)
		}
	}
}

// TestDoStalledWrite: the receiver has read the request's headers and
// stopped reading its body; the deadline that ends the stalled write
// leaves a call the receiver may act on, so it is Unknown.
func TestDoStalledWrite(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{1, 2} {
		t.Run("HTTP"+strconv.Itoa(proto), func(t *testing.T) {
			t.Parallel()
			entered := make(chan int, 1)
			ts := newServer(t, proto == 2, 0, func(w http.ResponseWriter, r *http.Request, hold <-chan struct{}) {
				entered <- r.ProtoMajor
				<-hold // never reads the body
			})
			ctx := httpcalltest.NewDeadline()
			go func() {
				if got := wait(t, entered, "the handler"); got != proto {
					t.Errorf("the request came over HTTP/%d", got)
				}
				ctx.Expire()
			}()
			req := newRequest(t, ctx, http.MethodPost, ts.URL, bigBody)
			want(t, do(t, ts.Client().Do, req), provider.Unknown, "TIMEOUT_WHILE_WRITING")
		})
	}
}

// TestDoHTTP2RequestSentBeforeWroteRequest closes the hole the Writing
// stage exists for: over HTTP/2 the request's last frame has left, the
// receiver has the whole request, and the deadline passes before net/http
// reports it written (RoundTrip does not wait for its writer). The writer
// is held in its WroteHeaders hook until the call has returned.
func TestDoHTTP2RequestSentBeforeWroteRequest(t *testing.T) {
	t.Parallel()
	entered := make(chan int, 1)
	ts := newServer(t, true, 0, func(w http.ResponseWriter, r *http.Request, hold <-chan struct{}) {
		entered <- r.ProtoMajor
		<-hold
	})
	ctx := httpcalltest.NewDeadline()
	release := ctx.ExpireAfterHeaders()
	req := newRequest(t, ctx, http.MethodGet, ts.URL, 0) // its HEADERS frame ends the stream
	out := do(t, ts.Client().Do, req)
	release()
	want(t, out, provider.Unknown, "TIMEOUT_WHILE_WRITING")
	wait(t, entered, "the handler")
}

// TestDoWaitForConnection: a call that waits for a connection (HTTP/1
// pool) or for a stream on one (HTTP/2, SETTINGS_MAX_CONCURRENT_STREAMS 1)
// and is ended by its deadline has written nothing: NotSent.
func TestDoWaitForConnection(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{1, 2} {
		t.Run("HTTP"+strconv.Itoa(proto), func(t *testing.T) {
			t.Parallel()
			entered := make(chan int, 1)
			ts := newServer(t, proto == 2, 1, answerAndHold(entered))
			tr := ts.Client().Transport.(*http.Transport).Clone()
			tr.MaxConnsPerHost = 1
			// Wait for a stream rather than dial another connection.
			tr.HTTP2 = &http.HTTP2Config{StrictMaxConcurrentRequests: true}
			t.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: tr}

			// The first call holds the only connection (HTTP/1) or stream
			// (HTTP/2); its answer's headers came after the server's SETTINGS.
			hold(t, client.Do, newRequest(t, context.Background(), http.MethodGet, ts.URL, 0))
			wait(t, entered, "the first handler")

			var gotConn atomic.Bool
			ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
			}), 200*time.Millisecond)
			defer cancel()
			want(t, do(t, client.Do, newRequest(t, ctx, http.MethodPost, ts.URL, 100)), provider.NotSent, "CONNECT_TIMEOUT")
			// Over HTTP/2 the pool hands out the connection (GotConn)
			// before the wait for a stream: the case the HTTP/2 rule is for.
			if gotConn.Load() != (proto == 2) {
				t.Errorf("GotConn fired: %v, want %v", gotConn.Load(), proto == 2)
			}
		})
	}
}

// TestDoClientConn: the APNs adapter sends through its own pool of
// *http.ClientConn, which fires no GotConn; a wait for a stream is Unsent
// and a stalled body is Writing all the same.
func TestDoClientConn(t *testing.T) {
	t.Parallel()
	entered := make(chan int, 1)
	ts := newServer(t, true, 1, answerAndHold(entered))
	tr := ts.Client().Transport.(*http.Transport).Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	tr.HTTP2 = &http.HTTP2Config{StrictMaxConcurrentRequests: true}
	cc, err := tr.NewClientConn(context.Background(), "https", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })

	first := hold(t, cc.RoundTrip, newRequest(t, context.Background(), http.MethodGet, ts.URL, 0))
	wait(t, entered, "the first handler")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	want(t, do(t, cc.RoundTrip, newRequest(t, ctx, http.MethodPost, ts.URL, 100)), provider.NotSent, "CONNECT_TIMEOUT")

	first.Body.Close() // frees the stream
	stalled := httpcalltest.NewDeadline()
	go func() {
		wait(t, entered, "the second handler")
		stalled.Expire()
	}()
	want(t, do(t, cc.RoundTrip, newRequest(t, stalled, http.MethodPost, ts.URL, bigBody)), provider.Unknown, "TIMEOUT_WHILE_WRITING")
}

// answerAndHold answers a GET with its status at once and holds its body
// open; a POST's body it never reads. Either way it reports the protocol
// on entered and returns when the test ends.
func answerAndHold(entered chan<- int) handler {
	return func(w http.ResponseWriter, r *http.Request, hold <-chan struct{}) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		}
		entered <- r.ProtoMajor
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}
}

// hold makes a call that must be answered and keeps its answer's body open
// until the test ends.
func hold(t *testing.T, send func(*http.Request) (*http.Response, error), req *http.Request) *http.Response {
	t.Helper()
	resp, out, ok := httpcall.Do(send, req)
	if !ok {
		t.Fatalf("outcome = %+v, want an answer", out)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestDoUnacceptedTLSIsNotSent: the kernel completes the TCP handshake of
// a listener that never accepts, but the TLS handshake cannot finish, so
// nothing of the request is written.
func TestDoUnacceptedTLSIsNotSent(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req := newRequest(t, ctx, http.MethodPost, "https://"+ln.Addr().String()+"/", 100)
	want(t, do(t, newClient(t).Do, req), provider.NotSent, "CONNECT_TIMEOUT")
}

// TestDoClosedPortIsNotSent runs alone (no parallel listeners in this
// process) so the port just released is not handed to another listener
// before the dial.
func TestDoClosedPortIsNotSent(t *testing.T) {
	addr := httpcalltest.ClosedAddr(t)
	req := newRequest(t, context.Background(), http.MethodPost, "http://"+addr+"/", 100)
	want(t, do(t, newClient(t).Do, req), provider.NotSent, "CONNECTION_REFUSED")
}

// TestDoWriteFailureIsNotSent: the receiver reads the headers and resets
// the connection; the body's write fails, so the request never arrived
// whole: NotSent, as before the Writing stage existed.
func TestDoWriteFailureIsNotSent(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		c.(*net.TCPConn).SetLinger(0) // close with RST
		c.Close()
	}()
	req := newRequest(t, context.Background(), http.MethodPost, "http://"+ln.Addr().String()+"/", bigBody)
	want(t, do(t, newClient(t).Do, req), provider.NotSent, "CONNECTION_FAILED")
}

// TestDoWrittenTimeoutIsUnknown: the whole request was written and the
// answer did not come in time.
func TestDoWrittenTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{1, 2} {
		t.Run("HTTP"+strconv.Itoa(proto), func(t *testing.T) {
			t.Parallel()
			ts := newServer(t, proto == 2, 0, func(w http.ResponseWriter, r *http.Request, hold <-chan struct{}) {
				io.Copy(io.Discard, r.Body)
				<-hold
			})
			ctx := httpcalltest.NewDeadline()
			ctx.Hook(&httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
				if i.Err == nil {
					ctx.Expire()
				}
			}})
			want(t, do(t, ts.Client().Do, newRequest(t, ctx, http.MethodPost, ts.URL, 100)), provider.Unknown, "TIMEOUT")
		})
	}
}

// TestDoContextEndedWhileWriting: an HTTP/2 abort that races the deadline
// returns the abort's error, not the context's, without waiting for the
// writer; a context that has ended makes the call Unknown whatever the
// error. The send here plays net/http: it reports the first header field
// written, ends the context and fails.
func TestDoContextEndedWhileWriting(t *testing.T) {
	t.Parallel()
	expired := func() (context.Context, func()) {
		d := httpcalltest.NewDeadline()
		return d, d.Expire
	}
	canceled := func() (context.Context, func()) { return context.WithCancel(context.Background()) }
	live := func() (context.Context, func()) { return context.Background(), func() {} }
	cases := []struct {
		name   string
		ctx    func() (ctx context.Context, end func())
		class  provider.Class
		reason string
	}{
		{"DeadlineIsUnknown", expired, provider.Unknown, "TIMEOUT_WHILE_WRITING"},
		{"CancelIsUnknown", canceled, provider.Unknown, "CANCELED_WHILE_WRITING"},
		{"LiveContextIsNotSent", live, provider.NotSent, "CONNECTION_FAILED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, end := c.ctx()
			defer end()
			req := newRequest(t, ctx, http.MethodPost, "https://example.test/", 100)
			_, out, ok := httpcall.Do(func(r *http.Request) (*http.Response, error) {
				httptrace.ContextClientTrace(r.Context()).WroteHeaderField(":method", []string{"POST"})
				end()
				return nil, errors.New("stream error: stream ID 1; INTERNAL_ERROR; received from peer")
			}, req)
			if ok {
				t.Fatal("Do reported an answer")
			}
			want(t, out, c.class, c.reason)
		})
	}
}

// TestDoNeverReplays: Do clears GetBody, so net/http cannot send the
// request a second time, and hands back the answer untouched.
func TestDoNeverReplays(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	ts := newServer(t, false, 0, func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
		calls.Add(1)
		w.WriteHeader(http.StatusTeapot)
	})
	req := newRequest(t, context.Background(), http.MethodPost, ts.URL, 100)
	if req.GetBody == nil {
		t.Fatal("the test request has no GetBody to clear")
	}
	var seen *http.Request
	resp, out, ok := httpcall.Do(func(r *http.Request) (*http.Response, error) {
		seen = r
		return ts.Client().Do(r)
	}, req)
	if !ok {
		t.Fatalf("outcome = %+v, want an answer", out)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || calls.Load() != 1 {
		t.Errorf("status %d after %d calls, want 418 after 1", resp.StatusCode, calls.Load())
	}
	if seen.GetBody != nil {
		t.Error("the request was sent with GetBody set")
	}
}

// listen is a loopback listener, closed when the test ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// newClient is a client with a transport of its own, closed at the end.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// handler is a test server's handler; hold is closed when the test ends,
// before the server closes (which waits for its handlers).
type handler func(w http.ResponseWriter, r *http.Request, hold <-chan struct{})

// newServer starts a test server over HTTP/1, or over TLS with HTTP/2 and
// at most maxStreams streams a connection (0: the default).
func newServer(t *testing.T, h2 bool, maxStreams uint32, h handler) *httptest.Server {
	t.Helper()
	hold := make(chan struct{})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, hold) }))
	if h2 {
		ts.EnableHTTP2 = true
		ts.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: int(maxStreams)}
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(hold) })
	return ts
}

// newRequest is a request of n bytes of body (0: none) made on ctx. A
// small body is a strings.Reader, which gives the request a GetBody.
func newRequest(t *testing.T, ctx context.Context, method, u string, n int) *http.Request {
	t.Helper()
	var body io.Reader
	switch {
	case n > 1<<20:
		body = io.LimitReader(zeros{}, int64(n))
	case n > 0:
		body = strings.NewReader(strings.Repeat("x", n))
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(n)
	return req
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// do runs httpcall.Do and wants it to fail within waitLimit.
func do(t *testing.T, send func(*http.Request) (*http.Response, error), req *http.Request) provider.Outcome {
	t.Helper()
	type result struct {
		resp *http.Response
		out  provider.Outcome
		ok   bool
	}
	done := make(chan result, 1)
	go func() {
		resp, out, ok := httpcall.Do(send, req)
		done <- result{resp, out, ok}
	}()
	select {
	case r := <-done:
		if r.ok {
			r.resp.Body.Close()
			t.Fatalf("answered %d, want a failure", r.resp.StatusCode)
		}
		return r.out
	case <-time.After(waitLimit):
		t.Fatalf("the call did not end within %s", waitLimit)
		return provider.Outcome{}
	}
}

func want(t *testing.T, got provider.Outcome, class provider.Class, reason string) {
	t.Helper()
	if got != (provider.Outcome{Class: class, Reason: reason}) {
		t.Fatalf("outcome = %+v, want %v %s", got, class, reason)
	}
}

func wait[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitLimit):
		t.Errorf("waited %s for %s", waitLimit, what)
		var zero T
		return zero
	}
}
