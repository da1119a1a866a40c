package fcm

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/clock"
)

const (
	// Scope is the OAuth2 scope FCM's send method asks for.
	Scope = "https://www.googleapis.com/auth/firebase.messaging"
	// grantType is the JWT bearer grant (RFC 7523) Google's token endpoint takes.
	grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	// assertionLifetime is the longest an assertion may live at Google.
	assertionLifetime = time.Hour
	// refreshEarly is how long before its expiry a cached access token is
	// replaced (half its lifetime for a token that lives shorter than twice
	// this).
	refreshEarly = 5 * time.Minute
	// maxAnswer bounds what is read of the token endpoint's answer, as
	// httpcall.ReadBody does for FCM's.
	maxAnswer = 64 << 10
)

// Reasons of a send that could not get an access token. Nothing was
// written to FCM, so each is NotSent.
const (
	// reasonAuthRefused: the token endpoint answered 400/401/403 (Google
	// answers invalid_grant for a revoked or deleted key, a wrong
	// client_email, a clock far off): the credentials need a person.
	reasonAuthRefused = "FCM_AUTH_REFUSED"
	// reasonAuthFailed: anything else (not reachable, 5xx, an answer
	// without a token).
	reasonAuthFailed = "FCM_AUTH_FAILED"
	// reasonAuthTimeout: the call's own deadline passed while it waited
	// for the token.
	reasonAuthTimeout = "FCM_AUTH_TIMEOUT"
)

// authError is a failed token refresh; its text is its reason code and
// never carries the endpoint's answer.
type authError struct{ reason string }

func (e authError) Error() string { return "fcm: access token: " + e.reason }

// serviceAccount is the part of a Google service-account key file the
// adapter reads.
type serviceAccount struct {
	Type         string `json:"type"`
	ProjectID    string `json:"project_id"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	ClientEmail  string `json:"client_email"`
	TokenURI     string `json:"token_uri"`
}

// tokenSource hands out an OAuth2 access token for FCM: cached, replaced
// refreshEarly before it expires, with at most one refresh in flight.
//
// A caller holding no valid token waits for the refresh in flight (or
// starts one); a caller inside the refresh window keeps using the cached
// token, which is still valid, while one refresh runs in the background.
// A failed refresh fails only the callers waiting on it; the next call
// starts another.
type tokenSource struct {
	client   *http.Client
	tokenURL string // where the assertion is posted
	audience string // the assertion's aud: the key file's token_uri
	email    string
	keyID    string
	key      *rsa.PrivateKey
	clock    clock.Clock
	timeout  time.Duration

	mu        sync.Mutex
	token     string
	expires   time.Time
	refreshAt time.Time
	inflight  *refresh

	// Test hooks (export_test.go): onWait runs when a caller starts
	// waiting on a refresh, onRefreshed when a refresh has ended.
	onWait      func()
	onRefreshed func()
}

// refresh is one token request; done closes when token or err is set.
type refresh struct {
	done  chan struct{}
	token string
	err   error
}

// get returns an access token, waiting for a refresh when none is valid.
func (s *tokenSource) get(ctx context.Context) (string, error) {
	s.mu.Lock()
	now := s.clock.Now()
	if s.token != "" && now.Before(s.expires) {
		tok := s.token
		if !now.Before(s.refreshAt) {
			s.startLocked()
		}
		s.mu.Unlock()
		return tok, nil
	}
	r := s.startLocked()
	onWait := s.onWait
	s.mu.Unlock()
	if onWait != nil {
		onWait()
	}
	select {
	case <-r.done:
		return r.token, r.err
	case <-ctx.Done():
		return "", authError{reasonAuthTimeout}
	}
}

// startLocked returns the refresh in flight, starting one if there is none.
func (s *tokenSource) startLocked() *refresh {
	if s.inflight == nil {
		s.inflight = &refresh{done: make(chan struct{})}
		go s.run(s.inflight)
	}
	return s.inflight
}

// run makes the token request of r. It is bound by the adapter's timeout
// alone, not by the context of the call that started it: the callers
// waiting on it each give up at their own deadline.
func (s *tokenSource) run(r *refresh) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	issued := s.clock.Now()
	tok, lifetime, err := s.fetch(ctx, issued)

	s.mu.Lock()
	if err == nil {
		s.token = tok
		s.expires = issued.Add(lifetime)
		s.refreshAt = s.expires.Add(-min(refreshEarly, lifetime/2))
	}
	r.token, r.err = tok, err
	s.inflight = nil
	onRefreshed := s.onRefreshed
	s.mu.Unlock()
	close(r.done)
	if onRefreshed != nil {
		onRefreshed()
	}
}

// drop forgets tok if it is still the cached token: FCM refused it, so the
// next call fetches another instead of failing the same way until expiry.
func (s *tokenSource) drop(tok string) {
	s.mu.Lock()
	if s.token == tok {
		s.token = ""
	}
	s.mu.Unlock()
}

// assertion is the signed JWT exchanged for an access token.
func (s *tokenSource) assertion(now time.Time) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss":   s.email,
		"scope": Scope,
		"aud":   s.audience,
		"iat":   now.Unix(),
		"exp":   now.Add(assertionLifetime).Unix(),
	})
	if s.keyID != "" {
		t.Header["kid"] = s.keyID
	}
	return t.SignedString(s.key)
}

// fetch exchanges a fresh assertion for an access token and its lifetime.
// Its errors are authError values: no answer text, no secret.
func (s *tokenSource) fetch(ctx context.Context, now time.Time) (string, time.Duration, error) {
	assertion, err := s.assertion(now)
	if err != nil {
		return "", 0, authError{reasonAuthFailed}
	}
	form := url.Values{"grant_type": {grantType}, "assertion": {assertion}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, authError{reasonAuthFailed}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := s.client.Do(req)
	if err != nil {
		return "", 0, authError{reasonAuthFailed}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	switch {
	case resp.StatusCode == http.StatusBadRequest, resp.StatusCode == http.StatusUnauthorized,
		resp.StatusCode == http.StatusForbidden:
		return "", 0, authError{reasonAuthRefused}
	case resp.StatusCode != http.StatusOK, err != nil:
		return "", 0, authError{reasonAuthFailed}
	}
	var answer struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		TokenType   string `json:"token_type"`
	}
	if json.Unmarshal(body, &answer) != nil || answer.AccessToken == "" ||
		answer.ExpiresIn <= 0 || answer.ExpiresIn > int64(24*time.Hour/time.Second) ||
		(answer.TokenType != "" && !strings.EqualFold(answer.TokenType, "Bearer")) {
		return "", 0, authError{reasonAuthFailed}
	}
	return answer.AccessToken, time.Duration(answer.ExpiresIn) * time.Second, nil
}
