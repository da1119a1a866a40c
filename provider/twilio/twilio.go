// Package twilio is the adapter for Twilio's Programmable Messaging API, the
// international SMS choice: it creates a Message resource, reads Twilio's
// status callbacks (provider.CallbackReceiver) and looks a message up by its
// sid (provider.StatusChecker).
//
// # The call
//
// Send makes one POST {BaseURL}/2010-04-01/Accounts/{AccountSID}/Messages.json
// with HTTP basic auth (the account SID and auth token, or an API key SID and
// its secret) and a form body:
//
//	To                   the message's Address in E.164 (below: Numbers)
//	From                 Config.From, when set
//	MessagingServiceSid  Config.MessagingServiceSID, when set
//	Body                 Title and Body on two lines (either alone when the other is empty)
//	StatusCallback       Config.CallbackURL with message_id=<herald message id> added to its query
//
// Twilio has no idempotency key for creating a message, so herald's message id
// travels in the StatusCallback URL: every report Twilio posts names herald's
// message. Twilio's answer is the Message resource (201, its "sid" becomes
// Outcome.ProviderRef) or an error object {"code", "message", "more_info",
// "status"} whose code is Twilio's error code.
//
// # Numbers
//
// Twilio takes To only in E.164 (+14155550000) and answers anything else
// with 21211, which reads as a dead number. A profile may hold the number
// as people write it, so Send normalizes it with allowlist.NormalizePhone,
// the function the non-production guard compares numbers with (the number
// sent is the number the guard allowed): spaces, hyphens, dots and
// parentheses are dropped, and so is a trunk "(0)" or a Korean 0 written
// after +82 ("+44 (0)20 7946 0000" → +442079460000, "+82 010-1234-5678" →
// +821012345678).
//
// A number must carry its country code: it starts with +. Twilio is
// herald's international SMS and a national number ("010-1234-5678",
// "(415) 555-0000") says nothing of its country; guessing one would send a
// person's text to a stranger abroad. Such a number, a 00 prefix, letters,
// or fewer than 8 or more than 15 digits is refused before any call:
// Permanent INVALID_NUMBER (not a dead destination: the number may be
// right, only its spelling is not), as the Bizppurio adapter refuses a
// number that is not Korean. Store profile numbers with their +country
// code.
//
// # Classification
//
// As in every adapter, the one fact that decides between "not sent" and
// "unknown" for a transport failure is how far the request got (package
// httpcall, which sends it); net/http never replays the POST (GetBody is
// cleared) and a redirect is answered, never followed.
// The class of an HTTP answer is httpcall.ClassifyStatus's, except where
// Twilio's error code says more. A reason is TWILIO_<code> when the answer
// carries a Twilio error code, else HTTP_<status>.
//
//	answer                                              class            reason
//	201 / any 2xx                                       Accepted         (ProviderRef = sid)
//	400 code 21211 invalid 'To' number                  Permanent, dead  TWILIO_21211
//	400 code 21614 'To' is not a mobile number          Permanent, dead  TWILIO_21614
//	400 code 21635 'To' is a landline                   Permanent, dead  TWILIO_21635
//	400 code 21610 recipient replied STOP               Permanent        TWILIO_21610
//	400 code 21408 region not enabled for the account   Permanent        TWILIO_21408
//	400 code 21606/21612/21608/21617/… other refusal    Permanent        TWILIO_<code>
//	400 code 21611 the From number's queue is full      NotSent          TWILIO_21611
//	400 without a readable code                         Permanent        HTTP_400
//	404 / 413 / 422                                     Permanent        TWILIO_<code> | HTTP_<status>
//	401 / 403 (code 20003: bad credentials)             NotSent          TWILIO_20003 | HTTP_401/403
//	429 (code 20429), Retry-After honoured              NotSent          TWILIO_20429 | HTTP_429
//	5xx, 3xx, any other status                          Unknown          TWILIO_<code> | HTTP_<status>
//	connection refused / DNS / TLS before the write     NotSent          CONNECTION_REFUSED, DNS_FAILURE, TLS_FAILURE, …
//	timeout waiting for a connection                    NotSent          CONNECT_TIMEOUT
//	the write itself failed before it was whole         NotSent          CONNECTION_FAILED
//	deadline / cancel while it was being written        Unknown          TIMEOUT_WHILE_WRITING, CANCELED_WHILE_WRITING
//	timeout / reset / EOF after the request was written Unknown          TIMEOUT, CONNECTION_RESET, TRANSPORT_ERROR
//	message without an Address (no call is made)        Permanent        ADDRESS_MISSING
//	Address not a +country number (no call is made)     Permanent        INVALID_NUMBER
//
// Decisions: 21610 (the recipient opted out) is not a dead destination: the
// number works and the person may text START again; consent is herald's to
// record, not the device's to drop. 21611 refuses the create itself (Twilio:
// the queue of that sender is full, the message is not created), so it is a
// definite non-send. Twilio documents a 429 as never processed and safe to
// retry. The same dead-number codes mark a failed delivery report dead (below).
//
// # Delivery reports
//
// Twilio POSTs application/x-www-form-urlencoded status callbacks to the
// StatusCallback URL with MessageSid, MessageStatus, ErrorCode and other
// parameters, signed in the X-Twilio-Signature header: base64 of
// HMAC-SHA1(auth token, URL + each POST parameter's name and value, sorted by
// name). The URL must be exactly the one Twilio called, so ParseCallback
// rebuilds it from Config.CallbackURL (scheme, host, path) and the request's
// own raw query, never from the Host header; like Twilio's helper libraries it
// also accepts the signature over that URL with its port added or removed
// (Twilio's signing is not consistent about default ports). The comparison is
// constant-time. Signatures made with a Webhooks Rule's shared key
// (X-Twilio-Webhooks-Signature-Settings) are not supported and fail the check.
//
//	MessageStatus                                          Report
//	delivered, read                                        Delivered   TWILIO_DELIVERED / TWILIO_READ
//	undelivered, failed, canceled                          Failed      TWILIO_<ErrorCode>, or TWILIO_<STATUS> without one
//	  … with ErrorCode 30005 (unknown destination),        Failed, DeadDestination
//	  30006 (landline or unreachable carrier), 21211,
//	  21614, 21635
//	queued, accepted, scheduled, sending, sent,            Pending     TWILIO_<STATUS>
//	partially_delivered
//	anything else (receiving, received, a new status)      ErrBadCallback / a look-up error: never a guess
//
// 30003 (handset unreachable: off, no signal), 30004 (blocked), 30007
// (filtered) and 30008 (unknown) are plain failures, not dead numbers. The
// callback's RawDlrDoneDate has no time zone, so Report.At stays zero.
//
// # Status look-up
//
// Status makes GET .../Messages/{sid}.json with the sid Send answered
// (StatusQuery.ProviderRef) and maps its "status" and "error_code" as above;
// At is the resource's date_updated. A 404 is ReportNotFound. Twilio cannot be
// asked by herald's message id, so a query without a sid is an error.
//
// Sources, read through the search tool: Twilio's Messages resource and its
// status values; "Track the Message Status of Outbound Messages" (status
// callback parameters, initial status without a callback); "Secure webhooks"
// (X-Twilio-Signature); the error pages 20003, 20429, 21211, 21408, 21610,
// 21611, 21614, 21635, 30003, 30005, 30006 at twilio.com/docs/api/errors;
// "Twilio API requests" (basic auth with API keys); the RawDlrDoneDate
// changelog of 2023-02-14; and twilio/twilio-go (client/request_validator.go
// and its test, the port variants and the test vector used here; client/error.go,
// the error object's shape).
package twilio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/allowlist"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall"
)

// Config configures a Twilio provider. Secrets arrive already read.
type Config struct {
	// BaseURL is the root of Twilio's REST API. Defaults to
	// https://api.twilio.com.
	BaseURL string
	// AccountSID is the account (AC…) the messages are created in. Required.
	AccountSID string
	// AuthToken is the account's auth token: the basic-auth password when
	// no API key is given, and always the key Twilio signs status callbacks
	// with. Required, unless an API key is given and CallbackURL is empty.
	AuthToken string
	// APIKeySID and APIKeySecret are an API key (SK…) used for basic auth
	// instead of the account SID and auth token. Both or neither. Defaults
	// to none.
	APIKeySID    string
	APIKeySecret string
	// From is the sender: a Twilio number in E.164, a short code or an
	// alphanumeric sender id. From or MessagingServiceSID is required.
	From string
	// MessagingServiceSID (MG…) sends through a Messaging Service's sender
	// pool. Defaults to none.
	MessagingServiceSID string
	// CallbackURL is herald's public URL for this provider's reports, as
	// Twilio will call it (https://herald.example.com/v1/callbacks/twilio).
	// Each message's StatusCallback is this URL with message_id added.
	// Defaults to none: no StatusCallback is asked for and every callback
	// fails the signature check.
	CallbackURL string
	// Timeout bounds one call. Defaults to 10 seconds.
	Timeout time.Duration
	// Client overrides the HTTP client (tests). Its redirect policy is
	// replaced: a redirect is answered, never followed.
	Client *http.Client
}

// Twilio sends SMS through Twilio's Messages API.
type Twilio struct {
	messagesURL string // …/Accounts/{sid}/Messages
	user, pass  string
	authToken   string
	from        string
	service     string
	callback    string // CallbackURL without its query
	callbackQ   string // CallbackURL's raw query, kept byte for byte
	hasCallback bool
	timeout     time.Duration
	client      *http.Client
}

var (
	_ provider.Provider         = (*Twilio)(nil)
	_ provider.CallbackReceiver = (*Twilio)(nil)
	_ provider.StatusChecker    = (*Twilio)(nil)
)

// New returns a Twilio provider, or an error naming the field that is wrong
// (never its value).
func New(cfg Config) (*Twilio, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://api.twilio.com"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" || base.User != nil {
		return nil, errors.New("twilio: base_url must be an http(s) URL without credentials")
	}
	if !strings.HasPrefix(cfg.AccountSID, "AC") {
		return nil, errors.New("twilio: account_sid must be an account SID (AC…)")
	}
	if (cfg.APIKeySID == "") != (cfg.APIKeySecret == "") {
		return nil, errors.New("twilio: api_key_sid and api_key_secret go together")
	}
	if cfg.APIKeySID == "" && cfg.AuthToken == "" {
		return nil, errors.New("twilio: auth_token is required (or api_key_sid and api_key_secret)")
	}
	if cfg.CallbackURL != "" && cfg.AuthToken == "" {
		return nil, errors.New("twilio: auth_token is required with callback_url: Twilio signs callbacks with it")
	}
	if cfg.From == "" && cfg.MessagingServiceSID == "" {
		return nil, errors.New("twilio: from or messaging_service_sid is required")
	}
	t := &Twilio{
		messagesURL: strings.TrimRight(cfg.BaseURL, "/") + "/2010-04-01/Accounts/" + url.PathEscape(cfg.AccountSID) + "/Messages",
		user:        cfg.AccountSID, pass: cfg.AuthToken,
		authToken: cfg.AuthToken,
		from:      cfg.From, service: cfg.MessagingServiceSID,
		timeout: cfg.Timeout,
	}
	if cfg.APIKeySID != "" {
		t.user, t.pass = cfg.APIKeySID, cfg.APIKeySecret
	}
	if cfg.CallbackURL != "" {
		cb, err := url.Parse(cfg.CallbackURL)
		if err != nil || (cb.Scheme != "https" && cb.Scheme != "http") || cb.Host == "" || cb.User != nil ||
			cb.Fragment != "" || cb.Query().Has("message_id") {
			return nil, errors.New("twilio: callback_url must be an http(s) URL without credentials, fragment or message_id")
		}
		t.callback, t.callbackQ, _ = strings.Cut(cfg.CallbackURL, "?")
		t.hasCallback = true
	}
	c := cfg.Client
	if c == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Shorter than common server keep-alive timeouts, as in
		// provider/webhook: a request written on a connection the server is
		// closing can only be UNKNOWN.
		tr.IdleConnTimeout = 4 * time.Second
		c = &http.Client{Transport: tr}
	}
	t.client = httpcall.NoRedirects(c)
	return t, nil
}

// statusCallback is the URL Twilio reports the progress of message id to.
func (t *Twilio) statusCallback(id string) string {
	q := "message_id=" + url.QueryEscape(id)
	if t.callbackQ != "" {
		q = t.callbackQ + "&" + q
	}
	return t.callback + "?" + q
}

// MaxBodyChars is the longest Body Twilio takes, in characters: a longer
// one is refused with error 21617 every time.
const MaxBodyChars = 1600

// Text is the Body Send gives Twilio for m: what the handset shows (SMS
// has no title line of its own).
func Text(m provider.Message) string {
	switch {
	case m.Title == "":
		return m.Body
	case m.Body == "":
		return m.Title
	}
	return m.Title + "\n" + m.Body
}

// e164 is addr as Twilio's To takes it, or false for a number without its
// country code or one that is not a phone number (the package comment's
// Numbers). allowlist.NormalizePhone reads a national number starting with
// 0 as Korean; only numbers written with + are taken here, so that reading
// never applies.
func e164(addr string) (string, bool) {
	if !strings.HasPrefix(strings.TrimSpace(addr), "+") {
		return "", false
	}
	return allowlist.NormalizePhone(addr)
}

// Send creates one Message resource and classifies the answer.
func (t *Twilio) Send(ctx context.Context, m provider.Message) provider.Outcome {
	if m.Address == "" {
		return provider.PermanentOutcome("ADDRESS_MISSING")
	}
	to, ok := e164(m.Address)
	if !ok {
		return provider.PermanentOutcome("INVALID_NUMBER")
	}
	form := url.Values{}
	form.Set("To", to)
	if t.from != "" {
		form.Set("From", t.from)
	}
	if t.service != "" {
		form.Set("MessagingServiceSid", t.service)
	}
	form.Set("Body", Text(m))
	if t.hasCallback {
		form.Set("StatusCallback", t.statusCallback(m.MessageID))
	}

	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	req, err := t.newRequest(ctx, http.MethodPost, t.messagesURL+".json", form.Encode())
	if err != nil {
		return provider.PermanentOutcome("BAD_URL")
	}
	resp, failed, ok := httpcall.Do(t.client.Do, req)
	if !ok {
		return failed
	}
	body := httpcall.ReadBody(resp)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		var msg message
		_ = json.Unmarshal(body, &msg) // the status proves the create; the sid is a bonus
		return provider.AcceptedOutcome(msg.Sid)
	}
	return classify(resp.StatusCode, resp.Header.Get("Retry-After"), errorCode(body), time.Now())
}

// newRequest makes an authenticated request to Twilio's API; a body is a
// form.
func (t *Twilio) newRequest(ctx context.Context, method, u, form string) (*http.Request, error) {
	var body io.Reader
	if form != "" {
		body = strings.NewReader(form)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(t.user, t.pass)
	req.Header.Set("Accept", "application/json")
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return req, nil
}

// message is the part of Twilio's Message resource herald reads.
type message struct {
	Sid         string `json:"sid"`
	Status      string `json:"status"`
	ErrorCode   code   `json:"error_code"`
	DateUpdated string `json:"date_updated"`
}

// code is a Twilio error code, written as a number, a string or null.
type code int

func (c *code) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" || s == "" {
		*c = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("twilio: error code %q: %w", s, err)
	}
	*c = code(n)
	return nil
}

// errorCode is the "code" of Twilio's error object, 0 when the body has none.
func errorCode(body []byte) int {
	var e struct {
		Code code `json:"code"`
	}
	if json.Unmarshal(body, &e) != nil {
		return 0
	}
	return int(e.Code)
}

func reasonFor(c int) string { return "TWILIO_" + strconv.Itoa(c) }

// deadCodes are Twilio error codes that say the destination number itself
// cannot receive SMS: invalid (21211), not a mobile number (21614), a
// landline (21635), unknown to the carrier (30005), a landline or an
// unreachable carrier (30006).
var deadCodes = map[int]bool{21211: true, 21614: true, 21635: true, 30005: true, 30006: true}

// notSentCodes are refusals of the create that Twilio documents as nothing
// created: too many requests (20429) and a full sender queue (21611).
var notSentCodes = map[int]bool{20429: true, 21611: true}

// classify maps a non-2xx answer to an outcome: httpcall.ClassifyStatus's
// class (DESIGN §2), with Twilio's error code as the reason and where it
// decides (see the package comment's table).
func classify(status int, retryAfter string, c int, now time.Time) provider.Outcome {
	// httpcall's table, not webhook's: a 410 from Twilio's API says
	// nothing about the phone number.
	out := httpcall.ClassifyStatus(status, retryAfter, now)
	if c == 0 {
		return out
	}
	out.Reason = reasonFor(c)
	switch {
	case status >= 400 && status < 500 && c == 20429:
		return provider.RateLimitedOutcome(out.Reason, out.RetryAfter)
	case status >= 400 && status < 500 && notSentCodes[c]:
		return provider.NotSentOutcome(out.Reason, out.RetryAfter)
	case out.Class == provider.Permanent && deadCodes[c]:
		return provider.DeadDestinationOutcome(out.Reason)
	}
	return out
}

// report maps a Message status and its error code to a Report's result,
// reason and dead flag; ok is false for a status that is not an outbound
// message's.
func report(status string, c int) (r provider.Report, ok bool) {
	switch status {
	case "delivered", "read":
		r.Result = provider.ReportDelivered
	case "undelivered", "failed", "canceled":
		r.Result = provider.ReportFailed
		r.DeadDestination = deadCodes[c]
	case "queued", "accepted", "scheduled", "sending", "sent", "partially_delivered":
		r.Result = provider.ReportPending
	default:
		return r, false
	}
	r.Reason = "TWILIO_" + strings.ToUpper(status)
	if r.Result == provider.ReportFailed && c != 0 {
		r.Reason = reasonFor(c)
	}
	return r, true
}

// statusWord is a status Twilio sent, fit to quote in an error: a short
// word of lower-case letters and underscores. Anything else is not quoted,
// since an answer's text may echo what the request carried.
func statusWord(s string) string {
	ok := len(s) > 0 && len(s) <= 32
	for _, r := range s {
		ok = ok && (r >= 'a' && r <= 'z' || r == '_')
	}
	if !ok {
		return "(not a status word)"
	}
	return strconv.Quote(s)
}
