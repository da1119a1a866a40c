package smtp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/smtp"
)

// TestNewRefusesBadConfig: each bad field is an error naming it, on one
// line, that never quotes the password — even when the password itself is
// what is wrong.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	good := func() smtp.Config {
		return smtp.Config{Addr: "smtp.example.org:587", Username: username, Password: password, From: "noreply@example.org"}
	}
	if _, err := smtp.New(good()); err != nil {
		t.Fatalf("New(good config) = %v", err)
	}
	for _, tc := range []struct {
		name, field string
		change      func(*smtp.Config)
	}{
		{"AddrWithoutPort", "addr", func(c *smtp.Config) { c.Addr = "smtp.example.org" }},
		{"AddrWithoutHost", "addr", func(c *smtp.Config) { c.Addr = ":587" }},
		{"PasswordWithoutUsername", "username", func(c *smtp.Config) { c.Username = "" }},
		{"UsernameWithoutPassword", "password", func(c *smtp.Config) { c.Password = "" }},
		{"PasswordWithNUL", "password", func(c *smtp.Config) { c.Password = password + "\x00" + password }},
		{"PasswordWithLineBreak", "password", func(c *smtp.Config) { c.Password = password + "\r\nQUIT" }},
		{"UsernameWithNUL", "username", func(c *smtp.Config) { c.Username = "a\x00b" }},
		{"FromMissing", "from", func(c *smtp.Config) { c.From = "" }},
		{"FromNotAnAddress", "from", func(c *smtp.Config) { c.From = "noreply" }},
		{"FromNotASCII", "from", func(c *smtp.Config) { c.From = "알림@example.org" }},
		{"DomainWithSpace", "domain", func(c *smtp.Config) { c.Domain = "example .org" }},
		{"HelloNameWithLineBreak", "hello_name", func(c *smtp.Config) { c.HelloName = "host\r\nRSET" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := good()
			tc.change(&cfg)
			_, err := smtp.New(cfg)
			if err == nil {
				t.Fatal("New accepted it")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field) {
				t.Errorf("error %q does not name %s", msg, tc.field)
			}
			if strings.Contains(msg, password) || strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error %q quotes the password or spans lines", msg)
			}
		})
	}
}

// TestDomainDefaultsToTheSendersDomain: with no Domain, a Message-ID ends
// in From's domain.
func TestDomainDefaultsToTheSendersDomain(t *testing.T) {
	t.Parallel()
	fs := newServer(t, serverOpts{})
	cfg := config(fs)
	cfg.Domain = ""
	if got := send(t, context.Background(), cfg, message("n1.email")); got.Class != provider.Accepted {
		t.Fatalf("outcome = %+v, want accepted", got)
	}
	msgs := fs.messages()
	if len(msgs) != 1 || !strings.Contains(string(msgs[0].data), "\r\nMessage-ID: <n1.email@example.org>\r\n") {
		t.Fatalf("received %d messages; want one with Message-ID <n1.email@example.org>", len(msgs))
	}
}

// TestPrintingNeverShowsThePassword: a Config or a Mailer put into a log
// line with any verb shows no password.
func TestPrintingNeverShowsThePassword(t *testing.T) {
	t.Parallel()
	cfg := smtp.Config{Addr: "smtp.example.org:587", Username: username, Password: password, From: "noreply@example.org"}
	x, err := smtp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{cfg, &cfg, x} {
			if s := fmt.Sprintf(verb, v); strings.Contains(s, password) {
				t.Errorf("Sprintf(%q, %T) = %s: shows the password", verb, v, s)
			}
		}
	}
}
