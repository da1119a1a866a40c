package smtp_test

// The fake provider of these tests is a real SMTP server, emersion/go-smtp,
// on a loopback port. Its Backend and Session hooks refuse at each step,
// require AUTH, offer STARTTLS with a certificate made here, and drop or
// hold the connection after the final dot. The few replies go-smtp cannot
// be made to give (a 554 greeting, a refused STARTTLS, a refused DATA) are
// made by rewriting that one reply line on its way out; the server still
// runs the whole session.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/smtp"
)

// Credentials the server accepts. The password is what no error or reason
// may ever contain.
const (
	username = "herald@example.org"
	password = "hunter2-S3cr3t-pa55"
)

// callTimeout is the adapter Timeout of calls that must end for another
// reason first: long enough that a loaded machine never reaches it.
const callTimeout = 30 * time.Second

var quiet = log.New(io.Discard, "", 0)

// testCert is a self-signed certificate for 127.0.0.1 and the pool that
// trusts it, made once for the package.
var testCert = sync.OnceValues(func() (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "herald smtp test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
})

// serverOpts shapes one fake server.
type serverOpts struct {
	// noTLS: STARTTLS is not offered.
	noTLS bool
	// insecureAuth: AUTH is offered without TLS too.
	insecureAuth bool
	// mechs are the AUTH mechanisms offered; nil means PLAIN and LOGIN,
	// an empty slice none (no AUTH line at all).
	mechs []string
	// requireAuth: MAIL before AUTH is refused with 530 5.7.0.
	requireAuth bool
	// refuse answers a step with an error: "EHLO", "AUTH", "MAIL",
	// "RCPT", "MESSAGE" (the reply to the final dot).
	refuse map[string]*gosmtp.SMTPError
	// accept is the reply to the final dot when nothing refuses it;
	// nil is go-smtp's "250 2.0.0 OK: queued".
	accept *gosmtp.SMTPError
	// rewrite replaces the first reply line starting with from by to.
	rewrite *rewrite
	// rcptHook runs in RCPT before the refusal, with the connection.
	rcptHook func(c *gosmtp.Conn)
	// dataHook runs in DATA before the message is read.
	dataHook func(c *gosmtp.Conn)
	// afterDot runs once the whole message, final dot included, was
	// read and recorded, before the reply is written.
	afterDot func(c *gosmtp.Conn)
}

// rewrite replaces one reply line (to "" swallows it) and can close the
// connection after it.
type rewrite struct {
	from, to   string
	closeAfter bool
}

// received is one message the server read to its final dot.
type received struct {
	from, to string
	data     []byte
	tls      bool
	refused  bool
}

// authAttempt is one AUTH exchange the server saw.
type authAttempt struct {
	mech, user, pass string
	tls              bool
}

// fakeServer is a go-smtp server and what it saw.
type fakeServer struct {
	opts serverOpts
	addr string

	mu    sync.Mutex
	msgs  []received
	auths []authAttempt
}

// newServer starts a go-smtp server on a loopback port, closed at the end
// of the test.
func newServer(t testing.TB, opts serverOpts) *fakeServer {
	t.Helper()
	fs := &fakeServer{opts: opts}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(fs.newSession))
	srv.Domain = "localhost"
	srv.ErrorLog = quiet
	srv.AllowInsecureAuth = opts.insecureAuth
	if !opts.noTLS {
		cert, _ := testCert()
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs.addr = ln.Addr().String()
	if opts.rewrite != nil {
		ln = &rewriteListener{Listener: ln, rw: *opts.rewrite}
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fs
}

func (fs *fakeServer) messages() []received {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]received(nil), fs.msgs...)
}

func (fs *fakeServer) authAttempts() []authAttempt {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]authAttempt(nil), fs.auths...)
}

// delivered counts the messages the server read whole and did not refuse:
// the ones it would deliver.
func (fs *fakeServer) delivered() int {
	n := 0
	for _, m := range fs.messages() {
		if !m.refused {
			n++
		}
	}
	return n
}

func (fs *fakeServer) newSession(c *gosmtp.Conn) (gosmtp.Session, error) {
	if e := fs.opts.refuse["EHLO"]; e != nil {
		return nil, e
	}
	return &session{fs: fs, conn: c}, nil
}

// session is one go-smtp session with the hooks of its server.
type session struct {
	fs     *fakeServer
	conn   *gosmtp.Conn
	authed bool
	from   string
	to     string
}

var (
	_ gosmtp.Session     = (*session)(nil)
	_ gosmtp.AuthSession = (*session)(nil)
)

func (s *session) isTLS() bool {
	_, ok := s.conn.TLSConnectionState()
	return ok
}

func (s *session) AuthMechanisms() []string {
	if s.fs.opts.mechs != nil {
		return s.fs.opts.mechs
	}
	return []string{sasl.Plain, sasl.Login}
}

func (s *session) Auth(mech string) (sasl.Server, error) {
	check := func(user, pass string) error {
		s.fs.mu.Lock()
		s.fs.auths = append(s.fs.auths, authAttempt{mech: mech, user: user, pass: pass, tls: s.isTLS()})
		s.fs.mu.Unlock()
		if e := s.fs.opts.refuse["AUTH"]; e != nil {
			return e
		}
		if user != username || pass != password {
			return gosmtp.ErrAuthFailed
		}
		s.authed = true
		return nil
	}
	switch mech {
	case sasl.Plain:
		return sasl.NewPlainServer(func(_, user, pass string) error { return check(user, pass) }), nil
	case sasl.Login:
		return &loginServer{check: check}, nil
	}
	return nil, gosmtp.ErrAuthUnknownMechanism
}

// loginServer is the server side of the LOGIN mechanism, which go-sasl
// has only as a client.
type loginServer struct {
	step  int
	user  string
	check func(user, pass string) error
}

func (l *loginServer) Next(response []byte) ([]byte, bool, error) {
	l.step++
	switch l.step {
	case 1:
		return []byte("Username:"), false, nil
	case 2:
		l.user = string(response)
		return []byte("Password:"), false, nil
	}
	return nil, true, l.check(l.user, string(response))
}

func (s *session) Mail(from string, _ *gosmtp.MailOptions) error {
	if s.fs.opts.requireAuth && !s.authed {
		return &gosmtp.SMTPError{Code: 530, EnhancedCode: gosmtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	}
	if e := s.fs.opts.refuse["MAIL"]; e != nil {
		return e
	}
	s.from = from
	return nil
}

func (s *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	if h := s.fs.opts.rcptHook; h != nil {
		h(s.conn)
	}
	if e := s.fs.opts.refuse["RCPT"]; e != nil {
		return e
	}
	s.to = to
	return nil
}

func (s *session) Data(r io.Reader) error {
	if h := s.fs.opts.dataHook; h != nil {
		h(s.conn)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err // the final dot never came: nothing is recorded
	}
	refusal := s.fs.opts.refuse["MESSAGE"]
	s.fs.mu.Lock()
	s.fs.msgs = append(s.fs.msgs, received{from: s.from, to: s.to, data: data, tls: s.isTLS(), refused: refusal != nil})
	s.fs.mu.Unlock()
	if h := s.fs.opts.afterDot; h != nil {
		h(s.conn)
	}
	if refusal != nil {
		return refusal
	}
	if a := s.fs.opts.accept; a != nil {
		return a
	}
	return nil
}

func (s *session) Reset()        {}
func (s *session) Logout() error { return nil }

// dropConnection closes the session's connection, as a server that dies.
func dropConnection(c *gosmtp.Conn) { _ = c.Conn().Close() }

// rewriteListener hands out connections that rewrite one reply line.
type rewriteListener struct {
	net.Listener
	rw rewrite
}

func (l *rewriteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &rewriteConn{Conn: c, rw: l.rw}, nil
}

// rewriteConn replaces the first write that starts with rw.from (go-smtp
// writes each reply line with one Write) by rw.to.
type rewriteConn struct {
	net.Conn
	rw   rewrite
	done bool
}

func (c *rewriteConn) Write(p []byte) (int, error) {
	if c.done || !bytes.HasPrefix(p, []byte(c.rw.from)) {
		return c.Conn.Write(p)
	}
	c.done = true
	var err error
	if c.rw.to != "" {
		_, err = c.Conn.Write([]byte(c.rw.to + "\r\n"))
	}
	if c.rw.closeAfter {
		_ = c.Conn.Close()
	}
	return len(p), err
}

// config is a client configuration for fs: STARTTLS trusted, AUTH with the
// right credentials.
func config(fs *fakeServer) smtp.Config {
	_, pool := testCert()
	return smtp.Config{
		Addr:     fs.addr,
		Username: username,
		Password: password,
		From:     "Herald <noreply@example.org>",
		Domain:   "mail.example.org",
		TLS:      smtp.TLS{RootCAs: pool},
		Timeout:  callTimeout,
	}
}

func message(id string) provider.Message {
	return provider.Message{
		MessageID: id,
		Tenant:    "tenant-1",
		Recipient: "user-42",
		Kind:      "payment.paid",
		Channel:   heraldtype.ChannelEmail,
		Address:   "kim@example.com",
		Title:     "Payment received",
		Body:      "Paid 5,000 won.\nThank you.",
	}
}

// send makes one call through a fresh adapter.
func send(t *testing.T, ctx context.Context, cfg smtp.Config, m provider.Message) provider.Outcome {
	t.Helper()
	x, err := smtp.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return x.Send(ctx, m)
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
