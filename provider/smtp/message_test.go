package smtp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/provider"
)

// deliver sends m through a default fake server and returns the one
// message the server received, parsed.
func deliver(t *testing.T, m provider.Message) (received, *mail.Message) {
	t.Helper()
	fs := newServer(t, serverOpts{})
	if got := send(t, context.Background(), config(fs), m); got.Class != provider.Accepted {
		t.Fatalf("outcome = %+v, want accepted", got)
	}
	msgs := fs.messages()
	if len(msgs) != 1 {
		t.Fatalf("server received %d messages, want 1", len(msgs))
	}
	parsed, err := mail.ReadMessage(bytes.NewReader(msgs[0].data))
	if err != nil {
		t.Fatalf("received message does not parse: %v\n%s", err, msgs[0].data)
	}
	return msgs[0], parsed
}

// body decodes a received message's body by its Content-Transfer-Encoding.
func body(t *testing.T, msg *mail.Message) string {
	t.Helper()
	var r io.Reader
	switch cte := msg.Header.Get("Content-Transfer-Encoding"); cte {
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, msg.Body)
	case "quoted-printable":
		r = quotedprintable.NewReader(msg.Body)
	default:
		t.Fatalf("Content-Transfer-Encoding = %q", cte)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("body does not decode: %v", err)
	}
	return string(b)
}

// lines checks that raw is CRLF text within SMTP's 998-byte line limit.
func lines(t *testing.T, raw []byte) {
	t.Helper()
	for i, line := range strings.Split(string(raw), "\r\n") {
		if strings.ContainsAny(line, "\r\n") {
			t.Errorf("line %d has a bare CR or LF: %q", i, line)
		}
		if len(line) > 998 {
			t.Errorf("line %d is %d bytes, over 998", i, len(line))
		}
		for _, c := range []byte(line) {
			if c >= 0x80 {
				t.Fatalf("line %d has a non-ASCII byte: %q", i, line)
			}
		}
	}
}

func TestMessageHeaders(t *testing.T) {
	t.Parallel()
	t.Run("KoreanTitleIsEncodedAndBodyIsBase64", func(t *testing.T) {
		t.Parallel()
		m := message("n0123456789abcdef.email")
		m.Title = "결제가 완료되었습니다"
		m.Body = "5,000원이 결제되었습니다.\n감사합니다."
		before := time.Now().Add(-time.Second).Truncate(time.Second)
		got, msg := deliver(t, m)
		lines(t, got.data)

		if got.from != "noreply@example.org" || got.to != "kim@example.com" {
			t.Errorf("envelope = MAIL FROM %q RCPT TO %q, want noreply@example.org and kim@example.com", got.from, got.to)
		}
		if !got.tls {
			t.Error("message travelled without TLS")
		}
		h := msg.Header
		if v := h.Get("Message-ID"); v != "<n0123456789abcdef.email@mail.example.org>" {
			t.Errorf("Message-ID = %q, want <n0123456789abcdef.email@mail.example.org>", v)
		}
		if v := h.Get("To"); v != "<kim@example.com>" {
			t.Errorf("To = %q, want <kim@example.com>", v)
		}
		if v := h.Get("From"); v != `"Herald" <noreply@example.org>` {
			t.Errorf("From = %q", v)
		}
		raw := h.Get("Subject")
		if !strings.HasPrefix(raw, "=?utf-8?q?") {
			t.Errorf("Subject = %q, want RFC 2047 Q-encoded words", raw)
		}
		if dec, err := new(mime.WordDecoder).DecodeHeader(raw); err != nil || dec != m.Title {
			t.Errorf("Subject decodes to %q (%v), want %q", dec, err, m.Title)
		}
		if d, err := h.Date(); err != nil || d.Before(before) || d.After(time.Now().Add(time.Second)) {
			t.Errorf("Date = %q (%v), want now", h.Get("Date"), err)
		}
		for k, want := range map[string]string{
			"MIME-Version":              "1.0",
			"Content-Type":              "text/plain; charset=utf-8",
			"Content-Transfer-Encoding": "base64",
		} {
			if v := h.Get(k); v != want {
				t.Errorf("%s = %q, want %q", k, v, want)
			}
		}
		if b := body(t, msg); b != "5,000원이 결제되었습니다.\r\n감사합니다." {
			t.Errorf("body = %q", b)
		}
	})

	t.Run("ASCIIBodyIsQuotedPrintableAndDotsSurvive", func(t *testing.T) {
		t.Parallel()
		m := message("n1.email")
		m.Title = "Payment received"
		m.Body = ".\n.. two dots\nplain line\n."
		got, msg := deliver(t, m)
		lines(t, got.data)
		if v := msg.Header.Get("Subject"); v != "Payment received" {
			t.Errorf("Subject = %q, want it as is (ASCII needs no encoding)", v)
		}
		if v := msg.Header.Get("Content-Transfer-Encoding"); v != "quoted-printable" {
			t.Errorf("Content-Transfer-Encoding = %q, want quoted-printable", v)
		}
		if b := body(t, msg); b != ".\r\n.. two dots\r\nplain line\r\n." {
			t.Errorf("body = %q, want the dot lines back", b)
		}
	})

	t.Run("LongUnbrokenASCIIInTitleIsEncodedWithinTheLineLimit", func(t *testing.T) {
		t.Parallel()
		for _, title := range []string{
			"Track your order: " + strings.Repeat("x", 1200),
			"배송 조회 https://example.com/t?id=" + strings.Repeat("7", 300) + "&x=_=? 끝",
		} {
			m := message("n3.email")
			m.Title = title
			got, msg := deliver(t, m)
			lines(t, got.data)
			header, _, _ := bytes.Cut(got.data, []byte("\r\n\r\n"))
			for _, line := range strings.Split(string(header), "\r\n") {
				if len(line) > 78 {
					t.Errorf("header line is %d characters, over 78: %.80q…", len(line), line)
				}
			}
			if dec, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject")); err != nil || dec != title {
				t.Errorf("Subject decodes to %.60q… (%v), want %.60q…", dec, err, title)
			}
		}
	})

	t.Run("LongTitleIsFoldedAndLineBreaksInItAreSpaces", func(t *testing.T) {
		t.Parallel()
		m := message("n2.email")
		m.Title = strings.Repeat("결제 완료 ", 40) + "\r\nBcc: someone@example.net"
		got, msg := deliver(t, m)
		lines(t, got.data)
		for _, line := range strings.Split(string(got.data), "\r\n") {
			if strings.HasPrefix(line, "Bcc:") {
				t.Fatalf("the title injected a header line: %q", line)
			}
		}
		want := strings.TrimSpace(strings.Repeat("결제 완료 ", 40)) + " Bcc: someone@example.net"
		if dec, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject")); err != nil || dec != want {
			t.Errorf("Subject decodes to %q (%v), want %q", dec, err, want)
		}
		header, _, _ := bytes.Cut(got.data, []byte("\r\n\r\n"))
		for _, line := range strings.Split(string(header), "\r\n") {
			if len(line) > 78 {
				t.Errorf("header line is %d characters, over 78: %q", len(line), line)
			}
		}
	})
}

// TestSubjectFirstWordOnTheSubjectLine reads the Subject as Python's email
// package (policy default) does: the first line's text after "Subject:"
// with its leading blanks dropped, then each continuation line with its
// own. A first word folded onto a line of its own reads back with a
// leading space, as Japanese, Thai or Arabic titles with no space early
// on did.
func TestSubjectFirstWordOnTheSubjectLine(t *testing.T) {
	t.Parallel()
	for name, title := range map[string]string{
		"Japanese":           "ご予約B-1が確定しました（Kim様）",
		"Thai":               "การจองของคุณB-1ได้รับการยืนยันแล้วขอบคุณที่ใช้บริการของเรา",
		"Arabic":             "تم تأكيد حجزك B-1 يا Kim",
		"Korean":             "예약 확정 B-1 — Kim님 🎉",
		"LongFirstASCIIWord": "https://example.com/booking/" + strings.Repeat("7", 45) + " is confirmed",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := message("n4.email")
			m.Title = title
			got, _ := deliver(t, m)
			lines(t, got.data)
			header, _, _ := bytes.Cut(got.data, []byte("\r\n\r\n"))
			var value string
			in := false
			for _, line := range strings.Split(string(header), "\r\n") {
				switch {
				case strings.HasPrefix(line, "Subject:"):
					in = true
					value = strings.TrimLeft(strings.TrimPrefix(line, "Subject:"), " \t")
				case in && (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")):
					value += line
				default:
					in = false
				}
				if len(line) > 76 {
					t.Errorf("header line is %d characters, over 76: %q", len(line), line)
				}
			}
			if dec, err := new(mime.WordDecoder).DecodeHeader(value); err != nil || dec != title {
				t.Errorf("Subject reads back as %q (%v), want %q", dec, err, title)
			}
		})
	}
}
