package bizppurio

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/provider/httpcall"
)

const (
	// tokenLifetime is the vendor's documented token life (api/authToken:
	// 24 hours); it is assumed when the answer's "expired" is missing or
	// out of reach of the local clock.
	tokenLifetime = 24 * time.Hour
	// refreshBefore is how long before its expiry a token is renewed. In
	// that window one caller renews it and the others go on with the old
	// one, which is still valid, so a renewal never stalls sends.
	refreshBefore = time.Hour
	// renewEvery is the least time between the end of one token request
	// and a renewal of a token that is still valid. The vendor may answer
	// a renewal with a token that expires no later than the one it
	// replaces (the same expiry, re-issued); the cache then stays in the
	// renewal window, and without this pause every send would ask for a
	// token again, against a rate limit that counts token requests too. A
	// failed renewal waits as long. A token that has expired, or none, is
	// fetched at once whatever this says.
	renewEvery = time.Minute
)

// kst is the vendor's time zone: its "expired" is a wall-clock time in
// Korea (the dispatch table says so of sendtime: server time, GMT+9).
var kst = time.FixedZone("KST", 9*60*60)

// tokenError is a failed token request. The message is never sent when
// it happens, so the send is NotSent with this reason.
type tokenError struct {
	reason     string
	retryAfter time.Duration
}

func (e *tokenError) Error() string { return "bizppurio: access token: " + e.reason }

// token is an Authorization header value ("Bearer …") and when it expires.
type token struct {
	header  string
	expires time.Time
}

// refresh is one token request in flight; done closes when tok/err are set.
type refresh struct {
	done chan struct{}
	tok  token
	err  *tokenError
}

// tokenSource caches the vendor's access token and renews it with one
// request in flight at a time, and a valid token at most once every
// renewEvery.
type tokenSource struct {
	client  *http.Client
	url     string
	basic   string // "Basic base64(account:password)": a secret
	clock   clock.Clock
	timeout time.Duration

	mu     sync.Mutex
	tok    token
	flight *refresh
	// renewAfter is when a valid token in its renewal window may be
	// renewed again: renewEvery after the last token request ended.
	renewAfter time.Time

	// onWait, when set, runs when a caller starts waiting for a refresh
	// another caller makes (tests count the waiters with it).
	onWait func()
}

// get returns the Authorization header to send, fetching a token when
// there is no valid one.
func (s *tokenSource) get(ctx context.Context) (string, error) {
	s.mu.Lock()
	now := s.clock.Now()
	if s.tok.header != "" && now.Before(s.tok.expires) {
		cur := s.tok.header
		if now.Before(s.tok.expires.Add(-refreshBefore)) || s.flight != nil || now.Before(s.renewAfter) {
			s.mu.Unlock()
			return cur, nil
		}
		// Renewal window: this caller renews; the old token stands in
		// for it if the renewal fails.
		r := s.startLocked()
		s.mu.Unlock()
		s.run(ctx, r)
		if r.err != nil {
			return cur, nil
		}
		return r.tok.header, nil
	}
	r := s.flight
	if r == nil {
		r = s.startLocked()
		s.mu.Unlock()
		s.run(ctx, r)
	} else {
		s.mu.Unlock()
		if s.onWait != nil {
			s.onWait()
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return "", &tokenError{reason: "TOKEN_WAIT_CANCELED"}
		}
	}
	if r.err != nil {
		return "", r.err
	}
	return r.tok.header, nil
}

func (s *tokenSource) startLocked() *refresh {
	r := &refresh{done: make(chan struct{})}
	s.flight = r
	return r
}

// run makes the token request of r. It is not cancelled with the caller
// that happens to make it: other callers wait for its answer.
func (s *tokenSource) run(ctx context.Context, r *refresh) {
	tok, err := s.fetch(context.WithoutCancel(ctx))
	s.mu.Lock()
	if err == nil {
		s.tok = tok
	}
	r.tok, r.err = tok, err
	s.flight = nil
	s.renewAfter = s.clock.Now().Add(renewEvery)
	s.mu.Unlock()
	close(r.done)
}

// drop forgets header if it is still the cached one: the vendor refused
// it (3002, 3005), so the next get asks for a new token.
func (s *tokenSource) drop(header string) {
	s.mu.Lock()
	if s.tok.header == header {
		s.tok = token{}
	}
	s.mu.Unlock()
}

// tokenAnswer is the body of POST /v1/token.
type tokenAnswer struct {
	AccessToken string `json:"accesstoken"`
	Type        string `json:"type"`
	Expired     string `json:"expired"`
}

// fetch asks the vendor for a token: POST /v1/token with basic auth.
func (s *tokenSource) fetch(ctx context.Context) (token, *tokenError) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := newRequest(ctx, s.url, nil)
	if err != nil {
		return token{}, &tokenError{reason: "TOKEN_BAD_URL"}
	}
	req.Header.Set("Authorization", s.basic)
	resp, failed, ok := httpcall.Do(s.client.Do, req)
	if !ok {
		// Whatever happened, no message went out: only the token call
		// failed. The reason still tells a refused connection from a
		// timeout.
		return token{}, &tokenError{reason: "TOKEN_" + failed.Reason}
	}
	body := httpcall.ReadBody(resp)
	now := s.clock.Now()
	if resp.StatusCode != http.StatusOK {
		o := classify(resp.StatusCode, resp.Header, body, now)
		return token{}, &tokenError{reason: "TOKEN_" + o.Reason, retryAfter: o.RetryAfter}
	}
	var a tokenAnswer
	if json.Unmarshal(body, &a) != nil || a.AccessToken == "" {
		return token{}, &tokenError{reason: "TOKEN_BAD_RESPONSE"}
	}
	scheme := a.Type
	if scheme == "" {
		scheme = "Bearer"
	}
	return token{header: scheme + " " + a.AccessToken, expires: tokenExpiry(a.Expired, now)}, nil
}

// tokenExpiry reads the vendor's "expired" (yyyyMMddHHmmss, Korean time).
// A value that does not parse, is already past or lies further than a
// lifetime ahead (the two clocks disagree) counts as a lifetime from now.
func tokenExpiry(expired string, now time.Time) time.Time {
	t, err := time.ParseInLocation("20060102150405", expired, kst)
	if err != nil || !t.After(now) || t.Sub(now) > tokenLifetime+refreshBefore {
		return now.Add(tokenLifetime)
	}
	return t
}

// newRequest is a POST of body to url, to be sent with httpcall.Do (which
// makes sure net/http never replays it and records how far it got).
func newRequest(ctx context.Context, url string, body []byte) (*http.Request, error) {
	var rd io.Reader = http.NoBody
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	return req, nil
}
