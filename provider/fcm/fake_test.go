package fcm_test

// The fake Google: one TLS server speaking HTTP/2 (as fcm.googleapis.com
// does) that is both the OAuth2 token endpoint and FCM's send method. The
// token endpoint checks each assertion's RS256 signature with the public
// half of a key the test generated, and its claims; the send method
// accepts only access tokens the token endpoint issued.

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/fcm"
)

const (
	project     = "proj-1"
	clientEmail = "herald@proj-1.iam.gserviceaccount.com"
	keyID       = "key-id-1"
	sendPath    = "/v1/projects/" + project + "/messages:send"
	// tokenLife is the expires_in of the fake's access tokens.
	tokenLife = time.Hour
)

// testKey is one RSA key for the whole package: generating one per test
// costs more than the tests themselves.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// keyPEM is testKey as a key file holds it (PKCS #8).
func keyPEM() string {
	der, err := x509.MarshalPKCS8PrivateKey(testKey())
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// keyFile is a service-account key file naming tokenURI.
func keyFile(tokenURI string) []byte {
	b, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": project, "private_key_id": keyID,
		"private_key": keyPEM(), "client_email": clientEmail, "client_id": "1234567890",
		"auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": tokenURI,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// sent is one request the send method accepted.
type sent struct {
	bearer string
	proto  int
	body   map[string]any
}

// fake is the Google of one test.
type fake struct {
	t     testing.TB
	srv   *httptest.Server
	clock *clock.Fake

	mu         sync.Mutex
	tokenCalls int
	issued     map[string]bool
	assertions []string
	sends      []sent
	// tokenAnswer, when set, answers token request n (from 1) instead of
	// issuing a token.
	tokenAnswer func(w http.ResponseWriter, n int)
	// tokenHold, when set, is told of each token request as it arrives
	// and waits for tokenRelease to close before answering.
	tokenHold, tokenRelease chan struct{}
	// sendAnswer, when set, answers a send whose token is valid instead of
	// accepting it.
	sendAnswer http.HandlerFunc
}

func newFake(t testing.TB) *fake {
	fk := &fake{t: t, clock: clock.NewFake(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)), issued: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", fk.token)
	mux.HandleFunc("POST "+sendPath, fk.send)
	fk.srv = httptest.NewUnstartedServer(mux)
	fk.srv.EnableHTTP2 = true
	fk.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	fk.srv.StartTLS()
	t.Cleanup(fk.srv.Close)
	return fk
}

// config is the adapter configuration that points at the fake.
func (fk *fake) config() fcm.Config {
	return fcm.Config{
		ServiceAccountJSON: keyFile(fk.srv.URL + "/token"),
		Endpoint:           fk.srv.URL,
		Timeout:            testenv.Patience,
		HTTPClient:         &http.Client{Transport: fk.srv.Client().Transport},
		Clock:              fk.clock,
	}
}

// setup returns an adapter pointed at a fresh fake.
func setup(t testing.TB) (*fcm.FCM, *fake) {
	t.Helper()
	return setupWith(t, func(*fcm.Config) {})
}

// setupWith is setup with the configuration changed by edit first.
func setupWith(t testing.TB, edit func(*fcm.Config)) (*fcm.FCM, *fake) {
	t.Helper()
	fk := newFake(t)
	cfg := fk.config()
	edit(&cfg)
	p, err := fcm.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p, fk
}

// token is the OAuth2 token endpoint.
func (fk *fake) token(w http.ResponseWriter, r *http.Request) {
	fk.mu.Lock()
	fk.tokenCalls++
	n := fk.tokenCalls
	hold, release, answer := fk.tokenHold, fk.tokenRelease, fk.tokenAnswer
	fk.mu.Unlock()
	if hold != nil {
		hold <- struct{}{}
		<-release
	}
	assertion := r.PostFormValue("assertion")
	fk.mu.Lock()
	fk.assertions = append(fk.assertions, assertion)
	fk.mu.Unlock()
	if err := fk.checkAssertion(r.PostFormValue("grant_type"), assertion); err != nil {
		fk.t.Errorf("token request %d: %v", n, err)
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`)
		return
	}
	if answer != nil {
		answer(w, n)
		return
	}
	tok := fmt.Sprintf("ya29.access-token-%d", n)
	fk.mu.Lock()
	fk.issued[tok] = true
	fk.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"access_token":%q,"expires_in":%d,"token_type":"Bearer"}`, tok, int(tokenLife/time.Second))
}

// checkAssertion verifies an assertion as Google's token endpoint would:
// the RS256 signature by the service account's key, its kid, issuer,
// audience, scope, and an iat that is the (fake) time of the request.
func (fk *fake) checkAssertion(grant, assertion string) error {
	if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		return fmt.Errorf("grant_type = %q", grant)
	}
	claims := jwt.MapClaims{}
	tok, err := jwt.ParseWithClaims(assertion, claims, func(t *jwt.Token) (any, error) { return &testKey().PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(fk.clock.Now), jwt.WithIssuedAt(),
		jwt.WithExpirationRequired(), jwt.WithIssuer(clientEmail), jwt.WithAudience(fk.srv.URL+"/token"))
	if err != nil {
		return fmt.Errorf("assertion: %w", err)
	}
	if tok.Header["kid"] != keyID {
		return fmt.Errorf("kid = %v, want %s", tok.Header["kid"], keyID)
	}
	if claims["scope"] != fcm.Scope {
		return fmt.Errorf("scope = %v", claims["scope"])
	}
	iat, _ := claims.GetIssuedAt()
	exp, _ := claims.GetExpirationTime()
	if now := fk.clock.Now(); !iat.Time.Equal(now.Truncate(time.Second)) || exp.Time.Sub(iat.Time) != time.Hour {
		return fmt.Errorf("iat %v exp %v at %v: want iat now and an hour's life", iat, exp, now)
	}
	return nil
}

// send is FCM's messages:send.
func (fk *fake) send(w http.ResponseWriter, r *http.Request) {
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	fk.mu.Lock()
	valid := ok && fk.issued[bearer]
	answer := fk.sendAnswer
	fk.mu.Unlock()
	if !valid {
		fk.t.Errorf("send with a token the fake never issued")
		writeError(w, 401, "UNAUTHENTICATED", "")
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		fk.t.Errorf("send body: %v (Content-Type %q)", err, r.Header.Get("Content-Type"))
	}
	fk.mu.Lock()
	fk.sends = append(fk.sends, sent{bearer: bearer, proto: r.ProtoMajor, body: body})
	n := len(fk.sends)
	fk.mu.Unlock()
	if answer != nil {
		answer(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"name": "projects/%s/messages/0:%d%%abc"}`, project, n)
}

// writeError answers as FCM does: the error object, with an FcmError
// detail when errorCode is set.
func writeError(w http.ResponseWriter, code int, status, errorCode string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	io.WriteString(w, errorBody(code, status, errorCode, "Request contains an invalid argument."))
}

func errorBody(code int, status, errorCode, message string) string {
	details := "[]"
	if errorCode != "" {
		details = fmt.Sprintf(`[{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": %q}]`, errorCode)
	}
	return fmt.Sprintf(`{"error": {"code": %d, "message": %q, "status": %q, "details": %s}}`, code, message, status, details)
}

// hold makes the token requests from now on wait: each one's arrival is
// sent on the first channel, and they answer once the second is closed.
func (fk *fake) hold() (arrived chan struct{}, release chan struct{}) {
	arrived, release = make(chan struct{}, 64), make(chan struct{})
	fk.mu.Lock()
	fk.tokenHold, fk.tokenRelease = arrived, release
	fk.mu.Unlock()
	return arrived, release
}

func (fk *fake) setTokenAnswer(f func(w http.ResponseWriter, n int)) {
	fk.mu.Lock()
	fk.tokenAnswer = f
	fk.mu.Unlock()
}

func (fk *fake) setSendAnswer(f http.HandlerFunc) {
	fk.mu.Lock()
	fk.sendAnswer = f
	fk.mu.Unlock()
}

func (fk *fake) counts() (tokens, sends int) {
	fk.mu.Lock()
	defer fk.mu.Unlock()
	return fk.tokenCalls, len(fk.sends)
}

func (fk *fake) sent() []sent {
	fk.mu.Lock()
	defer fk.mu.Unlock()
	return append([]sent(nil), fk.sends...)
}

func message(id string) provider.Message {
	return provider.Message{
		MessageID: id, Tenant: "tenant-1", Recipient: "user-42", Kind: "payment.paid",
		Channel: heraldtype.ChannelPush, Address: "device-token-" + id,
		Title: "Payment received", Body: "Paid 5,000 won",
	}
}
