// Package smtp is the e-mail provider: it hands each message to one SMTP
// submission server (RFC 5321) over STARTTLS (RFC 3207) with AUTH (RFC 4954,
// mechanisms PLAIN and LOGIN).
//
// # One connection per message
//
// Send dials, greets (EHLO), upgrades with STARTTLS, authenticates, sends
// one transaction (MAIL FROM, RCPT TO, DATA) and says QUIT. A connection is
// not kept for the next message: one transaction per connection keeps the
// classification below exact (nothing of an earlier message's session can
// leak into this one's outcome), and the cost — a TCP and TLS handshake per
// message — is small next to the server's own work on a message. A pool is
// left for when a measurement asks for it.
//
// The client is written on net/textproto, not on net/smtp. net/smtp's
// end-of-data step (the writer Client.Data returns) discards the error of
// writing the final dot and then reads the reply, so a caller cannot tell
// "the dot never left" (nothing was delivered) from "the dot left and the
// reply was lost" (it may have been); that difference is this adapter's
// whole job. Writing on textproto also lets the adapter refuse a STARTTLS
// answer followed by unencrypted bytes (a command injection), bound what it
// reads from the server, and offer AUTH LOGIN, which net/smtp lacks.
//
// # Classification
//
// Before the final dot of DATA has been written, nothing can have been
// delivered: the end-of-data indication is what makes a server process the
// transaction (RFC 5321 §4.1.1.4), so a server that lost the connection
// earlier has no message. Every failure up to then is definite. After the
// dot the server may have taken the message: a 250 reply is it accepting
// responsibility (§6.1), and a connection that breaks, or a reply that does
// not come in time, in that window leaves the message possibly delivered.
// RFC 1047 names this gap a leading cause of duplicated mail (a client that
// resends after it delivers twice); it is the one UNKNOWN of this adapter.
//
// A refusal of the session (greeting, EHLO, STARTTLS, AUTH) says nothing
// about the message, so it is NotSent whatever its code, like the HTTP
// 401/403 of DESIGN §2. A refusal of the transaction (MAIL, RCPT, DATA, or
// the reply to the dot) follows the reply's class (RFC 5321 §4.2.1): 4yz
// "the action did not occur, try later" (greylisting: 450/451/452) is
// NotSent, 5yz "do not repeat it as is" is Permanent — except a 530 to
// MAIL, RCPT or DATA ("authentication required", RFC 4954 §6), a session
// problem and NotSent. A code the step does not define (a 354 to MAIL, a
// 354 after the dot) is NotSent before the dot and Unknown after it.
//
// A RCPT refusal is a dead destination when its enhanced status code
// (RFC 3463, the IANA registry of SMTP enhanced status codes) says that the
// address itself does not exist: X.1.1 bad mailbox, X.1.2 bad system
// (domain), X.1.3 bad address syntax, X.1.6 mailbox moved, X.1.10 null MX
// (RFC 7505). A 551 ("user not local", RFC 5321) is one too. A 550 or 553
// without an enhanced code is not: servers use the same codes for policy
// refusals ("550 5.7.1 relaying denied"), which would make a live address
// look dead. For e-mail, DeadDestination is an ordinary permanent failure
// today (the sender deactivates only devices); it tells a later owner of
// contact data which addresses bounce for good.
//
// Reasons are SMTP_<STEP>_<code>, with _<enhanced code> when the reply has
// one, e.g. SMTP_RCPT_550_5.1.1. The server's free text never reaches a
// reason, so a server echoing a credential cannot leak it.
//
//	step / answer                                  class      reason
//	----------------------------------------------------------------------------------
//	dial: connection refused, DNS, timeout          NotSent    CONNECTION_REFUSED, DNS_FAILURE,
//	                                                           CONNECT_TIMEOUT, CONNECTION_FAILED
//	greeting other than 220 (554, 421)              NotSent    SMTP_GREETING_554
//	EHLO other than 250                             NotSent    SMTP_EHLO_<code>
//	STARTTLS not offered (default)                  NotSent    SMTP_NO_STARTTLS
//	STARTTLS not offered, InsecurePlaintext         —          goes on unencrypted
//	STARTTLS refused (454)                          NotSent    SMTP_STARTTLS_454
//	TLS handshake fails (untrusted certificate…)    NotSent    TLS_FAILURE
//	Username set, no AUTH offered                   NotSent    SMTP_NO_AUTH
//	AUTH offered without PLAIN or LOGIN             NotSent    SMTP_NO_AUTH_MECHANISM
//	AUTH refused (535 bad credentials, 454, 534…)   NotSent    SMTP_AUTH_535_5.7.8
//	MAIL/RCPT/DATA 4xx (450/451/452 greylisting)    NotSent    SMTP_RCPT_450_4.2.0
//	MAIL/RCPT/DATA 530 (authentication required)    NotSent    SMTP_MAIL_530_5.7.0
//	MAIL/DATA 5xx                                   Permanent  SMTP_MAIL_553_5.7.1
//	RCPT 5xx with X.1.1/X.1.2/X.1.3/X.1.6/X.1.10,   Permanent  SMTP_RCPT_550_5.1.1
//	  or 551                                        + DeadDestination
//	RCPT other 5xx (550 5.7.1, 550 without code)    Permanent  SMTP_RCPT_550
//	connection lost / timeout before the final dot  NotSent    SMTP_<STEP>_CONNECTION_LOST,
//	  was written (STEP: GREETING … DATA, BODY)                SMTP_<STEP>_TIMEOUT
//	unreadable reply before the final dot           NotSent    SMTP_<STEP>_BAD_REPLY
//	reply to the final dot 2xx                      Accepted   ProviderRef: the queue id
//	reply to the final dot 4xx                      NotSent    SMTP_MESSAGE_451_4.3.0
//	reply to the final dot other 5xx                Permanent  SMTP_MESSAGE_554_5.7.1
//	reply to the final dot of another class         Unknown    SMTP_MESSAGE_<code>
//	connection lost after the final dot was written Unknown    SMTP_MESSAGE_CONNECTION_LOST
//	timeout (or the caller's context ended) after   Unknown    SMTP_MESSAGE_TIMEOUT
//	  the final dot was written
//	unreadable reply after the final dot            Unknown    SMTP_MESSAGE_BAD_REPLY
//	address not a plain ASCII mailbox               Permanent  SMTP_BAD_ADDRESS,
//	                                                           SMTP_ADDRESS_NEEDS_SMTPUTF8
//	message id not usable in a Message-ID           Permanent  SMTP_BAD_MESSAGE_ID
//
// "Written" means the connection accepted every byte up to and including
// the final dot: the adapter writes the message and its dot with one Write
// and counts what it took. Bytes the connection took may still be lost on
// the way, which is why that side is Unknown and never Accepted.
//
// The ProviderRef of an accepted message is the server's queue id, read
// only from the shapes "queued as ID" (Postfix) and "id=ID" (Exim), and
// only when ID is a short token of letters, digits, '.', '_' and '-';
// otherwise it is empty. SMTP has no status look-up and no delivery report
// on the same channel (bounces come later, by mail), so the adapter
// implements neither provider.StatusChecker nor provider.CallbackReceiver.
//
// The message's id travels as its Message-ID, <message_id@Domain>, which
// is what a bounce quotes back.
//
// # Sources
//
// What this adapter relies on, read for it: RFC 5321 (SMTP: reply classes
// §4.2.1, codes §4.2.3, end of data §4.1.1.4, responsibility §6.1),
// https://www.rfc-editor.org/rfc/rfc5321; RFC 1047 (the duplicate-message
// gap after the final dot), https://www.rfc-editor.org/rfc/rfc1047; RFC
// 3207 (STARTTLS), RFC 4954 (AUTH, 530 and 535), RFC 4616 (PLAIN); the
// LOGIN mechanism, draft-murchison-sasl-login; RFC 3463 and the IANA
// registry https://www.iana.org/assignments/smtp-enhanced-status-codes/
// (X.1.1 "the mailbox does not exist", X.1.2 "the destination system does
// not exist", X.1.3 syntax, X.1.6 moved); RFC 7505 (null MX, 556 5.1.10);
// RFC 5322 (message format, folding), RFC 2045 and RFC 2047 (MIME,
// encoded words). The tests run github.com/emersion/go-smtp as the server.
package smtp

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/textproto"
	"strings"
	"time"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall"
)

// Config configures an SMTP provider.
type Config struct {
	// Addr is the server's host:port (587 for submission with STARTTLS).
	Addr string
	// Username and Password authenticate with AUTH PLAIN (or LOGIN when
	// the server offers only that). Empty Username: no AUTH. Defaults to
	// no authentication.
	Username string
	Password string
	// From is the sender: an address ("noreply@example.com") or a name
	// and an address ("Herald <noreply@example.com>"). The address is the
	// envelope sender (MAIL FROM) and the From header.
	From string
	// Domain is the right-hand side of every Message-ID. Defaults to the
	// domain of From.
	Domain string
	// HelloName is the name the client gives in EHLO. Defaults to
	// "localhost".
	HelloName string
	// TLS controls STARTTLS.
	TLS TLS
	// Timeout bounds one Send, from dialling to the reply to the final
	// dot. Defaults to 10 seconds.
	Timeout time.Duration
}

// String describes the configuration for a log line: every field but the
// password, which shows only whether it is set.
func (c Config) String() string {
	pw := "unset"
	if c.Password != "" {
		pw = "set"
	}
	return fmt.Sprintf("smtp.Config{Addr:%q Username:%q Password:%s From:%q Domain:%q HelloName:%q InsecurePlaintext:%t Timeout:%v}",
		c.Addr, c.Username, pw, c.From, c.Domain, c.HelloName, c.TLS.InsecurePlaintext, c.Timeout)
}

// GoString keeps %#v from printing the password too.
func (c Config) GoString() string { return c.String() }

// TLS controls STARTTLS.
type TLS struct {
	// RootCAs verifies the server's certificate. Defaults to the system
	// roots.
	RootCAs *x509.CertPool
	// ServerName is the name the certificate must carry. Defaults to the
	// host of Addr.
	ServerName string
	// InsecurePlaintext lets the session go on unencrypted when the server
	// does not offer STARTTLS — the message and, with a Username, the
	// password cross the network in clear. Only for a relay on the same
	// host or a trusted network. A server that offers STARTTLS and then
	// fails it is never used unencrypted. Defaults to false: such a server
	// is NotSent with SMTP_NO_STARTTLS.
	InsecurePlaintext bool
}

// DefaultTimeout bounds one Send when Config.Timeout is unset.
const DefaultTimeout = 10 * time.Second

// quitWait bounds the wait for the reply to QUIT: the outcome is decided
// by then, and a server slow to say goodbye must not hold the sender.
const quitWait = time.Second

// maxReplyBytes bounds what one connection reads from the server (before
// and after STARTTLS each): replies are a few hundred bytes, and a server
// that sends endless text must not grow memory without bound.
const maxReplyBytes = 64 << 10

// Mailer sends messages through one SMTP server.
type Mailer struct {
	addr      string
	username  string
	password  string
	from      mail.Address
	domain    string
	helloName string
	tls       *tls.Config
	plainOK   bool
	timeout   time.Duration
	now       func() time.Time
}

var _ provider.Provider = (*Mailer)(nil)

// String describes the provider for a log line, without its password.
func (x *Mailer) String() string {
	return fmt.Sprintf("smtp.Mailer{Addr:%q From:%q}", x.addr, x.from.Address)
}

// GoString keeps %#v from printing the password too.
func (x *Mailer) GoString() string { return x.String() }

// New returns an SMTP provider. Its errors name the field at fault and
// never quote a credential.
func New(cfg Config) (*Mailer, error) {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil || host == "" || port == "" {
		return nil, errors.New("smtp: addr must be host:port")
	}
	if cfg.Username == "" && cfg.Password != "" {
		return nil, errors.New("smtp: password without username")
	}
	if cfg.Username != "" && cfg.Password == "" {
		return nil, errors.New("smtp: username without password")
	}
	// AUTH PLAIN separates its fields with NUL, and a line break would end
	// the command early: neither may be inside a credential.
	if strings.ContainsAny(cfg.Username, "\x00\r\n") {
		return nil, errors.New("smtp: username contains a NUL or line break")
	}
	if strings.ContainsAny(cfg.Password, "\x00\r\n") {
		return nil, errors.New("smtp: password contains a NUL or line break")
	}
	from, err := mail.ParseAddress(cfg.From)
	if err != nil || !plainMailbox(from.Address) {
		return nil, errors.New("smtp: from must be an ASCII mailbox, optionally with a name")
	}
	if cfg.Domain == "" {
		cfg.Domain = from.Address[strings.LastIndexByte(from.Address, '@')+1:]
	}
	if !dotAtom(cfg.Domain) {
		return nil, errors.New("smtp: domain must be a domain name")
	}
	if cfg.HelloName == "" {
		cfg.HelloName = "localhost"
	}
	if !dotAtom(cfg.HelloName) {
		return nil, errors.New("smtp: hello_name must be a domain name")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.TLS.ServerName == "" {
		cfg.TLS.ServerName = host
	}
	return &Mailer{
		addr:      cfg.Addr,
		username:  cfg.Username,
		password:  cfg.Password,
		from:      *from,
		domain:    cfg.Domain,
		helloName: cfg.HelloName,
		tls: &tls.Config{
			ServerName: cfg.TLS.ServerName,
			RootCAs:    cfg.TLS.RootCAs,
			MinVersion: tls.VersionTLS12,
		},
		plainOK: cfg.TLS.InsecurePlaintext,
		timeout: cfg.Timeout,
		now:     time.Now,
	}, nil
}

// Steps of a session, as they appear in reasons.
const (
	stepGreeting = "GREETING"
	stepEHLO     = "EHLO"
	stepSTARTTLS = "STARTTLS"
	stepAuth     = "AUTH"
	stepMail     = "MAIL"
	stepRcpt     = "RCPT"
	stepData     = "DATA"
	// stepBody is writing the message, up to its final dot.
	stepBody = "BODY"
	// stepMessage is the reply to the final dot.
	stepMessage = "MESSAGE"
)

// Send delivers m to the server and classifies the answer.
func (x *Mailer) Send(ctx context.Context, m provider.Message) provider.Outcome {
	to, fail := recipient(m.Address)
	if fail != "" {
		return provider.PermanentOutcome(fail)
	}
	if !dotAtom(m.MessageID) {
		return provider.PermanentOutcome("SMTP_BAD_MESSAGE_ID")
	}
	payload := dotStuff(x.compose(m, to, x.now()))

	ctx, cancel := context.WithTimeout(ctx, x.timeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", x.addr)
	if err != nil {
		// Nothing was written: httpcall's reading of a failed dial
		// (refused, DNS, timeout) before a request is exactly this one's.
		return httpcall.Classify(err, httpcall.Unsent)
	}
	c := newClient(ctx, raw)
	defer c.close()
	out := x.session(c, to, payload)
	c.quit()
	return out
}

// session runs one SMTP session on c up to the reply to the final dot.
func (x *Mailer) session(c *client, to string, payload []byte) provider.Outcome {
	if r, fail := c.read(stepGreeting); fail != nil {
		return *fail
	} else if r.code != 220 {
		return refusal(stepGreeting, r)
	}
	ext, fail := c.hello(x.helloName)
	if fail != nil {
		return *fail
	}
	if _, ok := ext["STARTTLS"]; ok {
		if fail := c.startTLS(x.tls); fail != nil {
			return *fail
		}
		// RFC 3207 §4.2: forget what the server said before TLS.
		if ext, fail = c.hello(x.helloName); fail != nil {
			return *fail
		}
	} else if !x.plainOK {
		return provider.NotSentOutcome("SMTP_NO_STARTTLS", 0)
	}
	if x.username != "" {
		if fail := c.auth(ext, x.username, x.password); fail != nil {
			return *fail
		}
	}
	if fail := c.expect(stepMail, "MAIL FROM:<"+x.from.Address+">", 2); fail != nil {
		return *fail
	}
	if fail := c.expect(stepRcpt, "RCPT TO:<"+to+">", 2); fail != nil {
		return *fail
	}
	if fail := c.expect(stepData, "DATA", 3); fail != nil {
		return *fail
	}
	return c.data(payload)
}

// client is one SMTP connection. Every read and write is bounded by the
// call's deadline, set once on the TCP connection (a tls.Conn on top of it
// inherits it), and ended early when the call's context ends.
type client struct {
	ctx  context.Context
	raw  net.Conn
	conn net.Conn // raw, or the tls.Conn over it after STARTTLS
	text *textproto.Conn
	stop func() bool
}

func newClient(ctx context.Context, raw net.Conn) *client {
	if d, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(d)
	}
	c := &client{ctx: ctx, raw: raw}
	c.stop = context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	c.use(raw)
	return c
}

// use makes conn the connection commands and replies travel on.
func (c *client) use(conn net.Conn) {
	c.conn = conn
	c.text = textproto.NewConn(&limitedConn{Conn: conn, left: maxReplyBytes})
}

// limitedConn ends reading after maxReplyBytes.
type limitedConn struct {
	net.Conn
	left int
}

var errReplyTooLong = errors.New("smtp: server sent more than the reply limit")

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errReplyTooLong
	}
	if len(p) > l.left {
		p = p[:l.left]
	}
	n, err := l.Conn.Read(p)
	l.left -= n
	return n, err
}

// reply is one server reply: its code and its text (the lines of a
// multi-line reply joined by "\n", each without its code).
type reply struct {
	code int
	text string
}

// read reads one reply; a failure is the step's NotSent.
func (c *client) read(step string) (reply, *provider.Outcome) {
	code, text, err := c.text.ReadResponse(0)
	if err != nil {
		o := provider.NotSentOutcome(ioReason(step, err), 0)
		return reply{}, &o
	}
	return reply{code: code, text: text}, nil
}

// command writes one command line and reads its reply.
func (c *client) command(step, line string) (reply, *provider.Outcome) {
	if err := c.text.PrintfLine("%s", line); err != nil {
		o := provider.NotSentOutcome(ioReason(step, err), 0)
		return reply{}, &o
	}
	return c.read(step)
}

// expect runs a command whose reply must be of class want (2 or 3).
func (c *client) expect(step, line string, want int) *provider.Outcome {
	r, fail := c.command(step, line)
	if fail != nil {
		return fail
	}
	if r.code/100 != want {
		o := refusal(step, r)
		return &o
	}
	return nil
}

// hello sends EHLO and returns the extensions the server offers, keyword
// (upper case) to parameters.
func (c *client) hello(name string) (map[string]string, *provider.Outcome) {
	r, fail := c.command(stepEHLO, "EHLO "+name)
	if fail != nil {
		return nil, fail
	}
	if r.code != 250 {
		o := refusal(stepEHLO, r)
		return nil, &o
	}
	ext := map[string]string{}
	lines := strings.Split(r.text, "\n")
	for _, line := range lines[1:] { // the first line is the server's name
		k, v, _ := strings.Cut(line, " ")
		ext[strings.ToUpper(k)] = v
	}
	// Some servers still announce AUTH as "AUTH=LOGIN PLAIN" (pre-RFC 4954).
	if v, ok := ext["AUTH=LOGIN"]; ok && ext["AUTH"] == "" {
		ext["AUTH"] = "LOGIN " + v
	}
	return ext, nil
}

// startTLS upgrades the connection (RFC 3207).
func (c *client) startTLS(cfg *tls.Config) *provider.Outcome {
	r, fail := c.command(stepSTARTTLS, "STARTTLS")
	if fail != nil {
		return fail
	}
	if r.code != 220 {
		o := refusal(stepSTARTTLS, r)
		return &o
	}
	// Bytes already buffered after the 220 came unencrypted and would be
	// read as if they came over TLS: a command injection, refused.
	if c.text.R.Buffered() > 0 {
		o := provider.NotSentOutcome("SMTP_STARTTLS_BAD_REPLY", 0)
		return &o
	}
	tc := tls.Client(c.raw, cfg)
	if err := tc.HandshakeContext(c.ctx); err != nil {
		reason := "TLS_FAILURE"
		if isTimeout(err) || c.ctx.Err() != nil {
			reason = "SMTP_STARTTLS_TIMEOUT"
		}
		o := provider.NotSentOutcome(reason, 0)
		return &o
	}
	c.use(tc)
	return nil
}

// auth authenticates with PLAIN, or LOGIN when the server offers only that.
func (c *client) auth(ext map[string]string, username, password string) *provider.Outcome {
	params, ok := ext["AUTH"]
	if !ok {
		o := provider.NotSentOutcome("SMTP_NO_AUTH", 0)
		return &o
	}
	var plain, login bool
	for _, mech := range strings.Fields(strings.ToUpper(params)) {
		plain = plain || mech == "PLAIN"
		login = login || mech == "LOGIN"
	}
	var line string
	var answers []string // what each 334 challenge is answered with, in order
	switch {
	case plain:
		// RFC 4616: authzid NUL authcid NUL passwd, as the initial response.
		line = "AUTH PLAIN " + b64("\x00"+username+"\x00"+password)
	case login:
		// The LOGIN mechanism (draft-murchison-sasl-login): the server asks
		// for the user name, then the password, in two 334 challenges.
		line = "AUTH LOGIN"
		answers = []string{b64(username), b64(password)}
	default:
		o := provider.NotSentOutcome("SMTP_NO_AUTH_MECHANISM", 0)
		return &o
	}
	r, fail := c.command(stepAuth, line)
	for fail == nil && r.code == 334 {
		if len(answers) == 0 {
			// A challenge the mechanism has no answer for: cancel the
			// exchange (RFC 4954 §4); its reply changes nothing.
			_, _ = c.command(stepAuth, "*")
			o := provider.NotSentOutcome("SMTP_AUTH_334", 0)
			return &o
		}
		r, fail = c.command(stepAuth, answers[0])
		answers = answers[1:]
	}
	if fail != nil {
		return fail
	}
	if r.code != 235 {
		o := refusal(stepAuth, r)
		return &o
	}
	return nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// data writes the message with its final dot and classifies the reply to
// it. This is the one step where a failure may come after the server has
// the message.
func (c *client) data(payload []byte) provider.Outcome {
	// One Write, straight to the connection (the buffered writer is empty:
	// every command flushes it): its count says whether every byte up to
	// the final dot was taken. A connection that took them all has them on
	// their way even if it also reported an error.
	if n, err := c.conn.Write(payload); n < len(payload) {
		return provider.NotSentOutcome(ioReason(stepBody, err), 0)
	}
	code, text, err := c.text.ReadResponse(0)
	if err != nil {
		return provider.UnknownOutcome(ioReason(stepMessage, err))
	}
	return finalReply(reply{code: code, text: text})
}

// quit ends the session politely (RFC 5321 §4.1.1.10) when there is time
// left; its reply changes nothing.
func (c *client) quit() {
	if c.ctx.Err() != nil {
		return
	}
	limit := time.Now().Add(quitWait)
	if d, ok := c.ctx.Deadline(); ok && d.Before(limit) {
		limit = d
	}
	_ = c.raw.SetDeadline(limit)
	if c.text.PrintfLine("QUIT") == nil {
		_, _, _ = c.text.ReadResponse(0)
	}
}

func (c *client) close() {
	c.stop()
	_ = c.raw.SetDeadline(time.Unix(1, 0)) // a TLS close_notify must not wait
	_ = c.conn.Close()
	_ = c.raw.Close()
}

// ioReason names a failure to write a command or read a reply at step.
func ioReason(step string, err error) string {
	var proto textproto.ProtocolError
	switch {
	case errors.As(err, &proto), errors.Is(err, errReplyTooLong), errors.Is(err, bufio.ErrTooLong):
		return "SMTP_" + step + "_BAD_REPLY"
	case isTimeout(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "SMTP_" + step + "_TIMEOUT"
	}
	return "SMTP_" + step + "_CONNECTION_LOST"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
