// Package bizppurio is the adapter for Bizppurio (비즈뿌리오, Daou Technology),
// the Korean SMS/LMS/AlimTalk vendor seed 000 sends through. It sends over
// the vendor's WebAPI and reads the delivery reports the vendor pushes
// (provider.CallbackReceiver).
//
// Sources: the vendor's public WebAPI manual, github.com/BizMsg/WebAPI
// (README.md, webapi.md, api/authToken.md, api/dispatch.md and
// api/dispatch/{sms,lms,kakao,undefined}.md, api.md for the answer codes,
// api/dispatch-result.md for the pushed report, status-code/*.md for the
// report result codes), and its "API Rate Limit" page
// (biztech.gitbook.io/webapi/api/api-rate-limit: 429 with code 5002 and
// RateLimit-* headers). Where the manual is silent the choice made here
// says so.
//
// # The calls
//
// A token first: POST {BaseURL}/v1/token with HTTP basic auth (account and
// password), answered {"accesstoken", "type": "Bearer", "expired":
// "yyyyMMddHHmmss"}. A token lives 24 hours; it is cached, renewed an hour
// before it expires by one caller while the others keep using the old one,
// and fetched by exactly one request when there is none (the others wait
// for that request). A valid token is renewed at most once a minute: a
// renewal that failed, or that the vendor answered with a token expiring
// no later (the same expiry re-issued), is tried again a minute after it
// ended, and the current token serves every send until then, so sends do
// not each cost a token request (the vendor's rate limit counts those
// too). An expired token is replaced at once, by one request. A token the
// vendor calls invalid (3002, 3005) is dropped and the message sent once
// more at once with a new one (the vendor took nothing); refused again,
// the send ends NotSent with that code. Time comes from Config.Clock. A failed token request means
// the message was never sent: NotSent, reason TOKEN_<why>.
//
// Then POST {BaseURL}/v3/message with "Authorization: Bearer <token>" and
//
//	{"account": Config.Account, "refkey": <message id>, "type": "sms"|"lms"|"at",
//	 "from": Config.From, "to": <Address, digits>, "content": {…},
//	 "resend": {"first": "sms"|"mms"}, "recontent": {…}}   (AlimTalk only)
//
// answered {"code": 1000, "description", "refkey", "messagekey"}; the
// messagekey becomes Outcome.ProviderRef. The vendor has no idempotency key:
// a call it may have received is never repeated (an unknown answer is
// Unknown), and net/http is kept from replaying one (GetBody is cleared;
// redirects are answered, never followed).
//
// The channel chooses the message:
//
//   - sms: the Body alone, type "sms" when it is at most 90 bytes in EUC-KR,
//     else type "lms" with the Title as its subject (at most 64 bytes) and a
//     body of at most 2,000 bytes.
//   - alimtalk: type "at" with Config.SenderKey, the template code
//     Config.Templates maps the message's Kind to, and the Body as the
//     message (at most 1,000 characters; it must be the approved template
//     with its variables filled in). The same Body is the fallback text the
//     vendor sends when AlimTalk cannot be delivered: resend "sms" when it is
//     at most 90 EUC-KR bytes, otherwise an LMS with the Title as subject,
//     which the vendor's resend table spells "mms" ("LMS 대체발송은 키워드가
//     MMS 입니다", api/dispatch/undefined.md). Buttons, emphasis titles and
//     item lists are not sent: templates that need them are refused by the
//     vendor (7204, 7327, 7328…), so keep AlimTalk templates plain.
//
// The count of EUC-KR bytes is package smstext's. A message whose
// SMSKind is provider.SMSLong (the text-limit rule's choice) goes as an
// LMS, or an LMS fallback, even when its body would fit a short SMS; a
// body over 90 bytes goes as an LMS whatever SMSKind says.
//
// Everything a call would be refused for is found before the call: text
// EUC-KR cannot encode (an emoji in SMS or fallback text), lengths, a kind
// with no template, an address that is not a Korean number.
//
// # refkey
//
// The refkey is the message id, so that a report (and an operator reading
// the vendor's console) names herald's message. The vendor keeps at most 32
// characters and herald's ids are 34 ("<notification id>.sms") or 39
// (".alimtalk"), so the channel suffix travels as one letter:
// "<notification id>.s" or ".a", exactly 32 characters, turned back into
// the message id when a report comes. Other ids travel as they are when
// they fit, and an id that fits neither way is refused before the call
// (REFKEY_INVALID).
//
// # Classification
//
// A transport failure is classified by package httpcall, which sends the
// request: NotSent before a connection was held for it or when the write
// itself failed, Unknown for a deadline while it was being written
// (TIMEOUT_WHILE_WRITING) and for any failure after it was written. An
// answer is classified by the vendor's code (api.md) when its body has one,
// else by its HTTP status as webhook.ClassifyStatus does. Reasons are
// BIZPPURIO_<code> for the vendor's codes.
//
//	answer                                                   class      reason
//	200, code 1000                                           Accepted   (ProviderRef = messagekey)
//	code 1000 with a status other than 2xx                   Unknown    BIZPPURIO_1000
//	400, code 2000 message invalid (format, number, content) Permanent  BIZPPURIO_2000
//	400, code 3000-3007, 3009, 3010: the account, its        NotSent    BIZPPURIO_<code>
//	     password, IP allow-list, token (3002, 3005: the
//	     token is dropped, the send tried once more with a
//	     new one), account suspended
//	400, code 3008 too many connections                      NotSent    BIZPPURIO_3008, hint
//	429, code 5002 too many requests                         NotSent    BIZPPURIO_5002, hint
//	400, code 5001 no such URI (BaseURL is wrong)            NotSent    BIZPPURIO_5001
//	400, code 3011 unknown error inside the vendor           Unknown    BIZPPURIO_3011
//	500, code 9000 unknown error                             Unknown    BIZPPURIO_9000
//	any other code                                           by the HTTP status below, reason BIZPPURIO_<code>
//	2xx without a readable code or with another code         Unknown    BIZPPURIO_BAD_RESPONSE | BIZPPURIO_<code>
//	401, 403 without a code                                  NotSent    HTTP_401, HTTP_403
//	429 without a code                                       NotSent    HTTP_429, hint
//	400, 404, 413, 422 without a code                        Permanent  HTTP_<status>
//	410 without a code                                       Permanent  HTTP_410, DeadDestination
//	3xx, 5xx, any other status without a code                Unknown    HTTP_<status>
//	refused / DNS / TLS / timeout before a connection held   NotSent    CONNECTION_REFUSED, DNS_FAILURE, TLS_FAILURE, CONNECT_TIMEOUT, CONNECTION_FAILED
//	the write itself failed before the request was whole     NotSent    CONNECTION_FAILED
//	deadline / cancel while the request was being written    Unknown    TIMEOUT_WHILE_WRITING, CANCELED_WHILE_WRITING
//	timeout / reset / other failure after the write          Unknown    TIMEOUT, CONNECTION_RESET, TRANSPORT_ERROR
//	token request failed (any way: nothing was sent)         NotSent    TOKEN_<reason above>, e.g. TOKEN_BIZPPURIO_3001
//	cancelled while waiting for another send's token request NotSent    TOKEN_WAIT_CANCELED
//	text EUC-KR cannot encode                                Permanent  EUCKR_UNENCODABLE
//	text or subject over the vendor's limits                 Permanent  TEXT_TOO_LONG, SUBJECT_TOO_LONG
//	empty body / no address / not a Korean number            Permanent  EMPTY_BODY, ADDRESS_MISSING, INVALID_NUMBER
//	AlimTalk kind without a template code                    Permanent  NO_TEMPLATE
//	a channel other than sms and alimtalk                    Permanent  UNSUPPORTED_CHANNEL
//	message id that cannot be a refkey                       Permanent  REFKEY_INVALID
//	the request cannot be encoded                            Permanent  ENCODE_FAILED
//
// Decisions where the manual leaves room: the account and token codes are
// the vendor's 401/403 (it answers them 400) and refuse the request before
// anything is done, so they are definite non-sends, retried by the sender
// and alerted when they keep failing; 5001 likewise does nothing and is a
// configuration fault, not the message's. 3011 and 9000 are the vendor's
// "unknown error": it may have taken the message. The hint of 429/5002 is
// Retry-After when present, else RateLimit-Reset read as seconds (the
// manual's example "0.299" cannot be milliseconds), else one second; 3008
// has the same hint. The rate limit counts every call, token requests
// included.
//
// # Delivery reports
//
// The vendor POSTs one JSON report per message to a URL the customer asks it
// to register (api/dispatch-result.md): {"DEVICE", "CMSGID", "MSGID",
// "PHONE", "MEDIA", "UNIXTIME", "RESULT", "REFKEY", …, "TELRES", "KAORES",
// "RCSRES", "RESEND_FLAG"}. ParseCallback takes that object, an array of
// them, and lower-case keys (the polling API's spelling). REFKEY becomes
// Report.MessageID, CMSGID (the message key the send was answered with)
// Report.ProviderRef, UNIXTIME Report.At. A report without a REFKEY was not
// sent by herald (the same account's console sends, for instance) and is
// skipped.
//
// The vendor does not sign reports. The registered URL therefore carries a
// secret: register https://<herald>/v1/callbacks/<provider name>?token=<Config.CallbackToken>.
// ParseCallback compares the token query parameter with CallbackToken in
// constant time (ErrBadSignature when it differs or when no CallbackToken
// is configured); keep the token out of access logs. The vendor also
// registers the URL by IP and port, and a firewall may admit only its
// addresses on top of this.
//
// The vendor keeps one report URL per account ("고객사에서 사전에 등록 요청한
// URL") and pushes the report of every message of the account there,
// whichever adapter sent it, while herald runs an account as one provider
// entry per channel (sms, alimtalk). So the adapter is a
// provider.AccountReceiver: CallbackAccount names the API and the account
// id, and a report taken at any entry of the account settles a message
// that any of them sent (package settle). Register one entry's URL, with
// that entry's token.
//
// The result code decides (status-code/sms.md, lms-mms.md, at-ai-ft.md):
//
//	RESULT                                            Report
//	4100 (SMS), 6600 (LMS/MMS), 7000 (AlimTalk)       Delivered  BIZPPURIO_<code>
//	  … an AlimTalk delivered by its SMS/LMS fallback Delivered  BIZPPURIO_FALLBACK_<code>
//	7305 (AlimTalk "success uncertain")               Pending    BIZPPURIO_7305
//	an AlimTalk failure whose fallback has no result  Pending    BIZPPURIO_<code>
//	4410, 4414, 6606, 6622, 6630, 7308 (wrong,        Failed     BIZPPURIO_<code>, DeadDestination
//	  unassigned or out-of-service number)
//	any other code                                    Failed     BIZPPURIO_<code> (BIZPPURIO_FALLBACK_<code> for a fallback's)
//	RESULT missing or not a code                      ErrBadCallback (the whole request)
//	no REFKEY                                         skipped (not herald's)
//	token parameter missing or wrong                  ErrBadSignature
//
// How a fallback shows in a report is inferred from the field table, which
// the manual does not illustrate: MEDIA is "the media actually sent" and
// TELRES/KAORES/RCSRES "the fallback's result". A fallback result, when
// present, is the final word; a carrier code (4xxx, 6xxx) in RESULT for an
// AlimTalk is one too. An AlimTalk failure code with a fallback requested
// (RESEND_FLAG, or a herald AlimTalk, which always asks for one) and no
// fallback result yet is Pending, never Failed: a later report may still
// say the SMS arrived, and a failure cannot be taken back.
//
// # No status look-up
//
// The adapter is not a provider.StatusChecker: the vendor has no look-up of
// a result. Its "report re-request" (POST /v2/report) takes the vendor's
// messagekey, which an UNKNOWN delivery never received, and only pushes the
// report again to the registered URL; its polling API (POST
// /v1/result/request) drains pending results for the whole account (it must
// be enabled by the vendor and replaces the push). Results are otherwise
// read on the vendor's web console, by refkey.
package bizppurio

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall"
	"github.com/heraldhq/herald/provider/webhook"
)

// DefaultBaseURL is the vendor's production API. Its test ("검수") API is
// https://dev-api.bizppurio.com.
const DefaultBaseURL = "https://api.bizppurio.com"

// Config configures the adapter. Secrets arrive already read.
type Config struct {
	// BaseURL is the API's scheme and host. Defaults to DefaultBaseURL.
	BaseURL string
	// Account is the Bizppurio account id (up to 20 characters). Required.
	Account string
	// Password is the account's password, sent only in the token
	// request's basic auth. A secret. Required.
	Password string
	// From is the sender number registered with the vendor (발신번호).
	// Required.
	From string
	// SenderKey is the Kakao sender profile key (발신 프로필 키) AlimTalk is
	// sent with. Required when Templates is not empty.
	SenderKey string
	// Templates maps a herald kind to the code of its approved AlimTalk
	// template. A kind sent on the alimtalk channel without one is
	// refused (NO_TEMPLATE). Defaults to none.
	Templates map[string]string
	// CallbackToken is the secret the registered report URL carries as
	// its token query parameter (at least 16 characters). A secret.
	// Defaults to none: every report is refused.
	CallbackToken string
	// Timeout bounds one call to the vendor (the token request and the
	// message request each). Defaults to 10 seconds.
	Timeout time.Duration
	// Clock tells the time tokens expire by. Defaults to the system clock.
	Clock clock.Clock
	// Client overrides the HTTP client (tests use it for TLS). Its
	// redirect policy is replaced: a redirect is answered, never followed.
	Client *http.Client
}

// minCallbackToken is the shortest CallbackToken accepted.
const minCallbackToken = 16

// WithDefaults fills the fields left empty.
func (c Config) WithDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// Validate reports a configuration the adapter cannot run with. Its errors
// name the field, never a secret's value.
func (c Config) Validate() error {
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return errors.New("bizppurio: base_url must be an http(s) URL with a host")
	case c.Account == "":
		return errors.New("bizppurio: account is required")
	case utf8.RuneCountInString(c.Account) > 20 || strings.ContainsAny(c.Account, ":\r\n"):
		return errors.New("bizppurio: account must be at most 20 characters, without ':'")
	case c.Password == "":
		return errors.New("bizppurio: password is required")
	case c.From == "":
		return errors.New("bizppurio: from is required")
	case c.CallbackToken != "" && len(c.CallbackToken) < minCallbackToken:
		return fmt.Errorf("bizppurio: callback token must be at least %d characters", minCallbackToken)
	case len(c.Templates) > 0 && c.SenderKey == "":
		return errors.New("bizppurio: sender_key is required with templates")
	}
	if _, ok := phoneNumber(c.From); !ok {
		return errors.New("bizppurio: from must be a Korean phone number")
	}
	for kind, code := range c.Templates {
		if code == "" || utf8.RuneCountInString(code) > 32 {
			return fmt.Errorf("bizppurio: templates[%s]: a template code of 1 to 32 characters is required", kind)
		}
	}
	return nil
}

// Bizppurio sends SMS, LMS and AlimTalk through the vendor.
type Bizppurio struct {
	account       string
	from          string
	senderKey     string
	templates     map[string]string
	callbackToken string
	// reportAccount is CallbackAccount: the API and the account id.
	reportAccount string
	messageURL    string
	timeout       time.Duration
	clock         clock.Clock
	client        *http.Client
	tokens        *tokenSource
}

var (
	_ provider.Provider         = (*Bizppurio)(nil)
	_ provider.CallbackReceiver = (*Bizppurio)(nil)
	_ provider.AccountReceiver  = (*Bizppurio)(nil)
)

// New returns the adapter, or an error naming the field that is wrong.
func New(cfg Config) (*Bizppurio, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	from, _ := phoneNumber(cfg.From)
	templates := make(map[string]string, len(cfg.Templates))
	for k, v := range cfg.Templates {
		templates[k] = v
	}
	client := newClient(cfg.Client)
	return &Bizppurio{
		account: cfg.Account, from: from, senderKey: cfg.SenderKey, templates: templates,
		callbackToken: cfg.CallbackToken, reportAccount: reportAccount(base, cfg.Account), messageURL: base + "/v3/message",
		timeout: cfg.Timeout, clock: cfg.Clock, client: client,
		tokens: &tokenSource{
			client: client, url: base + "/v1/token", clock: cfg.Clock, timeout: cfg.Timeout,
			basic: "Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.Account+":"+cfg.Password)),
		},
	}, nil
}

// newClient is c (or a client of its own) that never follows a redirect
// (httpcall.NoRedirects).
func newClient(c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 32,
			// Below common server keep-alive timeouts, for the reason
			// provider/webhook gives: a request written on a connection the
			// server is closing is an Unknown.
			IdleConnTimeout: 4 * time.Second,
		}}
	}
	return httpcall.NoRedirects(c)
}

// The request body of POST /v3/message.
type (
	request struct {
		Account   string   `json:"account"`
		RefKey    string   `json:"refkey"`
		Type      string   `json:"type"`
		From      string   `json:"from"`
		To        string   `json:"to"`
		Content   content  `json:"content"`
		Resend    *resend  `json:"resend,omitempty"`
		ReContent *content `json:"recontent,omitempty"`
	}
	content struct {
		SMS *text     `json:"sms,omitempty"`
		LMS *text     `json:"lms,omitempty"`
		MMS *text     `json:"mms,omitempty"`
		AT  *alimtalk `json:"at,omitempty"`
	}
	text struct {
		Subject string `json:"subject,omitempty"`
		Message string `json:"message"`
	}
	alimtalk struct {
		SenderKey    string `json:"senderkey"`
		TemplateCode string `json:"templatecode"`
		Message      string `json:"message"`
	}
	resend struct {
		First string `json:"first"`
	}
)

// carrierText is the content of a carrier message of the given kind ("sms"
// or "lms"); asFallback spells an LMS as the resend block wants it ("mms").
func carrierText(kind string, m provider.Message, asFallback bool) content {
	if kind == "sms" {
		return content{SMS: &text{Message: m.Body}}
	}
	t := &text{Subject: m.Title, Message: m.Body}
	if asFallback {
		return content{MMS: t}
	}
	return content{LMS: t}
}

// build is the request for m, or the reason it cannot be sent.
func (b *Bizppurio) build(m provider.Message) (request, string) {
	key, ok := refKey(m.MessageID)
	if !ok {
		return request{}, "REFKEY_INVALID"
	}
	if m.Address == "" {
		return request{}, "ADDRESS_MISSING"
	}
	to, ok := phoneNumber(m.Address)
	if !ok {
		return request{}, "INVALID_NUMBER"
	}
	req := request{Account: b.account, RefKey: key, From: b.from, To: to}
	switch m.Channel {
	case heraldtype.ChannelSMS:
		kind, reason := textKindAs(m.Body, m.Title, m.SMSKind)
		if reason != "" {
			return request{}, reason
		}
		req.Type, req.Content = kind, carrierText(kind, m, false)
	case heraldtype.ChannelAlimTalk:
		code, ok := b.templates[m.Kind]
		if !ok {
			return request{}, "NO_TEMPLATE"
		}
		if reason := atTextOK(m.Body); reason != "" {
			return request{}, reason
		}
		kind, reason := textKindAs(m.Body, m.Title, m.SMSKind)
		if reason != "" {
			return request{}, reason
		}
		fallback := carrierText(kind, m, true)
		first := "sms"
		if kind == "lms" {
			first = "mms"
		}
		req.Type = "at"
		req.Content = content{AT: &alimtalk{SenderKey: b.senderKey, TemplateCode: code, Message: m.Body}}
		req.Resend, req.ReContent = &resend{First: first}, &fallback
	default:
		return request{}, "UNSUPPORTED_CHANNEL"
	}
	return req, ""
}

// Send sends m and classifies the answer.
func (b *Bizppurio) Send(ctx context.Context, m provider.Message) provider.Outcome {
	req, reason := b.build(m)
	if reason != "" {
		return provider.PermanentOutcome(reason)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return provider.PermanentOutcome("ENCODE_FAILED")
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	// A token the vendor calls invalid (3002, 3005) is dropped and the
	// message sent once more at once with a fresh one: the vendor took
	// nothing, so nothing can be doubled, and the send does not spend one
	// of its attempts and a retry's wait (10 minutes in the slow phase) on
	// a token.
	for try := 1; ; try++ {
		auth, err := b.tokens.get(ctx)
		if err != nil {
			var te *tokenError
			if errors.As(err, &te) {
				return provider.NotSentOutcome(te.reason, te.retryAfter)
			}
			return provider.NotSentOutcome("TOKEN_FAILED", 0)
		}
		hr, err := newRequest(ctx, b.messageURL, body)
		if err != nil {
			return provider.PermanentOutcome("BAD_URL")
		}
		hr.Header.Set("Authorization", auth)
		resp, failed, ok := httpcall.Do(b.client.Do, hr)
		if !ok {
			return failed
		}
		o := classify(resp.StatusCode, resp.Header, httpcall.ReadBody(resp), b.clock.Now())
		if o.Reason != "BIZPPURIO_3002" && o.Reason != "BIZPPURIO_3005" {
			return o
		}
		b.tokens.drop(auth)
		if try == 2 {
			return o
		}
	}
}

// answer is the vendor's JSON answer: {"code", "description", "refkey",
// "messagekey"}. Its code is a number in the manual's examples and a string
// in some of them, so both are read.
type answer struct {
	Code       flexString `json:"code"`
	MessageKey string     `json:"messagekey"`
}

// classify maps an HTTP answer of the vendor to an outcome (the package
// comment's table).
func classify(status int, h http.Header, body []byte, now time.Time) provider.Outcome {
	var a answer
	code := 0
	if json.Unmarshal(body, &a) == nil {
		code, _ = strconv.Atoi(string(a.Code))
	}
	ok2xx := status >= 200 && status < 300
	if code == 0 {
		if ok2xx {
			return provider.UnknownOutcome("BIZPPURIO_BAD_RESPONSE")
		}
		o := webhook.ClassifyStatus(status, h.Get("Retry-After"), now)
		if status == http.StatusTooManyRequests {
			o.RetryAfter = limitHint(h, now)
		}
		return o
	}
	reason := "BIZPPURIO_" + strconv.Itoa(code)
	switch code {
	case 1000:
		if ok2xx {
			return provider.AcceptedOutcome(a.MessageKey)
		}
		return provider.UnknownOutcome(reason)
	case 2000:
		return provider.PermanentOutcome(reason)
	case 3000, 3001, 3002, 3003, 3004, 3005, 3006, 3007, 3009, 3010, 5001:
		return provider.NotSentOutcome(reason, 0)
	case 3008, 5002:
		return provider.RateLimitedOutcome(reason, limitHint(h, now))
	case 3011, 9000:
		return provider.UnknownOutcome(reason)
	}
	if ok2xx {
		return provider.UnknownOutcome(reason)
	}
	o := webhook.ClassifyStatus(status, h.Get("Retry-After"), now)
	if o.Class == provider.NotSent && status == http.StatusTooManyRequests {
		o.RetryAfter = limitHint(h, now)
	}
	o.Reason = reason
	return o
}

// defaultLimitHint is the wait asked for after an over-limit answer that
// says nothing of how long.
const defaultLimitHint = time.Second

// limitHint is how long an over-limit answer asks to wait: Retry-After
// when present, else RateLimit-Reset in seconds (fractions allowed), else
// defaultLimitHint; never more than provider.MaxRetryAfter.
func limitHint(h http.Header, now time.Time) time.Duration {
	if d := httpcall.RetryAfter(h.Get("Retry-After"), now); d > 0 {
		return d
	}
	s, err := strconv.ParseFloat(strings.TrimSpace(h.Get("RateLimit-Reset")), 64)
	switch {
	case err != nil || math.IsNaN(s) || s <= 0:
		return defaultLimitHint
	case s >= provider.MaxRetryAfter.Seconds():
		return provider.MaxRetryAfter
	}
	return time.Duration(s * float64(time.Second))
}

// flexString reads a JSON string or number as its text; null is empty.
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexString(strings.TrimSpace(s))
		return nil
	}
	if string(b) == "null" {
		*f = ""
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*f = flexString(n.String())
	return nil
}
