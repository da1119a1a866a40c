package apns_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/clock"
)

// The fake speaks APNs's provider API as Apple documents it: HTTP/2 over
// TLS only, POST /3/device/{token}, a provider token verified with the
// team's public key (ES256, kid, iss, iat no older than an hour on the
// fake's clock), the apns-* headers checked, and the answer chosen by the
// device token: a status, a JSON {"reason"} body, apns-id echoed.

const (
	keyID  = "ABC123DEFG"
	teamID = "TEAM456XYZ"
	topic  = "com.example.herald"
)

// answer is what the fake says to one device token.
type answer struct {
	status   int
	reason   string
	uniqueID string // apns-unique-id, as the development environment sends
}

// seen is one request as the fake received it.
type seen struct {
	proto  int
	path   string
	header http.Header
	body   []byte
	token  string // the provider token
	claims jwt.MapClaims
	kid    string
}

type fake struct {
	srv   *httptest.Server
	pub   *ecdsa.PublicKey
	clock clock.Clock
	delay time.Duration
	// hold, when set (setHold), is called by the handler after the body
	// is read; the call's answer waits for it to return.
	hold atomic.Pointer[func(*http.Request)]

	mu       sync.Mutex
	answers  map[string]answer
	refuse   map[string]string // provider token → 403 reason
	requests []seen
	verified map[string]jwt.MapClaims
	record   bool

	conns  atomic.Int64 // connections accepted
	served atomic.Int64 // requests answered
}

var quiet = log.New(io.Discard, "", 0)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// newFake starts the fake on HTTP/2 + TLS with the given per-connection
// stream limit (0: net/http's default). It records every request.
func newFake(t testing.TB, pub *ecdsa.PublicKey, clk clock.Clock, maxStreams int) *fake {
	t.Helper()
	f := startFake(pub, clk, maxStreams, true)
	t.Cleanup(f.srv.Close)
	return f
}

func startFake(pub *ecdsa.PublicKey, clk clock.Clock, maxStreams int, record bool) *fake {
	f := &fake{
		pub: pub, clock: clk, record: record,
		answers: map[string]answer{}, refuse: map[string]string{}, verified: map[string]jwt.MapClaims{},
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	f.srv.Config.ErrorLog = quiet
	if maxStreams > 0 {
		f.srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreams}
	}
	f.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.srv.StartTLS()
	return f
}

func (f *fake) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(f.srv.Certificate())
	return p
}

// setHold makes every request wait in fn before it is answered.
func (f *fake) setHold(fn func(*http.Request)) { f.hold.Store(&fn) }

// answerFor makes the fake answer device token dev with a.
func (f *fake) answerFor(dev string, a answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[dev] = a
}

// refuseToken makes the fake answer 403 reason to calls with this token.
func (f *fake) refuseToken(token, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse[token] = reason
}

func (f *fake) seen() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.requests...)
}

func (f *fake) last(t *testing.T) seen {
	t.Helper()
	s := f.seen()
	if len(s) == 0 {
		t.Fatal("the fake saw no request")
	}
	return s[len(s)-1]
}

func reply(w http.ResponseWriter, status int, reason string) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"reason": reason})
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if hold := f.hold.Load(); hold != nil {
		(*hold)(r)
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	defer f.served.Add(1)
	token := strings.TrimPrefix(r.Header.Get("authorization"), "bearer ")
	claims, kid, verr := f.verify(token)
	if f.record {
		f.mu.Lock()
		f.requests = append(f.requests, seen{
			proto: r.ProtoMajor, path: r.URL.Path, header: r.Header.Clone(), body: body,
			token: token, claims: claims, kid: kid,
		})
		f.mu.Unlock()
	}
	if id := r.Header.Get("apns-id"); id != "" {
		w.Header().Set("apns-id", id)
	}

	dev, ok := strings.CutPrefix(r.URL.Path, "/3/device/")
	switch {
	case r.Method != http.MethodPost:
		reply(w, http.StatusMethodNotAllowed, "MethodNotAllowed")
		return
	case !ok:
		reply(w, http.StatusNotFound, "BadPath")
		return
	case r.ProtoMajor != 2:
		reply(w, http.StatusBadRequest, "BadPath")
		return
	case r.Header.Get("authorization") == "":
		reply(w, http.StatusForbidden, "MissingProviderToken")
		return
	case verr != nil:
		reply(w, http.StatusForbidden, verr.Error())
		return
	}
	f.mu.Lock()
	refused := f.refuse[token]
	a, listed := f.answers[dev]
	f.mu.Unlock()
	switch {
	case refused != "":
		reply(w, http.StatusForbidden, refused)
	case r.Header.Get("apns-topic") != topic:
		reply(w, http.StatusBadRequest, "DeviceTokenNotForTopic")
	case !uuidRE.MatchString(r.Header.Get("apns-id")):
		reply(w, http.StatusBadRequest, "BadMessageId")
	case len(r.Header.Get("apns-collapse-id")) > 64:
		reply(w, http.StatusBadRequest, "BadCollapseId")
	case r.Header.Get("apns-push-type") != "alert":
		reply(w, http.StatusBadRequest, "InvalidPushType")
	case len(body) == 0:
		reply(w, http.StatusBadRequest, "PayloadEmpty")
	case len(body) > 4096:
		reply(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge")
	case !json.Valid(body):
		reply(w, http.StatusBadRequest, "BadPayload")
	case listed && a.status != http.StatusOK:
		reply(w, a.status, a.reason)
	default:
		if a.uniqueID != "" {
			w.Header().Set("apns-unique-id", a.uniqueID)
		}
		w.WriteHeader(http.StatusOK)
	}
}

// verify checks a provider token as APNs does; the error's text is the
// reason APNs would answer. A token verified once is not verified again
// (its age still is).
func (f *fake) verify(token string) (jwt.MapClaims, string, error) {
	f.mu.Lock()
	claims, ok := f.verified[token]
	f.mu.Unlock()
	var kid string
	if !ok {
		claims = jwt.MapClaims{}
		parsed, err := jwt.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
			kid, _ = t.Header["kid"].(string)
			return f.pub, nil
		}, jwt.WithValidMethods([]string{"ES256"}), jwt.WithIssuedAt(), jwt.WithTimeFunc(f.clock.Now))
		if err != nil || !parsed.Valid || kid != keyID {
			return nil, kid, errors.New("InvalidProviderToken")
		}
		if iss, _ := claims.GetIssuer(); iss != teamID {
			return nil, kid, errors.New("InvalidProviderToken")
		}
		f.mu.Lock()
		f.verified[token] = claims
		f.mu.Unlock()
	} else {
		kid = keyID
	}
	iat, err := claims.GetIssuedAt()
	if err != nil || iat == nil {
		return nil, kid, errors.New("InvalidProviderToken")
	}
	if f.clock.Now().Sub(iat.Time) > time.Hour {
		return claims, kid, errors.New("ExpiredProviderToken")
	}
	return claims, kid, nil
}

// newKey makes a P-256 key and its .p8 (PEM PKCS#8) form.
func newKey(t testing.TB) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
