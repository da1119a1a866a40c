// Package webhook is the provider that POSTs a message as JSON to a URL.
//
// It is the reference for how every adapter classifies an answer (DESIGN §2):
// the one fact that decides between "definitely not sent" and "unknown" is
// how far the request got (package httpcall, which sends it): a failure
// before a connection was held for it cannot have reached the receiver; a
// deadline after that may have left the receiver the whole request, even
// before net/http reports it written; any failure after it was written
// might have reached it.
//
// net/http replays a request on its own when it believes the request is
// idempotent, and a request carrying an Idempotency-Key header qualifies.
// A replay is a second call herald did not decide to make, so
// httpcall.Do clears Request.GetBody, which makes the request impossible
// to replay.
//
// # Classification
//
//	answer                                           class      reason
//	2xx                                              Accepted   -
//	401, 403                                         NotSent    HTTP_401, HTTP_403
//	429 (Retry-After, seconds or date, up to 1 h)    NotSent    HTTP_429
//	400, 404, 413, 422                               Permanent  HTTP_<code>
//	410                                              Permanent  HTTP_410, DeadDestination
//	3xx (never followed), 5xx, any other status      Unknown    HTTP_<code>
//	DNS failure before the request was written       NotSent    DNS_FAILURE
//	connection refused before it was written         NotSent    CONNECTION_REFUSED
//	TLS certificate/handshake failure before it      NotSent    TLS_FAILURE
//	deadline before a connection was held for it     NotSent    CONNECT_TIMEOUT
//	  (dial, TLS handshake, wait for a pooled one)
//	deadline or cancel while it was being written    Unknown    TIMEOUT_WHILE_WRITING,
//	                                                            CANCELED_WHILE_WRITING
//	any other failure before it was written (the     NotSent    CONNECTION_FAILED
//	  write itself failed: EPIPE, reset, closed)
//	deadline after it was written                    Unknown    TIMEOUT
//	reset or EOF after it was written                Unknown    CONNECTION_RESET
//	any other failure after it was written           Unknown    TRANSPORT_ERROR
//	the body cannot be encoded / the URL is invalid  Permanent  ENCODE_FAILED, BAD_URL
//
// # Signing (Standard Webhooks)
//
// With Config.Secrets set, every request is signed as the Standard Webhooks
// specification asks (github.com/standard-webhooks/standard-webhooks,
// spec/standard-webhooks.md, "Signature scheme" and "Webhook headers"):
// webhook-id is the message id, webhook-timestamp the Unix seconds of this
// attempt (from Config.Now), and webhook-signature holds one "v1,<base64
// HMAC-SHA256>" per secret, space-separated, over id + "." + timestamp + "."
// + the exact body bytes sent. A secret is written "whsec_" + the base64 of
// its key (ParseSecret); the key is 24 to 64 bytes. Signing with two
// secrets, the new and the old, is the specification's rotation: a receiver
// that knows either accepts the request. Sign reproduces the signature the
// specification's own libraries are tested against (libraries/go
// webhook_test.go, TestWebhookSign). The contract headers Idempotency-Key
// and X-Herald-Message-Id are sent either way, and signing changes nothing
// in the classification: a receiver that refuses a signature with 401
// makes the call NotSent, retried with a new timestamp.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall"
)

// Config configures a webhook provider.
type Config struct {
	// URL receives the POST.
	URL string
	// Timeout bounds the whole call. Defaults to 10 seconds.
	Timeout time.Duration
	// Client overrides the HTTP client (tests use it for TLS). Its redirect
	// policy is replaced: a redirect is answered, never followed.
	Client *http.Client
	// Proxy picks the proxy each request goes through; one that returns
	// a nil URL sends it directly. Unused with Client. Defaults to
	// http.ProxyFromEnvironment: HTTPS_PROXY, HTTP_PROXY and NO_PROXY, as
	// the FCM and Twilio adapters read them (never for a loopback
	// receiver).
	Proxy func(*http.Request) (*url.URL, error)
	// RootCAs are the certificates the receiver's is verified against
	// instead of the system's roots: a private CA's, or a self-signed
	// certificate itself. Unused with Client. Defaults to nil: the
	// system's roots.
	RootCAs *x509.CertPool
	// Secrets are the raw Standard Webhooks keys (ParseSecret decodes a
	// "whsec_…" secret) each request is signed with, one signature per
	// key: the new and the old one while a rotation's grace period lasts.
	// Defaults to none: the request is not signed.
	Secrets [][]byte
	// Now is the clock the webhook-timestamp is read from. Defaults to
	// time.Now.
	Now func() time.Time
}

// Validate reports a configuration New would accept but should not run: a
// signing key of the wrong size. Its error names the key by index, never
// by value.
func (c Config) Validate() error {
	for i, key := range c.Secrets {
		if err := checkKey(key); err != nil {
			return fmt.Errorf("webhook: secrets[%d]: %w", i, err)
		}
	}
	return nil
}

// maxConns bounds the connections a webhook provider keeps to its receiver,
// in use and idle: the most calls one lane may have in flight
// (config: lanes.*.concurrency ≤ 4096). Idle ones close after 4 seconds.
const maxConns = 4096

// Webhook posts messages to one URL.
type Webhook struct {
	url     string
	timeout time.Duration
	client  *http.Client
	keys    [][]byte
	now     func() time.Time
}

var _ provider.Provider = (*Webhook)(nil)

// New returns a webhook provider.
func New(cfg Config) *Webhook {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Proxy == nil {
		cfg.Proxy = http.ProxyFromEnvironment
	}
	c := cfg.Client
	if c == nil {
		c = &http.Client{Transport: &http.Transport{
			// Through a proxy the stages hold as they are: an https
			// request's tunnel is set up before the connection is held
			// (a refused CONNECT is NotSent), and a proxy's own error
			// answer (502, 504) is a status like any other: Unknown.
			Proxy:       cfg.Proxy,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// Every connection that ends a call goes back to the pool: an
			// idle limit below the calls in flight closes the surplus after
			// each answer and dials it again for the next call (BenchmarkSend:
			// with 128, 2,048 calls in flight opened 0.2-0.7 connections
			// per call, cost about 1.5 times the CPU per call, and left the closed
			// ones in TIME_WAIT, which exhausts the ephemeral ports at a
			// few thousand sends/s). Past maxConns a call waits for a
			// connection, unwritten, so one that waits out its Timeout is
			// NotSent.
			MaxIdleConns:        maxConns,
			MaxIdleConnsPerHost: maxConns,
			MaxConnsPerHost:     maxConns,
			// Shorter than common server keep-alive timeouts (Node's is 5 s):
			// reusing a connection the server is closing can make a call
			// UNKNOWN, because the request may count as written before the
			// close is seen.
			IdleConnTimeout:     4 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second,
			TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs},
		}}
	}
	c = httpcall.NoRedirects(c)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	keys := make([][]byte, len(cfg.Secrets))
	for i, k := range cfg.Secrets {
		keys[i] = bytes.Clone(k)
	}
	return &Webhook{url: cfg.URL, timeout: cfg.Timeout, client: c, keys: keys, now: cfg.Now}
}

// drainGrace is how long a call reads an answer's body after its status
// (Send), to reuse the connection.
const drainGrace = 100 * time.Millisecond

type payload struct {
	MessageID string `json:"message_id"`
	Recipient string `json:"recipient"`
	Kind      string `json:"kind"`
	Channel   string `json:"channel"`
	Title     string `json:"title"`
	Body      string `json:"body"`
}

// Send posts m and classifies the answer.
func (w *Webhook) Send(ctx context.Context, m provider.Message) provider.Outcome {
	body, err := json.Marshal(payload{
		MessageID: m.MessageID, Recipient: m.Recipient, Kind: m.Kind,
		Channel: string(m.Channel), Title: m.Title, Body: m.Body,
	})
	if err != nil {
		return provider.PermanentOutcome("ENCODE_FAILED")
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return provider.PermanentOutcome("BAD_URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", m.MessageID)
	req.Header.Set("X-Herald-Message-Id", m.MessageID)
	if len(w.keys) > 0 {
		now := w.now()
		req.Header.Set(HeaderID, m.MessageID)
		req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(HeaderSignature, Sign(w.keys, m.MessageID, now, body))
	}

	resp, failed, ok := httpcall.Do(w.client.Do, req)
	if !ok {
		return failed
	}
	// The status decides. Drain a little so the connection can be
	// reused, but for at most drainGrace: a receiver that answers 2xx and
	// then stalls its body would hold the send's slot until the timeout
	// for an outcome already known. Cut short, the connection is closed
	// instead of reused.
	stop := time.AfterFunc(drainGrace, cancel)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	stop.Stop()
	resp.Body.Close()
	return ClassifyStatus(resp.StatusCode, resp.Header.Get("Retry-After"), time.Now())
}

// ClassifyStatus maps an HTTP status to an outcome (DESIGN §2):
// httpcall.ClassifyStatus, and a 410 Gone says the destination is gone for
// good, as APNs does for an unregistered token. A push sent to one device
// through a webhook deactivates that device.
func ClassifyStatus(code int, retryAfter string, now time.Time) provider.Outcome {
	if code == http.StatusGone {
		return provider.DeadDestinationOutcome("HTTP_410")
	}
	return httpcall.ClassifyStatus(code, retryAfter, now)
}
