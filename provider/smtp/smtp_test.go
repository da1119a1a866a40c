package smtp_test

import (
	"context"
	"crypto/x509"
	"io"
	"strings"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/smtp"
)

// refuse is a go-smtp reply for a hook to return.
func refuse(code int, enhanced gosmtp.EnhancedCode, text string) *gosmtp.SMTPError {
	return &gosmtp.SMTPError{Code: code, EnhancedCode: enhanced, Message: text}
}

// classRow is one row of the package comment's classification table.
type classRow struct {
	name   string
	server serverOpts
	// client changes the configuration config(server) gives.
	client func(cfg *smtp.Config)
	// body, address and id replace the message's.
	body, address, id string
	// holdAfterDot: after reading the whole message the server cancels
	// the caller's context and keeps the connection open without a reply.
	holdAfterDot bool

	want provider.Outcome
}

// closedPort stands for a loopback address nothing listens on.
const closedPort = "closed.invalid:0"

// plaintext is a client for a server without STARTTLS and without AUTH.
func plaintext(cfg *smtp.Config) {
	cfg.TLS.InsecurePlaintext = true
	cfg.Username, cfg.Password = "", ""
}

func classRows() []classRow {
	dead := provider.DeadDestinationOutcome
	perm := provider.PermanentOutcome
	notSent := func(reason string) provider.Outcome { return provider.NotSentOutcome(reason, 0) }
	return []classRow{
		// Accepted.
		{name: "STARTTLSAndAuthPlainIsAccepted", want: provider.AcceptedOutcome("")},
		{name: "PostfixQueueIDIsTheProviderRef",
			server: serverOpts{accept: refuse(250, gosmtp.EnhancedCode{2, 0, 0}, "Ok: queued as 4Z9xQk1TmWz3n")},
			want:   provider.AcceptedOutcome("4Z9xQk1TmWz3n")},
		{name: "EximQueueIDIsTheProviderRef",
			server: serverOpts{accept: refuse(250, gosmtp.NoEnhancedCode, "OK id=1tZxyz-000ABC-1x")},
			want:   provider.AcceptedOutcome("1tZxyz-000ABC-1x")},
		{name: "AuthLoginWhenPlainIsNotOffered",
			server: serverOpts{mechs: []string{"LOGIN"}}, want: provider.AcceptedOutcome("")},
		{name: "NoUsernameSendsNoAuth",
			client: func(cfg *smtp.Config) { cfg.Username, cfg.Password = "", "" },
			want:   provider.AcceptedOutcome("")},
		{name: "NoSTARTTLSWithInsecurePlaintextIsAccepted",
			server: serverOpts{noTLS: true, insecureAuth: true},
			client: func(cfg *smtp.Config) { cfg.TLS.InsecurePlaintext = true },
			want:   provider.AcceptedOutcome("")},

		// The session is refused: NotSent whatever the code.
		{name: "ConnectionRefusedIsNotSent",
			client: func(cfg *smtp.Config) { cfg.Addr = closedPort },
			want:   notSent("CONNECTION_REFUSED")},
		{name: "Greeting554IsNotSent",
			server: serverOpts{rewrite: &rewrite{from: "220 localhost", to: "554 5.3.2 No SMTP service here"}},
			want:   notSent("SMTP_GREETING_554_5.3.2")},
		{name: "Greeting421IsNotSent",
			server: serverOpts{rewrite: &rewrite{from: "220 localhost", to: "421 localhost busy", closeAfter: true}},
			want:   notSent("SMTP_GREETING_421")},
		{name: "GarbledGreetingIsNotSent",
			server: serverOpts{rewrite: &rewrite{from: "220 localhost", to: "2x0 " + password}},
			want:   notSent("SMTP_GREETING_BAD_REPLY")},
		{name: "EHLORefusedIsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"EHLO": refuse(550, gosmtp.EnhancedCode{5, 7, 1}, "go away")}},
			want:   notSent("SMTP_EHLO_550_5.7.1")},
		{name: "NoSTARTTLSIsNotSent",
			server: serverOpts{noTLS: true, insecureAuth: true},
			want:   notSent("SMTP_NO_STARTTLS")},
		{name: "STARTTLSRefusedIsNotSent",
			server: serverOpts{rewrite: &rewrite{from: "220 2.0.0 Ready to start TLS", to: "454 4.7.0 TLS not available"}},
			want:   notSent("SMTP_STARTTLS_454_4.7.0")},
		{name: "UntrustedCertificateIsNotSent",
			client: func(cfg *smtp.Config) { cfg.TLS.RootCAs = x509.NewCertPool() },
			want:   notSent("TLS_FAILURE")},
		{name: "CertificateForAnotherNameIsNotSent",
			client: func(cfg *smtp.Config) { cfg.TLS.ServerName = "mail.example.net" },
			want:   notSent("TLS_FAILURE")},
		{name: "AuthBadCredentials535IsNotSent",
			client: func(cfg *smtp.Config) { cfg.Password = "not-the-" + password },
			want:   notSent("SMTP_AUTH_535_5.7.8")},
		{name: "AuthRefusalQuotingThePasswordIsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"AUTH": refuse(535, gosmtp.EnhancedCode{5, 7, 8}, "bad password "+password)}},
			want:   notSent("SMTP_AUTH_535_5.7.8")},
		{name: "AuthLoginBadCredentialsIsNotSent",
			server: serverOpts{mechs: []string{"LOGIN"}},
			client: func(cfg *smtp.Config) { cfg.Password = "not-the-" + password },
			want:   notSent("SMTP_AUTH_535_5.7.8")},
		{name: "AuthTemporaryFailure454IsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"AUTH": refuse(454, gosmtp.EnhancedCode{4, 7, 0}, "try later")}},
			want:   notSent("SMTP_AUTH_454_4.7.0")},
		{name: "AuthNotOfferedIsNotSent",
			server: serverOpts{mechs: []string{}}, want: notSent("SMTP_NO_AUTH")},
		{name: "AuthWithoutPlainOrLoginIsNotSent",
			server: serverOpts{mechs: []string{"CRAM-MD5", "XOAUTH2"}}, want: notSent("SMTP_NO_AUTH_MECHANISM")},
		{name: "AuthRequired530IsNotSent",
			server: serverOpts{requireAuth: true},
			client: func(cfg *smtp.Config) { cfg.Username, cfg.Password = "", "" },
			want:   notSent("SMTP_MAIL_530_5.7.0")},

		// The transaction is refused before the final dot.
		{name: "MailGreylisted451IsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"MAIL": refuse(451, gosmtp.EnhancedCode{4, 7, 1}, "greylisted")}},
			want:   notSent("SMTP_MAIL_451_4.7.1")},
		{name: "MailRefused553IsPermanent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"MAIL": refuse(553, gosmtp.EnhancedCode{5, 7, 1}, "sender not owned by user")}},
			want:   perm("SMTP_MAIL_553_5.7.1")},
		{name: "RcptGreylisted450IsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(450, gosmtp.EnhancedCode{4, 2, 0}, "greylisted, come back later")}},
			want:   notSent("SMTP_RCPT_450_4.2.0")},
		{name: "RcptGreylisted451IsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(451, gosmtp.EnhancedCode{4, 7, 1}, "greylisted")}},
			want:   notSent("SMTP_RCPT_451_4.7.1")},
		{name: "RcptInsufficientStorage452IsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(452, gosmtp.EnhancedCode{4, 3, 1}, "insufficient storage")}},
			want:   notSent("SMTP_RCPT_452_4.3.1")},
		{name: "RcptNoSuchUser550_511IsDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(550, gosmtp.EnhancedCode{5, 1, 1}, "no such user")}},
			want:   dead("SMTP_RCPT_550_5.1.1")},
		{name: "RcptNoSuchDomain550_512IsDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(550, gosmtp.EnhancedCode{5, 1, 2}, "host unknown")}},
			want:   dead("SMTP_RCPT_550_5.1.2")},
		{name: "RcptBadSyntax553_513IsDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(553, gosmtp.EnhancedCode{5, 1, 3}, "bad address syntax")}},
			want:   dead("SMTP_RCPT_553_5.1.3")},
		{name: "RcptMailboxMoved551_516IsDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(551, gosmtp.EnhancedCode{5, 1, 6}, "mailbox moved")}},
			want:   dead("SMTP_RCPT_551_5.1.6")},
		{name: "RcptUserNotLocal551IsDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(551, gosmtp.NoEnhancedCode, "user not local; please try <kim@example.net>")}},
			want:   dead("SMTP_RCPT_551")},
		{name: "RcptNullMX556_5110IsDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(556, gosmtp.EnhancedCode{5, 1, 10}, "recipient address has null MX")}},
			want:   dead("SMTP_RCPT_556_5.1.10")},
		{name: "RcptRelayDenied550_571IsPermanentNotDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(550, gosmtp.EnhancedCode{5, 7, 1}, "relaying denied")}},
			want:   perm("SMTP_RCPT_550_5.7.1")},
		{name: "RcptMailboxFull552IsPermanentNotDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(552, gosmtp.EnhancedCode{5, 2, 2}, "mailbox full")}},
			want:   perm("SMTP_RCPT_552_5.2.2")},
		{name: "Rcpt550WithoutEnhancedCodeIsPermanentNotDead",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"RCPT": refuse(550, gosmtp.NoEnhancedCode, "no such user here")}},
			want:   perm("SMTP_RCPT_550")},
		{name: "DataRefused554IsPermanent",
			server: serverOpts{noTLS: true, rewrite: &rewrite{from: "354 ", to: "554 5.5.1 No valid recipients", closeAfter: true}},
			client: plaintext,
			want:   perm("SMTP_DATA_554_5.5.1")},
		{name: "DataDeferred451IsNotSent",
			server: serverOpts{noTLS: true, rewrite: &rewrite{from: "354 ", to: "451 4.3.0 Try again later", closeAfter: true}},
			client: plaintext,
			want:   notSent("SMTP_DATA_451_4.3.0")},

		// The connection breaks before the final dot was written.
		{name: "ConnectionLostAtRcptIsNotSent",
			server: serverOpts{rcptHook: dropConnection},
			want:   notSent("SMTP_RCPT_CONNECTION_LOST")},
		{name: "ConnectionLostWhileWritingTheBodyIsNotSent",
			// The server closes without reading; the body is larger than
			// a socket send buffer may grow here (4 MiB), so the final dot cannot be taken.
			server: serverOpts{dataHook: dropConnection},
			body:   strings.Repeat("0123456789abcdef", 1<<19),
			want:   notSent("SMTP_BODY_CONNECTION_LOST")},

		// The reply to the final dot.
		{name: "MessageRejected554IsPermanent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"MESSAGE": refuse(554, gosmtp.EnhancedCode{5, 7, 1}, "message looks like spam")}},
			want:   perm("SMTP_MESSAGE_554_5.7.1")},
		{name: "MessageDeferred451IsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"MESSAGE": refuse(451, gosmtp.EnhancedCode{4, 3, 0}, "local error")}},
			want:   notSent("SMTP_MESSAGE_451_4.3.0")},
		{name: "MessageDeferred452IsNotSent",
			server: serverOpts{refuse: map[string]*gosmtp.SMTPError{"MESSAGE": refuse(452, gosmtp.EnhancedCode{4, 3, 1}, "insufficient storage")}},
			want:   notSent("SMTP_MESSAGE_452_4.3.1")},
		{name: "UndefinedReplyAfterTheDotIsUnknown",
			server: serverOpts{accept: refuse(354, gosmtp.NoEnhancedCode, "go ahead")},
			want:   provider.UnknownOutcome("SMTP_MESSAGE_354")},
		{name: "ConnectionDroppedAfterTheDotIsUnknown",
			server: serverOpts{afterDot: dropConnection},
			want:   provider.UnknownOutcome("SMTP_MESSAGE_CONNECTION_LOST")},
		{name: "NoReplyAfterTheDotBeforeTheDeadlineIsUnknown",
			holdAfterDot: true,
			want:         provider.UnknownOutcome("SMTP_MESSAGE_TIMEOUT")},

		// Checked before dialling.
		{name: "AddressWithoutDomainIsPermanent", address: "kim", want: perm("SMTP_BAD_ADDRESS")},
		{name: "AddressWithALineBreakIsPermanent", address: "kim@example.com\r\nRCPT TO:<x@example.net>", want: perm("SMTP_BAD_ADDRESS")},
		{name: "MessageIDThatCannotBeAMessageIDIsPermanent", id: "n1 email>", want: perm("SMTP_BAD_MESSAGE_ID")},
		{name: "InternationalizedAddressIsPermanent", address: "김@example.com", want: perm("SMTP_ADDRESS_NEEDS_SMTPUTF8")},
	}
}

// TestClassification walks the package comment's table row by row against
// a real SMTP server. On every row: the class, reason and flags are the
// table's; the server delivered the message exactly when the outcome is
// Accepted or Unknown (a NotSent or Permanent left nothing behind); the
// password went only over TLS (or where InsecurePlaintext allowed it); and
// the password is in no reason.
func TestClassification(t *testing.T) {
	t.Parallel()
	for _, row := range classRows() {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if row.holdAfterDot {
				row.server.afterDot = func(c *gosmtp.Conn) {
					cancel()
					_, _ = io.Copy(io.Discard, c.Conn()) // until the client hangs up
				}
			}
			fs := newServer(t, row.server)
			cfg := config(fs)
			if row.client != nil {
				row.client(&cfg)
			}
			if cfg.Addr == closedPort {
				cfg.Addr = closedAddr(t)
			}
			m := message("n0123456789abcdef.email")
			if row.body != "" {
				m.Body = row.body
			}
			if row.id != "" {
				m.MessageID = row.id
			}
			if row.address != "" {
				m.Address = row.address
			}

			got := send(t, ctx, cfg, m)

			if got != row.want {
				t.Errorf("outcome = %+v, want %+v", got, row.want)
			}
			wantDelivered := 0
			if got.Class == provider.Accepted || got.Class == provider.Unknown {
				wantDelivered = 1
			}
			if n := fs.delivered(); n != wantDelivered {
				t.Errorf("server would deliver %d messages, want %d for a %v outcome", n, wantDelivered, got.Class)
			}
			for _, a := range fs.authAttempts() {
				if !a.tls && !cfg.TLS.InsecurePlaintext {
					t.Errorf("AUTH %s sent without TLS", a.mech)
				}
			}
			if strings.Contains(got.Reason, password) || strings.Contains(got.ProviderRef, password) {
				t.Errorf("outcome %+v contains the password", got)
			}
		})
	}
}

// TestNoSTARTTLSSendsNoCredentials: refusing a server without STARTTLS
// happens before AUTH, so the password never crosses the network in clear.
func TestNoSTARTTLSSendsNoCredentials(t *testing.T) {
	t.Parallel()
	fs := newServer(t, serverOpts{noTLS: true, insecureAuth: true})
	got := send(t, context.Background(), config(fs), message("n1.email"))
	if got != provider.NotSentOutcome("SMTP_NO_STARTTLS", 0) {
		t.Fatalf("outcome = %+v, want NotSent SMTP_NO_STARTTLS", got)
	}
	if a := fs.authAttempts(); len(a) != 0 {
		t.Fatalf("server saw %d AUTH attempts, want none", len(a))
	}
}

// TestAuthCarriesTheConfiguredCredentials: PLAIN (preferred) and LOGIN
// both present the configured user and password, over TLS.
func TestAuthCarriesTheConfiguredCredentials(t *testing.T) {
	t.Parallel()
	for _, mechs := range [][]string{{"PLAIN", "LOGIN"}, {"LOGIN"}} {
		t.Run(strings.Join(mechs, "And"), func(t *testing.T) {
			t.Parallel()
			fs := newServer(t, serverOpts{mechs: mechs})
			if got := send(t, context.Background(), config(fs), message("n1.email")); got.Class != provider.Accepted {
				t.Fatalf("outcome = %+v, want accepted", got)
			}
			want := []authAttempt{{mech: mechs[0], user: username, pass: password, tls: true}}
			if got := fs.authAttempts(); len(got) != 1 || got[0] != want[0] {
				t.Fatalf("AUTH attempts = %+v, want %+v", got, want)
			}
		})
	}
}

// TestTimeoutBoundsASilentServer: a server that never greets ends the call
// at the adapter's own Timeout, as a definite non-send.
func TestTimeoutBoundsASilentServer(t *testing.T) {
	t.Parallel()
	fs := newServer(t, serverOpts{rewrite: &rewrite{from: "220 localhost", to: ""}})
	cfg := config(fs)
	cfg.Timeout = 200 * time.Millisecond
	start := time.Now()
	got := send(t, context.Background(), cfg, message("n1.email"))
	if got != provider.NotSentOutcome("SMTP_GREETING_TIMEOUT", 0) {
		t.Fatalf("outcome = %+v, want NotSent SMTP_GREETING_TIMEOUT", got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("call took %v, want about its 200ms timeout", d)
	}
}

// BenchmarkSend is one message per connection over STARTTLS and AUTH PLAIN
// to the local go-smtp server: dial, two EHLOs, a TLS handshake, AUTH, the
// transaction and QUIT, from goroutines sending side by side.
func BenchmarkSend(b *testing.B) {
	fs := newServer(b, serverOpts{})
	x, err := smtp.New(config(fs))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if got := x.Send(context.Background(), message("n1.email")); got.Class != provider.Accepted {
				b.Errorf("outcome = %+v", got)
				return
			}
		}
	})
}
