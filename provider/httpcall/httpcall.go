// Package httpcall sends one HTTP request for a provider adapter and, when
// no answer comes, classifies the failure by how far the request got
// (DESIGN §2): NotSent only when no byte of it can have reached the
// receiver, or when the write is proven to have failed; Unknown whenever
// the receiver may hold the whole request.
//
// Do watches the request with an httptrace.ClientTrace and clears
// Request.GetBody, so net/http can never replay it: a replay is a second
// call herald did not decide to make.
//
// # Stages
//
// A request is in one of three stages when its call fails:
//
//   - Unsent: no connection was held for it. Over HTTP/1 that is before
//     httptrace.GotConn; net/http starts writing right after it. Over
//     HTTP/2 GotConn fires when the pool hands out a connection, before
//     the call waits for a free stream (SETTINGS_MAX_CONCURRENT_STREAMS)
//     and for the connection's write lock, so a GotConn on a TLS
//     connection that negotiated "h2" does not count; the stage ends at
//     the first httptrace.WroteHeaderField instead, which net/http calls
//     while it encodes the HEADERS frame into its buffer, holding the
//     stream and the write lock, before a byte of the frame is written.
//     An *http.ClientConn (the APNs adapter's own pool) fires no GotConn
//     at all; WroteHeaderField marks it the same way.
//   - Writing: a connection (HTTP/1) or a stream (HTTP/2) is held and its
//     bytes may be on the wire, but httptrace.WroteRequest has not
//     reported the whole request written.
//   - Written: WroteRequest reported it written without error. Over
//     HTTP/1 net/http calls it just before it flushes the last buffered
//     bytes, so the stage may begin a little early: the safe side.
//
// The Writing stage exists because WroteRequest is not the moment the
// bytes leave. Over HTTP/2, RoundTrip returns the instant the context
// ends, without waiting for the goroutine that writes the request: a
// request whose last frame (END_STREAM) was already sent, and which the
// receiver may be acting on, is reported before WroteRequest fires. Over
// HTTP/1, net/http does wait for its writer, but a deadline that ends a
// write stalled on a receiver that stopped reading leaves part of the
// request there. Classifying either as "not sent" could send the message
// twice; the receiver may have it, so the call is Unknown.
//
// A failure in the Writing stage that is not the context's end is the
// write's own failure, and stays NotSent: over HTTP/1 RoundTrip returns
// only after its writer stopped, and a writer that stopped with an error
// (EPIPE, ECONNRESET, io.ErrClosedPipe: the classic idle connection the
// server had closed) never sent the request's last bytes; over HTTP/2 a
// stream or connection abort that is not the context's waits for the
// writer the same way, and a writer that finished would have reported
// Written. A context that has ended by the time the call returns makes
// the failure Unknown whatever error net/http chose to report, since an
// HTTP/2 abort racing the deadline may return without that wait.
//
// A plain-HTTP peer that never calls Accept still completes the TCP
// handshake in the kernel, which then takes the request's bytes: such a
// call reaches Writing or Written and is Unknown, correctly, since the
// process may accept and read them later. Over TLS the handshake cannot
// finish, and the call stays Unsent. HTTP/2 without TLS (h2c) cannot be
// told from HTTP/1 at GotConn, so its Writing stage begins there: the
// safe side again.
//
// # Classification
//
//	stage    failure                                          class    reason
//	Unsent   DNS failure                                      NotSent  DNS_FAILURE
//	Unsent   connection refused                               NotSent  CONNECTION_REFUSED
//	Unsent   TLS certificate or handshake failure             NotSent  TLS_FAILURE
//	Unsent   deadline or timeout (dial, TLS handshake, pool   NotSent  CONNECT_TIMEOUT
//	         or stream wait)
//	Unsent   any other failure (including a cancel)           NotSent  CONNECTION_FAILED
//	Writing  deadline or timeout, or the context expired      Unknown  TIMEOUT_WHILE_WRITING
//	Writing  context canceled                                 Unknown  CANCELED_WHILE_WRITING
//	Writing  the write failed (EPIPE, ECONNRESET, closed      NotSent  as Unsent: CONNECTION_FAILED, …
//	         pipe, server closed the idle connection,
//	         stream or connection aborted)
//	Written  deadline or timeout                              Unknown  TIMEOUT
//	Written  reset or EOF                                     Unknown  CONNECTION_RESET
//	Written  any other failure                                Unknown  TRANSPORT_ERROR
//
// Sources: the net/http source of Go 1.26 (transport.go persistConn.roundTrip
// and writeLoop, request.go Request.write, h2_bundle.go RoundTripOpt,
// ClientConn.roundTrip, writeRequest and encodeAndWriteHeaders,
// internal/httpcommon EncodeHeaders); RFC 9113 §8.1 (a request ends with
// END_STREAM).
package httpcall

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heraldhq/herald/provider"
)

// Stage is how far a request had got when its call failed (see the
// package doc).
type Stage int

const (
	// Unsent: no connection or stream was held for the request.
	Unsent Stage = iota
	// Writing: bytes of the request may have left; it is not known to be
	// whole.
	Writing
	// Written: the whole request was written.
	Written
)

func (s Stage) String() string {
	switch s {
	case Unsent:
		return "unsent"
	case Writing:
		return "writing"
	case Written:
		return "written"
	}
	return "stage(?)"
}

// Do sends req through send (an *http.Client's Do, or an
// *http.ClientConn's RoundTrip), watching how far it gets, with GetBody
// cleared so net/http cannot replay it. With an answer it returns the
// response and ok; the caller reads and closes its body. Without one it
// returns the classified failure and !ok.
func Do(send func(*http.Request) (*http.Response, error), req *http.Request) (resp *http.Response, failed provider.Outcome, ok bool) {
	var p probe
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), p.trace()))
	req.GetBody = nil
	resp, err := send(req)
	if err != nil {
		return nil, classify(err, p.stage(), req.Context().Err()), false
	}
	return resp, provider.Outcome{}, true
}

// ReadBody reads up to 64 KiB of an answer and closes it. What could not
// be read stays unread: the caller classifies what it has.
func ReadBody(resp *http.Response) []byte {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return b
}

// NoRedirects returns a copy of c that answers a redirect instead of
// following it: a followed redirect is a second call herald did not decide
// to make, and the 3xx is classified like any other status.
func NoRedirects(c *http.Client) *http.Client {
	cp := *c
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// ClassifyStatus maps an HTTP status to an outcome by the generic table
// of DESIGN §2: 2xx Accepted; 401, 403 NotSent; 429 NotSent, rate limited,
// with the Retry-After wait; 400, 404, 410, 413, 422 Permanent; any other
// (3xx never followed, 5xx) Unknown. The reason is HTTP_<code>. An adapter
// whose provider's 410 proves the destination dead says so itself.
func ClassifyStatus(code int, retryAfter string, now time.Time) provider.Outcome {
	reason := "HTTP_" + strconv.Itoa(code)
	switch {
	case code >= 200 && code < 300:
		return provider.AcceptedOutcome("")
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return provider.NotSentOutcome(reason, 0)
	case code == http.StatusTooManyRequests:
		return provider.RateLimitedOutcome(reason, RetryAfter(retryAfter, now))
	case code == http.StatusBadRequest, code == http.StatusNotFound, code == http.StatusGone,
		code == http.StatusRequestEntityTooLarge, code == http.StatusUnprocessableEntity:
		return provider.PermanentOutcome(reason)
	}
	return provider.UnknownOutcome(reason)
}

// RetryAfter reads a Retry-After value, delta-seconds or HTTP-date,
// as a wait within 0..provider.MaxRetryAfter: a longer wait is capped, a
// value that is neither form, negative or in the past is no hint (0).
func RetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	// Atoi returns the largest int with ErrRange: far above the cap.
	if s, err := strconv.Atoi(v); (err == nil || errors.Is(err, strconv.ErrRange)) && s >= 0 {
		if s >= int(provider.MaxRetryAfter/time.Second) {
			return provider.MaxRetryAfter
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), provider.MaxRetryAfter)
	}
	return 0
}

// Classify maps a transport error to an outcome, given the stage the
// request had reached (the table in the package doc).
func Classify(err error, s Stage) provider.Outcome {
	return classify(err, s, nil)
}

// classify is Classify that also knows whether the call's context had
// ended (ctxErr), whatever error net/http returned.
func classify(err error, s Stage, ctxErr error) provider.Outcome {
	switch s {
	case Written:
		switch {
		case timedOut(err):
			return provider.UnknownOutcome("TIMEOUT")
		case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return provider.UnknownOutcome("CONNECTION_RESET")
		}
		return provider.UnknownOutcome("TRANSPORT_ERROR")
	case Writing:
		switch {
		case timedOut(err), errors.Is(ctxErr, context.DeadlineExceeded):
			return provider.UnknownOutcome("TIMEOUT_WHILE_WRITING")
		case errors.Is(err, context.Canceled), ctxErr != nil:
			return provider.UnknownOutcome("CANCELED_WHILE_WRITING")
		}
	}
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recErr tls.RecordHeaderError
	switch {
	case errors.As(err, &dnsErr):
		return provider.NotSentOutcome("DNS_FAILURE", 0)
	case errors.Is(err, syscall.ECONNREFUSED):
		return provider.NotSentOutcome("CONNECTION_REFUSED", 0)
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &recErr):
		return provider.NotSentOutcome("TLS_FAILURE", 0)
	case timedOut(err):
		return provider.NotSentOutcome("CONNECT_TIMEOUT", 0)
	}
	return provider.NotSentOutcome("CONNECTION_FAILED", 0)
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// probe records how far one request got.
type probe struct {
	started atomic.Bool // Writing: a connection or stream is held
	written atomic.Bool // Written
}

func (p *probe) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if !isHTTP2(i.Conn) {
				p.started.Store(true)
			}
		},
		WroteHeaderField: func(string, []string) {
			if !p.started.Load() {
				p.started.Store(true)
			}
		},
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				p.written.Store(true)
			}
		},
	}
}

func (p *probe) stage() Stage {
	switch {
	case p.written.Load():
		return Written
	case p.started.Load():
		return Writing
	}
	return Unsent
}

// isHTTP2 reports whether c is a TLS connection that negotiated HTTP/2,
// where GotConn comes before the wait for a stream.
func isHTTP2(c net.Conn) bool {
	tc, ok := c.(*tls.Conn)
	return ok && tc.ConnectionState().NegotiatedProtocol == "h2"
}
