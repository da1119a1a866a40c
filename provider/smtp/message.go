package smtp

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/provider"
)

// recipient returns the mailbox of a message's Address, or the reason it
// cannot be sent to. Only plain ASCII mailboxes (dot-atom local part and
// domain) are taken: they need no quoting in RCPT or To, and cannot smuggle
// a line break into either. An internationalized address would need the
// SMTPUTF8 extension (RFC 6531), which this adapter does not speak.
func recipient(address string) (string, string) {
	a, err := mail.ParseAddress(address)
	switch {
	case err != nil:
		return "", "SMTP_BAD_ADDRESS"
	case !isASCII(a.Address):
		return "", "SMTP_ADDRESS_NEEDS_SMTPUTF8"
	case !plainMailbox(a.Address):
		return "", "SMTP_BAD_ADDRESS"
	}
	return a.Address, ""
}

// plainMailbox reports whether addr is local@domain with both sides
// dot-atoms (RFC 5322 §3.4.1 without quoted strings or domain literals).
func plainMailbox(addr string) bool {
	at := strings.LastIndexByte(addr, '@')
	return at > 0 && dotAtom(addr[:at]) && dotAtom(addr[at+1:])
}

// dotAtom reports whether s is an RFC 5322 dot-atom-text: atext runs
// joined by single dots. Message ids (the left side of a Message-ID) and
// domains are checked with it.
func dotAtom(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '.' && !atext(c) {
			return false
		}
	}
	return true
}

func atext(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// compose builds the RFC 5322 message: headers, a blank line, the body
// in a 7-bit transfer encoding, lines ending in CRLF.
func (x *Mailer) compose(m provider.Message, to string, now time.Time) []byte {
	body := crlf(strings.ToValidUTF8(m.Body, "\uFFFD"))
	// A subject is one line: line breaks in a title become spaces.
	title := strings.Join(strings.Fields(strings.ToValidUTF8(m.Title, "\uFFFD")), " ")

	var b bytes.Buffer
	header := func(name, value string) { b.WriteString(fold(name+": "+value) + "\r\n") }
	header("From", x.from.String())
	header("To", (&mail.Address{Address: to}).String())
	subject := mime.QEncoding.Encode("utf-8", title)
	if first, _, _ := strings.Cut(subject, " "); !foldable(subject) || len(subjectName)+len(first) > foldWidth {
		// The first word must share the line with "Subject: ": folded
		// onto a line of its own, the header's first line is "Subject:"
		// alone, which readers such as Python's email package (policy
		// default) read back with a leading space. Encoded words sized so
		// the first fits there always fold within the limit.
		subject = encodeWords(title, foldWidth-len(subjectName))
	}
	header("Subject", subject)
	header("Date", now.Format(time.RFC1123Z))
	header("Message-ID", "<"+m.MessageID+"@"+x.domain+">")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	if useBase64(body) {
		header("Content-Transfer-Encoding", "base64")
		b.WriteString("\r\n")
		enc := base64.StdEncoding.EncodeToString([]byte(body))
		for len(enc) > 76 {
			b.WriteString(enc[:76] + "\r\n")
			enc = enc[76:]
		}
		if enc != "" {
			b.WriteString(enc + "\r\n")
		}
		return b.Bytes()
	}
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	_, _ = qp.Write([]byte(body)) // writes to a bytes.Buffer do not fail
	_ = qp.Close()
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		// The data must end with a line break before the final dot; a
		// soft one ends the line without adding a break to the text.
		b.WriteString("=\r\n")
	}
	return b.Bytes()
}

// crlf turns every line break (CRLF, LF or a lone CR) into CRLF, the
// canonical form a text body is encoded from (RFC 2045 §6.8).
func crlf(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

// useBase64 chooses the shorter of the two encodings: quoted-printable
// spends three bytes on every non-ASCII byte (Korean text triples), base64
// four on every three.
func useBase64(body string) bool {
	high := 0
	for i := 0; i < len(body); i++ {
		if body[i] >= utf8.RuneSelf {
			high++
		}
	}
	return len(body)+2*high > (len(body)+2)/3*4
}

// foldWidth is where fold breaks a header line when it can (RFC 5322 §2.1.1
// asks for 78 characters; 998 is the hard limit).
const foldWidth = 76

// fold breaks a header line before spaces so its lines stay within
// foldWidth where the words allow (RFC 5322 §3.2.2: folding inserts CRLF
// before existing white space, which unfolding removes). Encoded words
// (RFC 2047) are at most 75 characters and separated by spaces, so an
// encoded subject always folds within the limit.
func fold(line string) string {
	if len(line) <= foldWidth {
		return line
	}
	words := strings.Split(line, " ")
	var b strings.Builder
	width := 0
	for i, w := range words {
		switch {
		case i == 0:
		case w != "" && width+1+len(w) > foldWidth:
			b.WriteString("\r\n")
			width = 0
			fallthrough
		default:
			b.WriteByte(' ')
			width++
		}
		b.WriteString(w)
		width += len(w)
	}
	return b.String()
}

// foldable reports whether fold can keep a header value within foldWidth:
// no word of it is longer than a continuation line holds. Encoded words
// always are; a long run of printable ASCII (a tracking URL, a code) is not,
// and mime's encoder leaves such text as it is, however long: unfolded, a
// title of 1,000 such characters would break SMTP's 998-byte line limit.
func foldable(value string) bool {
	for _, w := range strings.Split(value, " ") {
		if len(w) > foldWidth-1 {
			return false
		}
	}
	return true
}

// subjectName is what precedes a subject's first word on its line.
const subjectName = "Subject: "

// encodeWords encodes s whole as RFC 2047 Q-encoded words of at most 75
// characters (the first at most first), separated by spaces, which fold
// breaks between and a reader joins back without them (RFC 2047 §6.2). A
// character is never split across two words.
func encodeWords(s string, first int) string {
	const prefix, suffix = "=?utf-8?q?", "?="
	room := min(first, 75) - len(prefix) - len(suffix)
	var words []string
	var w strings.Builder
	for _, r := range s {
		var enc string
		switch {
		case r == ' ':
			enc = "_"
		case r < utf8.RuneSelf && qSafe(byte(r)):
			enc = string(r)
		default:
			var buf [utf8.UTFMax]byte
			for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
				enc += fmt.Sprintf("=%02X", c)
			}
		}
		if w.Len()+len(enc) > room {
			words = append(words, prefix+w.String()+suffix)
			w.Reset()
			room = 75 - len(prefix) - len(suffix)
		}
		w.WriteString(enc)
	}
	if w.Len() > 0 {
		words = append(words, prefix+w.String()+suffix)
	}
	return strings.Join(words, " ")
}

// qSafe reports whether c may stand for itself in a Q-encoded word of
// any header (RFC 2047 §5 (3), the strictest of its three rules).
func qSafe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!*+-/", c) >= 0
}

// dotStuff prepares a message for DATA (RFC 5321 §4.5.2): a line starting
// with "." gets another, and the final dot line ends the data.
func dotStuff(msg []byte) []byte {
	out := make([]byte, 0, len(msg)+len(msg)/64+8)
	if bytes.HasPrefix(msg, []byte(".")) {
		out = append(out, '.')
	}
	out = append(out, bytes.ReplaceAll(msg, []byte("\r\n."), []byte("\r\n.."))...)
	return append(out, ".\r\n"...)
}
