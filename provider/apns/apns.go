// Package apns is the provider for Apple Push Notification service: one
// HTTP/2 POST per message to {Endpoint}/3/device/{device token}, with token
// (JWT) authentication.
//
// # The request
//
//   - authorization: bearer <provider token>: an ES256 JWT signed with the
//     team's .p8 key, header kid = KeyID, claims iss = TeamID and iat. One
//     token serves every call and is signed again at 50 minutes (Apple
//     refuses a token older than an hour, and answers
//     TooManyProviderTokenUpdates to one signed more often than every 20
//     minutes), or at once when APNs answers ExpiredProviderToken or
//     InvalidProviderToken to a token at least a minute old.
//   - apns-id: APNs wants a canonical UUID, so it is APNsID(message id), the
//     name-based UUID (version 5) of the message id in herald's namespace:
//     stable across copies and processes, and computable by a person from
//     the message id alone.
//   - apns-push-type: alert; apns-topic: Topic (the app's bundle id);
//     apns-priority: Priority; apns-expiration: now + TTL.
//   - apns-collapse-id: CollapseID, or with CollapseByKind the message kind
//     (a kind over APNs's 64 bytes goes as the hex SHA-256 of it); none
//     otherwise, so two notifications of one kind both show.
//   - body: {"aps":{"alert":{"title","body"}},"message_id"}: message_id lets
//     the app post its receipt (POST /v1/me/receipts). A body over APNs's
//     4,096 bytes is refused here (APNS_PAYLOAD_TOO_LARGE) without a call.
//
// net/http would replay a request on its own on some connection errors; a
// replay is a second call herald did not decide to make, so Request.GetBody
// is cleared (httpcall.Do does it). HTTP/2 is required (no HTTP/1.1
// fallback); a redirect is never followed.
//
// # Connections
//
// A connection carries as many calls as the server's
// SETTINGS_MAX_CONCURRENT_STREAMS allows (Apple's is in the hundreds to a
// thousand, and drops to 1 after a rejected notification). Calls take
// streams from a pool of the adapter's own: when every connection is full,
// waiting calls are served first come, first served as streams free, and
// one more connection is dialled, up to MaxConns: one dial at a time, and
// none while the newest connection has answered no call yet (its limit
// may rise once a call is authenticated), for at most a second. A call
// that waits for a stream longer than its Timeout is NotSent
// (CONNECT_TIMEOUT): nothing of it was written. A dial that fails fails
// the calls waiting at that moment as NotSent, with the dial's reason.
// net/http's own pool would dial a connection for every call that finds
// the pool full (883 connections for 1,000 calls started at once, in a
// test against a 250-stream server), which APNs may take for an attack.
//
// # Classification
//
// How far the request got decides between NotSent and Unknown for a
// transport failure, as in every adapter (package httpcall, whose Do takes
// the pool connection's RoundTrip): a call still waiting for a stream has
// sent nothing; once its HEADERS frame is being written, a deadline makes
// it Unknown even before net/http reports it written, since RoundTrip
// returns on the deadline without waiting for its writer and APNs may
// hold the whole request. An answer from APNs is classified by its status
// and the reason in its JSON body; the outcome's reason is APNS_ and the
// reason in upper snake case, or HTTP_<status> for a reason this table does
// not know:
//
//	status  reason                              class       outcome reason
//	200     (any)                               Accepted    ProviderRef = apns-unique-id (sandbox only), else apns-id
//	400     BadDeviceToken                      Permanent,  APNS_BAD_DEVICE_TOKEN
//	                                            dead device
//	400     every other reason (BadCollapseId,  Permanent   APNS_BAD_COLLAPSE_ID, APNS_DEVICE_TOKEN_NOT_FOR_TOPIC, …
//	        BadExpirationDate, BadMessageId,                (HTTP_400 for an unlisted reason)
//	        BadPriority, BadTopic,
//	        DeviceTokenNotForTopic, DuplicateHeaders,
//	        IdleTimeout, InvalidPushType,
//	        MissingDeviceToken, MissingTopic,
//	        PayloadEmpty, TopicDisallowed)
//	403     ExpiredProviderToken,               NotSent     APNS_EXPIRED_PROVIDER_TOKEN, APNS_INVALID_PROVIDER_TOKEN;
//	        InvalidProviderToken                            the token is signed again for the next call
//	403     every other reason (BadCertificate, NotSent     APNS_FORBIDDEN, APNS_MISSING_PROVIDER_TOKEN, … (HTTP_403)
//	        BadCertificateEnvironment,
//	        Forbidden, MissingProviderToken)
//	404     BadPath                             Permanent   APNS_BAD_PATH
//	405     MethodNotAllowed                    Permanent   APNS_METHOD_NOT_ALLOWED
//	410     Unregistered, ExpiredToken          Permanent,  APNS_UNREGISTERED, APNS_EXPIRED_TOKEN (HTTP_410)
//	        (any reason)                        dead device
//	413     PayloadTooLarge                     Permanent   APNS_PAYLOAD_TOO_LARGE
//	429     TooManyRequests,                    NotSent     APNS_TOO_MANY_REQUESTS, APNS_TOO_MANY_PROVIDER_TOKEN_UPDATES;
//	        TooManyProviderTokenUpdates                     RetryAfter 1 minute (APNs sends no Retry-After)
//	500     InternalServerError                 Unknown     APNS_INTERNAL_SERVER_ERROR
//	503     ServiceUnavailable, Shutdown        Unknown     APNS_SERVICE_UNAVAILABLE, APNS_SHUTDOWN
//	other   (the generic table)                 httpcall.ClassifyStatus
//	—       refused before a call: no device    Permanent   MISSING_DEVICE_TOKEN
//	        token; a body over 4,096 bytes      Permanent   APNS_PAYLOAD_TOO_LARGE
//	        a token that is not hex             Permanent,  APNS_MALFORMED_DEVICE_TOKEN
//	                                            dead device
//	—       transport failure                   httpcall: NotSent before a stream was held (CONNECTION_REFUSED,
//	                                            DNS_FAILURE, TLS_FAILURE, CONNECT_TIMEOUT, CONNECTION_FAILED)
//	                                            or when the write itself failed (CONNECTION_FAILED);
//	                                            Unknown for a deadline or cancel while it was being written
//	                                            (TIMEOUT_WHILE_WRITING, CANCELED_WHILE_WRITING) and for any
//	                                            failure after (TIMEOUT, CONNECTION_RESET, TRANSPORT_ERROR)
//
// BadDeviceToken is a dead device: Apple answers it for a token that is not
// a token of this app in this environment (a sandbox build's token sent to
// production, or the reverse), and such a token never becomes valid for
// this topic here. The cost of that choice: an Endpoint pointed at the
// wrong environment answers BadDeviceToken for every device, and each would
// be deactivated; the device registers again when the app next starts.
// DeviceTokenNotForTopic is not taken as dead, since its usual cause is a
// Topic configured wrong, which would otherwise deactivate every device.
//
// A 5xx is Unknown although Apple's documentation suggests a retry after
// 15 minutes: APNs has no idempotency key, so herald cannot know the first
// call was not delivered, and DESIGN §2 never resends an unknown.
//
// A stream refused by HTTP/2 itself (RST_STREAM REFUSED_STREAM, or above
// the last stream id of a GOAWAY) was not processed, by RFC 9113; net/http
// does not say which of its errors those are, so such a call is Unknown
// when its request had been written. Pings on idle connections
// (SendPingTimeout) and closing idle connections after IdleConnTimeout
// keep calls off connections the server is closing.
//
// Sources: Apple's "Sending notification requests to APNs", "Handling
// notification responses from APNs" (status codes, reason strings, the
// apns-unique-id header, "don't retry BadDeviceToken, ExpiredToken,
// Unregistered, PayloadTooLarge") and "Establishing a token-based
// connection to APNs" (kid/iss/iat, ES256, refresh at most every 20 and at
// least every 60 minutes), developer.apple.com/documentation/usernotifications;
// the openradar report 27870881 (APNs lowers a connection's stream limit
// to 1 after a rejected notification).
package apns

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall"
)

// APNs endpoints.
const (
	Production = "https://api.push.apple.com"
	Sandbox    = "https://api.sandbox.push.apple.com"
)

// Limits APNs sets.
const (
	// MaxPayload is the largest body APNs takes for an alert push.
	MaxPayload = 4096
	// MaxCollapseID is the longest apns-collapse-id, in bytes.
	MaxCollapseID = 64
	// TooManyRequestsBackoff is the RetryAfter of a 429: APNs sends no
	// Retry-After, and its throttle is per device token.
	TooManyRequestsBackoff = time.Minute
)

// Config configures an APNs provider. Credentials arrive as bytes and
// strings; the config layer reads them from files or the environment.
type Config struct {
	// KeyP8 is the contents of the .p8 file Apple issues: a PEM PKCS#8 EC
	// P-256 private key. Required; never appears in an error.
	KeyP8 []byte
	// KeyID is the 10-character key id of KeyP8 (the JWT's kid). Required.
	KeyID string
	// TeamID is the 10-character team id (the JWT's iss). Required.
	TeamID string
	// Topic is the app's bundle id (apns-topic). Required.
	Topic string
	// Endpoint is the base URL. Defaults to Production; Sandbox for
	// development builds of the app.
	Endpoint string
	// Timeout bounds one call, the wait for a stream included. Defaults
	// to 10 seconds.
	Timeout time.Duration
	// Priority is apns-priority: 10 (at once), 5 (power-saving) or 1.
	// Defaults to 10.
	Priority int
	// TTL sets apns-expiration to now + TTL: how long APNs keeps trying
	// an offline device. A negative TTL sends 0 (deliver now or never).
	// Defaults to 24 hours.
	TTL time.Duration
	// CollapseID, when set, is the apns-collapse-id of every message (at
	// most 64 bytes). Defaults to none.
	CollapseID string
	// CollapseByKind sends the message kind as apns-collapse-id when
	// CollapseID is empty: the device shows only the newest notification
	// of a kind. Defaults to false.
	CollapseByKind bool
	// MaxConns caps the HTTP/2 connections to the endpoint. Calls beyond
	// what they carry (streams per connection, as APNs sets them) wait for
	// a free stream, within their Timeout. Defaults to 32.
	MaxConns int
	// RootCAs replaces the system roots (tests: the fake's certificate).
	// Defaults to the system roots.
	RootCAs *x509.CertPool
	// Clock is read for the token's iat and rotation and for
	// apns-expiration. Defaults to the system clock.
	Clock clock.Clock
}

// APNs sends alert pushes through Apple Push Notification service.
type APNs struct {
	base       string // endpoint + "/3/device/"
	topic      string
	priority   string
	ttl        time.Duration
	collapseID string
	byKind     bool
	timeout    time.Duration
	pool       *pool
	clock      clock.Clock
	tokens     *tokenSource
}

var _ provider.Provider = (*APNs)(nil)

// New checks cfg and returns an APNs provider. It signs the first provider
// token, so a key that cannot sign fails here, not on the first call. Its
// error is one line and holds no secret.
func New(cfg Config) (*APNs, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = Production
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Priority == 0 {
		cfg.Priority = 10
	}
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 32
	}
	switch {
	case len(cfg.KeyP8) == 0:
		return nil, errors.New("apns: key is empty")
	case cfg.KeyID == "":
		return nil, errors.New("apns: key_id is empty")
	case cfg.TeamID == "":
		return nil, errors.New("apns: team_id is empty")
	case cfg.Topic == "":
		return nil, errors.New("apns: topic is empty")
	case cfg.Priority != 10 && cfg.Priority != 5 && cfg.Priority != 1:
		return nil, fmt.Errorf("apns: priority %d is not 10, 5 or 1", cfg.Priority)
	case len(cfg.CollapseID) > MaxCollapseID:
		return nil, fmt.Errorf("apns: collapse_id is longer than %d bytes", MaxCollapseID)
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("apns: endpoint is not an https URL")
	}
	key, err := parseKey(cfg.KeyP8)
	if err != nil {
		return nil, fmt.Errorf("apns: key: %w", err)
	}
	tokens := &tokenSource{key: key, keyID: cfg.KeyID, teamID: cfg.TeamID, clock: cfg.Clock}
	if _, err := tokens.get(); err != nil {
		return nil, fmt.Errorf("apns: key: %w", err)
	}

	port := u.Port()
	if port == "" {
		port = "443"
	}
	p := &pool{
		tr:          newTransport(cfg.RootCAs),
		addr:        net.JoinHostPort(u.Hostname(), port),
		maxConns:    cfg.MaxConns,
		dialTimeout: 10 * time.Second,
		provenAfter: provenAfter,
	}
	return &APNs{
		base:       strings.TrimRight(cfg.Endpoint, "/") + "/3/device/",
		topic:      cfg.Topic,
		priority:   strconv.Itoa(cfg.Priority),
		ttl:        cfg.TTL,
		collapseID: cfg.CollapseID,
		byKind:     cfg.CollapseByKind,
		timeout:    cfg.Timeout,
		pool:       p,
		clock:      cfg.Clock,
		tokens:     tokens,
	}, nil
}

// Close closes the provider's connections; calls in flight end with an
// error (Unknown where their request was written).
func (a *APNs) Close() error {
	a.pool.close()
	return nil
}

// newTransport dials the pool's connections: HTTP/2 only, over TLS.
func newTransport(roots *x509.CertPool) *http.Transport {
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 5 * time.Second,
		ForceAttemptHTTP2:   true,
		Protocols:           &protocols,
		// An idle connection is closed by herald before APNs closes it,
		// so calls seldom race a server's GOAWAY (see the package doc).
		IdleConnTimeout: 5 * time.Minute,
		HTTP2: &http.HTTP2Config{
			// A connection silent for 30 s is pinged, and closed when the
			// ping is not answered in 10 s: calls go to live connections.
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     10 * time.Second,
		},
	}
}

type alert struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

type aps struct {
	Alert alert `json:"alert"`
}

type payload struct {
	APS       aps    `json:"aps"`
	MessageID string `json:"message_id"`
}

// Send pushes m to the device whose token is m.Address and classifies the
// answer.
func (a *APNs) Send(ctx context.Context, m provider.Message) provider.Outcome {
	if m.Address == "" {
		return provider.PermanentOutcome("MISSING_DEVICE_TOKEN")
	}
	if !WellFormedToken(m.Address) {
		return provider.DeadDestinationOutcome("APNS_MALFORMED_DEVICE_TOKEN")
	}
	body, err := json.Marshal(payload{APS: aps{Alert: alert{Title: m.Title, Body: m.Body}}, MessageID: m.MessageID})
	if err != nil {
		return provider.PermanentOutcome("ENCODE_FAILED")
	}
	if len(body) > MaxPayload {
		return provider.PermanentOutcome("APNS_PAYLOAD_TOO_LARGE")
	}
	token, err := a.tokens.get()
	if err != nil {
		return provider.NotSentOutcome("APNS_TOKEN_SIGN_FAILED", 0)
	}

	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+m.Address, bytes.NewReader(body))
	if err != nil {
		return provider.PermanentOutcome("BAD_URL")
	}
	id := APNsID(m.MessageID)
	h := req.Header
	h.Set("authorization", "bearer "+token)
	h.Set("apns-id", id)
	h.Set("apns-push-type", "alert")
	h.Set("apns-topic", a.topic)
	h.Set("apns-priority", a.priority)
	h.Set("apns-expiration", a.expiration())
	if c := a.collapse(m.Kind); c != "" {
		h.Set("apns-collapse-id", c)
	}
	h.Set("content-type", "application/json")

	c, err := a.pool.acquire(ctx)
	if err != nil {
		return httpcall.Classify(err, httpcall.Unsent)
	}
	resp, failed, ok := httpcall.Do(c.cc.RoundTrip, req)
	if !ok {
		return failed
	}
	a.pool.answered(c)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return provider.AcceptedOutcome(providerRef(resp.Header, id))
	}
	var answer struct {
		Reason string `json:"reason"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_ = json.Unmarshal(raw, &answer) // an unreadable body leaves the status to decide
	out := Classify(resp.StatusCode, answer.Reason)
	if out.Reason == "APNS_EXPIRED_PROVIDER_TOKEN" || out.Reason == "APNS_INVALID_PROVIDER_TOKEN" {
		a.tokens.refused(token)
	}
	return out
}

// providerRef is what APNs answered as the notification's id: the
// apns-unique-id of the development environment (the key of its delivery
// log), else apns-id, else the id herald sent.
func providerRef(h http.Header, sent string) string {
	if v := h.Get("apns-unique-id"); v != "" {
		return v
	}
	if v := h.Get("apns-id"); v != "" {
		return v
	}
	return sent
}

func (a *APNs) expiration() string {
	if a.ttl < 0 {
		return "0"
	}
	return strconv.FormatInt(a.clock.Now().Add(a.ttl).Unix(), 10)
}

func (a *APNs) collapse(kind string) string {
	switch {
	case a.collapseID != "":
		return a.collapseID
	case !a.byKind || kind == "":
		return ""
	case len(kind) <= MaxCollapseID:
		return kind
	}
	sum := sha256.Sum256([]byte(kind))
	return hex.EncodeToString(sum[:])
}

// WellFormedToken reports whether s has a device token's shape: hex digits, at most
// 200 of them (APNs issues 32-byte tokens today and reserves the right to
// lengthen them; 100 bytes leaves room).
func WellFormedToken(s string) bool {
	if len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// reasons maps APNs's reason strings to outcome reasons. A reason not
// listed is reported by its status alone (HTTP_400), so a server cannot
// put free text into a reason.
var reasons = map[string]string{
	"BadCollapseId":               "APNS_BAD_COLLAPSE_ID",
	"BadDeviceToken":              "APNS_BAD_DEVICE_TOKEN",
	"BadExpirationDate":           "APNS_BAD_EXPIRATION_DATE",
	"BadMessageId":                "APNS_BAD_MESSAGE_ID",
	"BadPriority":                 "APNS_BAD_PRIORITY",
	"BadTopic":                    "APNS_BAD_TOPIC",
	"DeviceTokenNotForTopic":      "APNS_DEVICE_TOKEN_NOT_FOR_TOPIC",
	"DuplicateHeaders":            "APNS_DUPLICATE_HEADERS",
	"IdleTimeout":                 "APNS_IDLE_TIMEOUT",
	"InvalidPushType":             "APNS_INVALID_PUSH_TYPE",
	"MissingDeviceToken":          "APNS_MISSING_DEVICE_TOKEN",
	"MissingTopic":                "APNS_MISSING_TOPIC",
	"PayloadEmpty":                "APNS_PAYLOAD_EMPTY",
	"TopicDisallowed":             "APNS_TOPIC_DISALLOWED",
	"BadCertificate":              "APNS_BAD_CERTIFICATE",
	"BadCertificateEnvironment":   "APNS_BAD_CERTIFICATE_ENVIRONMENT",
	"ExpiredProviderToken":        "APNS_EXPIRED_PROVIDER_TOKEN",
	"Forbidden":                   "APNS_FORBIDDEN",
	"InvalidProviderToken":        "APNS_INVALID_PROVIDER_TOKEN",
	"MissingProviderToken":        "APNS_MISSING_PROVIDER_TOKEN",
	"BadPath":                     "APNS_BAD_PATH",
	"MethodNotAllowed":            "APNS_METHOD_NOT_ALLOWED",
	"ExpiredToken":                "APNS_EXPIRED_TOKEN",
	"Unregistered":                "APNS_UNREGISTERED",
	"PayloadTooLarge":             "APNS_PAYLOAD_TOO_LARGE",
	"TooManyProviderTokenUpdates": "APNS_TOO_MANY_PROVIDER_TOKEN_UPDATES",
	"TooManyRequests":             "APNS_TOO_MANY_REQUESTS",
	"InternalServerError":         "APNS_INTERNAL_SERVER_ERROR",
	"ServiceUnavailable":          "APNS_SERVICE_UNAVAILABLE",
	"Shutdown":                    "APNS_SHUTDOWN",
}

// Classify maps an APNs answer other than 200 (its status and the reason
// of its JSON body) to an outcome, as the package table says.
func Classify(status int, reason string) provider.Outcome {
	code, known := reasons[reason]
	if !known {
		code = "HTTP_" + strconv.Itoa(status)
	}
	switch status {
	case http.StatusBadRequest:
		if reason == "BadDeviceToken" {
			return provider.DeadDestinationOutcome(code)
		}
		return provider.PermanentOutcome(code)
	case http.StatusForbidden:
		return provider.NotSentOutcome(code, 0)
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge:
		return provider.PermanentOutcome(code)
	case http.StatusGone:
		return provider.DeadDestinationOutcome(code)
	case http.StatusTooManyRequests:
		return provider.RateLimitedOutcome(code, TooManyRequestsBackoff)
	case http.StatusInternalServerError, http.StatusServiceUnavailable:
		return provider.UnknownOutcome(code)
	}
	return httpcall.ClassifyStatus(status, "", time.Time{})
}
