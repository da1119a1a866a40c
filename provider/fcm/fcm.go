// Package fcm is the provider for Firebase Cloud Messaging's HTTP v1 API:
// one POST {endpoint}/v1/projects/{project_id}/messages:send per message,
// authorised by an OAuth2 access token that a service account's key buys.
//
// # Authorisation
//
// The service-account key file (the JSON Google hands out) gives the
// project, the account's e-mail, its RSA private key and the token
// endpoint. The adapter signs an RS256 JWT assertion (iss = client_email,
// scope = firebase.messaging, aud = token_uri, an hour's life, kid =
// private_key_id) and exchanges it at the token endpoint with the JWT
// bearer grant (RFC 7523) for an access token, which it caches and
// replaces five minutes before it expires (or at half its life, when
// shorter). At most one token request is in flight: callers with no valid
// token wait on it; callers inside the five minutes keep the old token
// meanwhile. A send that cannot get a token wrote nothing to FCM, so it is
// NotSent (FCM_AUTH_REFUSED when the token endpoint answered 400/401/403,
// FCM_AUTH_FAILED for anything else, FCM_AUTH_TIMEOUT when the call's
// deadline passed while it waited), and the next call tries again.
//
// # The message
//
//	{"message": {"token": Address,
//	             "notification": {"title": Title, "body": Body},
//	             "data": {"message_id": MessageID, "kind": Kind}}}
//
// FCM has no idempotency key, so herald's message id travels in the data
// payload, where the app can echo it in a receipt. The answer to a send is
// {"name": "projects/{project_id}/messages/{id}"}; that name is
// Outcome.ProviderRef. FCM has no status look-up and no delivery callback,
// so the adapter implements neither.
//
// # Classification
//
// An error answer is {"error": {"code", "message", "status", "details":
// [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
// "errorCode": …}, …]}}. The FcmError errorCode decides when there is one,
// else the canonical status, each only with the HTTP status FCM documents
// for it; the message text is never read. Reasons are FCM_ and the code.
// Which answers mean "not sent" follows DESIGN §2: only a refusal (a 4xx)
// is, and only one the protocol names as a refusal; everything after the
// request was written that is not such a refusal is Unknown.
//
//	answer                                         class       reason                       note
//	2xx {"name": …}                                Accepted    -                            ProviderRef = name
//	404 errorCode UNREGISTERED                     Permanent   FCM_UNREGISTERED             DeadDestination
//	400 errorCode/status INVALID_ARGUMENT          Permanent   FCM_INVALID_ARGUMENT         also a bad payload: not dead
//	403 errorCode SENDER_ID_MISMATCH               Permanent   FCM_SENDER_ID_MISMATCH       another project's token: not dead
//	404 status NOT_FOUND, no UNREGISTERED          Permanent   FCM_NOT_FOUND                not dead (a wrong project id looks so)
//	429 errorCode QUOTA_EXCEEDED                   NotSent     FCM_QUOTA_EXCEEDED           Retry-After honoured
//	429 status RESOURCE_EXHAUSTED                  NotSent     FCM_RESOURCE_EXHAUSTED       Retry-After honoured
//	401 errorCode THIRD_PARTY_AUTH_ERROR           NotSent     FCM_THIRD_PARTY_AUTH_ERROR   (or its old name APNS_AUTH_ERROR)
//	401 any other (UNAUTHENTICATED)                NotSent     FCM_UNAUTHENTICATED          the cached access token is dropped
//	403 status PERMISSION_DENIED                   NotSent     FCM_PERMISSION_DENIED
//	503 errorCode/status UNAVAILABLE               Unknown     FCM_UNAVAILABLE
//	500 errorCode/status INTERNAL                  Unknown     FCM_INTERNAL
//	other 5xx, 3xx, any other answer               Unknown     HTTP_<code>
//	other 4xx without a code above                 as webhook  HTTP_<code>                  403/429 NotSent, 400/404/410/413/422 Permanent, else Unknown; never dead
//	a code above with another HTTP status          as the two rows above                    e.g. UNREGISTERED with 400: Permanent HTTP_400, not dead
//	empty Address                                  Permanent   FCM_NO_TOKEN                 no call made
//	no access token (see Authorisation)            NotSent     FCM_AUTH_*                   no call made
//	transport error before a stream was held       NotSent     CONNECTION_REFUSED, DNS_FAILURE, TLS_FAILURE, CONNECT_TIMEOUT, CONNECTION_FAILED
//	deadline or cancel while it was being written  Unknown     TIMEOUT_WHILE_WRITING, CANCELED_WHILE_WRITING
//	the write itself failed before it was whole    NotSent     CONNECTION_FAILED
//	transport error after it was written           Unknown     TIMEOUT, CONNECTION_RESET, TRANSPORT_ERROR
//
// Transport errors are classified by package httpcall, which sends the
// request: it watches how far the request got and never lets net/http
// replay it (GetBody is nil). Over HTTP/2 a call that waits for a stream
// on a full connection has sent nothing; once its HEADERS frame is being
// written, a deadline makes it Unknown even before net/http reports the
// request written, since RoundTrip returns on the deadline without
// waiting for its writer and FCM may hold the whole request.
//
// Decisions beyond the error-code page:
//   - THIRD_PARTY_AUTH_ERROR is FCM refusing to pass the message on because
//     the APNs certificate or web-push key stored in the Firebase project
//     is invalid: a 401 refusal about credentials, so definitely not sent.
//     It is not Permanent, since nothing is wrong with the message or the
//     device and a person fixing the project's key makes the retry work;
//     if nobody does, the retry budget ends in RETRY_EXHAUSTED and alerts.
//   - Only the UNREGISTERED errorCode marks the device dead. INVALID_ARGUMENT
//     also covers an oversized or malformed payload, SENDER_ID_MISMATCH a
//     token of another Firebase project (a configuration mistake would
//     deactivate every device), and a bare 404 NOT_FOUND a request FCM
//     rejected for another reason.
//   - UNAVAILABLE and INTERNAL are Unknown although FCM's guide says to
//     retry them: herald never resends an unknown outcome to a provider
//     that cannot tell two calls apart, and FCM cannot.
//
// Sources (read through the search tool): Firebase's REST reference for
// ErrorCode and FcmError and its "error codes" guide
// (firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode,
// firebase.google.com/docs/cloud-messaging/error-codes) for the codes, the
// HTTP status each comes with and the shape of the error body; sample
// answers collected in bloomberg/pushiko (docs/fcm_responses.md), e.g. 404
// NOT_FOUND carrying UNREGISTERED; firebase/firebase-admin-go's messaging
// errors for the FcmError type URL and APNS_AUTH_ERROR as the older name
// of THIRD_PARTY_AUTH_ERROR; Google's service-account OAuth2 flow (JWT
// bearer grant, claims iss/scope/aud/iat/exp, at most an hour) for the
// token request.
package fcm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall"
)

// Defaults of Config.
const (
	DefaultEndpoint = "https://fcm.googleapis.com"
	DefaultTokenURL = "https://oauth2.googleapis.com/token"
	DefaultTimeout  = 10 * time.Second
)

// Config configures an FCM provider.
type Config struct {
	// ServiceAccountJSON is the service-account key file, as read by the
	// config layer (service_account_file / service_account_env). Required.
	ServiceAccountJSON []byte
	// Endpoint is FCM's base URL. Defaults to https://fcm.googleapis.com.
	Endpoint string
	// TokenURL is where the assertion is exchanged for an access token.
	// Defaults to the key file's token_uri, else
	// https://oauth2.googleapis.com/token. The assertion's audience stays
	// the key file's token_uri either way.
	TokenURL string
	// Timeout bounds one call, the wait for an access token included, and
	// one token request. Defaults to 10 seconds.
	Timeout time.Duration
	// HTTPClient overrides the HTTP client (tests use it for their TLS
	// fakes). Its redirect policy is replaced: a redirect is answered,
	// never followed. Defaults to a client of the adapter's own that
	// speaks HTTP/2 to FCM.
	HTTPClient *http.Client
	// Clock tells the time for token expiry and assertions. Defaults to
	// clock.Real.
	Clock clock.Clock
}

// WithDefaults returns c with its empty fields filled.
func (c Config) WithDefaults() Config {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// Validate checks the fields that need no parsing of the key file (New
// parses it). Its errors name the field and never quote a value.
func (c Config) Validate() error {
	if len(c.ServiceAccountJSON) == 0 {
		return errors.New("fcm: service_account: empty")
	}
	if err := checkURL("endpoint", c.Endpoint); err != nil {
		return err
	}
	return checkURL("token_url", c.TokenURL)
}

// checkURL accepts an empty value or an absolute http(s) URL.
func checkURL(field, value string) error {
	if value == "" {
		return nil
	}
	if p, err := url.Parse(value); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
		return fmt.Errorf("fcm: %s: not an http(s) URL", field)
	}
	return nil
}

// FCM sends messages through FCM's HTTP v1 API for one Firebase project.
type FCM struct {
	sendURL string
	timeout time.Duration
	client  *http.Client
	clock   clock.Clock
	tokens  *tokenSource
}

var _ provider.Provider = (*FCM)(nil)

// New returns an FCM provider. Its error is one line that names what is
// wrong with the configuration or the key file and never quotes it.
func New(cfg Config) (*FCM, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var sa serviceAccount
	// The decoder's own error can quote the file's bytes: it is dropped.
	if json.Unmarshal(cfg.ServiceAccountJSON, &sa) != nil {
		return nil, errors.New("fcm: service_account: not a JSON key file")
	}
	switch {
	case sa.Type != "" && sa.Type != "service_account":
		return nil, errors.New("fcm: service_account: type is not service_account")
	case sa.ProjectID == "":
		return nil, errors.New("fcm: service_account: project_id missing")
	case sa.ClientEmail == "":
		return nil, errors.New("fcm: service_account: client_email missing")
	case sa.PrivateKey == "":
		return nil, errors.New("fcm: service_account: private_key missing")
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(sa.PrivateKey))
	if err != nil {
		return nil, errors.New("fcm: service_account: private_key is not an RSA key in PEM form")
	}
	audience := sa.TokenURI
	if audience == "" {
		audience = DefaultTokenURL
	}
	if err := checkURL("service_account: token_uri", sa.TokenURI); err != nil {
		return nil, err
	}
	tokenURL := cfg.TokenURL
	if tokenURL == "" {
		tokenURL = audience
	}
	client := newClient(cfg.HTTPClient)
	return &FCM{
		sendURL: strings.TrimRight(cfg.Endpoint, "/") + "/v1/projects/" + url.PathEscape(sa.ProjectID) + "/messages:send",
		timeout: cfg.Timeout,
		client:  client,
		clock:   cfg.Clock,
		tokens: &tokenSource{
			client: client, tokenURL: tokenURL, audience: audience,
			email: sa.ClientEmail, keyID: sa.PrivateKeyID, key: key,
			clock: cfg.Clock, timeout: cfg.Timeout,
		},
	}, nil
}

// newClient copies c (or builds the default client) with redirects
// answered, not followed.
func newClient(c *http.Client) *http.Client {
	if c == nil {
		// net/http's defaults speak HTTP/2 to FCM (many sends share one
		// connection) and keep idle connections 90 s, under Google's own
		// idle timeout; over HTTP/2 a server's close is a GOAWAY, and a
		// request it refused is retried safely.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.TLSHandshakeTimeout = 5 * time.Second
		c = &http.Client{Transport: t}
	}
	return httpcall.NoRedirects(c)
}

type sendRequest struct {
	Message message `json:"message"`
}

type message struct {
	Token        string            `json:"token"`
	Notification *notification     `json:"notification,omitempty"`
	Data         map[string]string `json:"data,omitempty"`
}

type notification struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

// Send posts m to FCM and classifies the answer (see the package doc).
func (f *FCM) Send(ctx context.Context, m provider.Message) provider.Outcome {
	if m.Address == "" {
		return provider.PermanentOutcome("FCM_NO_TOKEN")
	}
	msg := message{Token: m.Address, Data: map[string]string{"message_id": m.MessageID}}
	if m.Kind != "" {
		msg.Data["kind"] = m.Kind
	}
	if m.Title != "" || m.Body != "" {
		msg.Notification = &notification{Title: m.Title, Body: m.Body}
	}
	body, err := json.Marshal(sendRequest{Message: msg})
	if err != nil {
		return provider.PermanentOutcome("ENCODE_FAILED")
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	token, err := f.tokens.get(ctx)
	if err != nil {
		var ae authError
		if !errors.As(err, &ae) {
			ae.reason = reasonAuthFailed
		}
		return provider.NotSentOutcome(ae.reason, 0)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.sendURL, bytes.NewReader(body))
	if err != nil {
		return provider.PermanentOutcome("BAD_URL")
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+token)

	resp, failed, ok := httpcall.Do(f.client.Do, req)
	if !ok {
		return failed
	}
	answer := httpcall.ReadBody(resp)
	out := Classify(resp.StatusCode, resp.Header.Get("Retry-After"), answer, f.clock.Now())
	if out.Reason == reasonUnauthenticated {
		f.tokens.drop(token)
	}
	return out
}

const reasonUnauthenticated = "FCM_UNAUTHENTICATED"

// rule is what an FCM code means, when it comes with its own HTTP status.
type rule struct {
	status  int
	outcome provider.Outcome
}

// rules maps an FcmError errorCode or a canonical status to its HTTP
// status and outcome (the package doc's table). A code met with another
// HTTP status, or not listed here, is never turned into a reason: the
// HTTP status decides.
var rules = map[string]rule{
	"UNREGISTERED":           {404, provider.DeadDestinationOutcome("FCM_UNREGISTERED")},
	"INVALID_ARGUMENT":       {400, provider.PermanentOutcome("FCM_INVALID_ARGUMENT")},
	"SENDER_ID_MISMATCH":     {403, provider.PermanentOutcome("FCM_SENDER_ID_MISMATCH")},
	"NOT_FOUND":              {404, provider.PermanentOutcome("FCM_NOT_FOUND")},
	"QUOTA_EXCEEDED":         {429, provider.RateLimitedOutcome("FCM_QUOTA_EXCEEDED", 0)},
	"RESOURCE_EXHAUSTED":     {429, provider.RateLimitedOutcome("FCM_RESOURCE_EXHAUSTED", 0)},
	"THIRD_PARTY_AUTH_ERROR": {401, provider.NotSentOutcome("FCM_THIRD_PARTY_AUTH_ERROR", 0)},
	"APNS_AUTH_ERROR":        {401, provider.NotSentOutcome("FCM_THIRD_PARTY_AUTH_ERROR", 0)},
	"UNAUTHENTICATED":        {401, provider.NotSentOutcome(reasonUnauthenticated, 0)},
	"PERMISSION_DENIED":      {403, provider.NotSentOutcome("FCM_PERMISSION_DENIED", 0)},
	"UNAVAILABLE":            {503, provider.UnknownOutcome("FCM_UNAVAILABLE")},
	"INTERNAL":               {500, provider.UnknownOutcome("FCM_INTERNAL")},
}

// fcmErrorType is the @type of the details entry that carries errorCode.
const fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"

// codes returns the answer's FcmError errorCodes, then its canonical
// status: the order in which they decide.
func codes(body []byte) []string {
	var answer struct {
		Error struct {
			Status  string `json:"status"`
			Details []struct {
				Type      string `json:"@type"`
				ErrorCode string `json:"errorCode"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &answer) != nil {
		return nil
	}
	var cs []string
	for _, d := range answer.Error.Details {
		if d.Type == fcmErrorType {
			cs = append(cs, d.ErrorCode)
		}
	}
	return append(cs, answer.Error.Status)
}

// Classify maps FCM's answer to a send (status code, Retry-After header,
// body) to an outcome, as the package doc's table says. now reads an
// HTTP-date Retry-After.
func Classify(code int, retryAfter string, body []byte, now time.Time) provider.Outcome {
	if code >= 200 && code < 300 {
		var answer struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(body, &answer) // accepted either way; a lost name is no reference
		if len(answer.Name) > 256 {
			answer.Name = ""
		}
		return provider.AcceptedOutcome(answer.Name)
	}
	// The generic table (DESIGN §2) for what FCM's own codes do not decide.
	// Only UNREGISTERED proves a device dead, not a bare 410.
	byStatus := httpcall.ClassifyStatus(code, retryAfter, now)

	for _, c := range codes(body) {
		if r, known := rules[c]; known && r.status == code {
			if code == http.StatusTooManyRequests {
				r.outcome.RetryAfter = byStatus.RetryAfter
			}
			return r.outcome
		}
	}
	if code == http.StatusUnauthorized {
		return rules["UNAUTHENTICATED"].outcome
	}
	return byStatus
}
