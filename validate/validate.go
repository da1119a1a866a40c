// Package validate is herald's edge check of hostile input: what it
// refuses never reaches a store. Both stores hold text, and PostgreSQL
// refuses some that SQLite takes (invalid UTF-8 and NUL in text, SQLSTATE
// 22021; \u0000 and lone surrogates in jsonb, 22P05; an index entry over
// about 2,700 bytes). Such a statement used to fail inside PostgreSQL's
// group-commit batch, answer 503 ("retry"), and make the pipeline rerun
// the whole batch statement by statement. So every request is checked here
// first, the same way on both stores:
//
//   - Edge (middleware, before routing): the path and the query must be
//     printable UTF-8 (no control character, NUL included), each path
//     segment at most MaxSegment bytes: otherwise 400 naming the route's
//     wildcard (token, id, message_id). The recipient of
//     /v1/recipients/{recipient}/… is a field like intake's: 1..MaxRecipient
//     bytes of printable UTF-8, else 422 naming "recipient". A path with an
//     empty segment inside it, or a . or .. segment, is 404: the mux would
//     redirect it to its cleaned form, another endpoint.
//   - DecodeJSON (every JSON-body route) and JSON (intake, which keeps the
//     raw body): the body must be UTF-8 with no \u0000 and no lone
//     surrogate escape (400), at most its route's size (413), one JSON
//     value with nothing after it but white space (400).
//   - Text, ID, Language, Address, TimeZone: the fields a handler stores.
//
// docs/hardening.md lists every limit for users.
package validate

import (
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/language"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/seal"
)

// Limits, in bytes.
const (
	// MaxRecipient bounds a recipient, in a body or a path: the intake's
	// limit (catalog.MaxRecipientLen), so a profile can only be stored for
	// a recipient a notification can name.
	MaxRecipient = 200
	// MaxSegment bounds any one path segment (a device token, a web push
	// endpoint, is the longest).
	MaxSegment = MaxPushToken
	// MaxQuery bounds the raw query string.
	MaxQuery = 4096
	// MaxEmail is RFC 5321's path limit.
	MaxEmail = 254
	// MaxPushToken bounds a device token, a profile's push address or the
	// path's (devices.MaxTokenLen). FCM tokens are about 160 characters,
	// APNs tokens 64; a web push subscription's endpoint is longer.
	MaxPushToken = 4096
	// MaxWebhookAddress bounds a webhook channel's address.
	MaxWebhookAddress = 2048
	// MaxLanguage bounds a language tag.
	MaxLanguage = 35
)

// ErrHostile marks text no store can hold as it is: invalid UTF-8, NUL, a
// control character, or a lone UTF-16 surrogate escape.
var ErrHostile = errors.New("not printable UTF-8")

// Text reports whether s is valid UTF-8 without NUL: what both stores can
// hold in a text column. (Other control characters, newlines in a reason,
// are fine there.)
func Text(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: invalid UTF-8", ErrHostile)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: a NUL character", ErrHostile)
	}
	return nil
}

// Printable reports whether s is valid UTF-8 without control characters
// (C0, DEL and C1: U+0000..U+001F, U+007F..U+009F): the rule of every
// identifier herald takes, in a body (catalog.Printable) or a path. C1
// counts as C0 does: U+0085 is a line break to some readers, and U+009B
// starts an escape sequence in a terminal that shows a key's name or a
// recipient id (herald keys list, herald audit list).
func Printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || 0x7f <= r && r <= 0x9f {
			return false
		}
	}
	return true
}

// ID checks an identifier: 1..max bytes of printable UTF-8.
func ID(s string, max int) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > max:
		return fmt.Errorf("is longer than %d bytes", max)
	case !Printable(s):
		return fmt.Errorf("must be printable UTF-8 (%w)", ErrHostile)
	}
	return nil
}

// Language checks a profile's language: a well-formed BCP 47 tag ("ko",
// "en-US", "zh-Hant-TW").
func Language(tag string) error {
	if len(tag) > MaxLanguage {
		return fmt.Errorf("language is longer than %d bytes", MaxLanguage)
	}
	if _, err := language.Parse(tag); err != nil {
		return errors.New("language must be a BCP 47 tag such as ko or en-US")
	}
	return nil
}

// TimeZone returns the IANA time zone named ("Asia/Seoul", "UTC"), or an
// error for a name the time zone database does not hold, and for "" and
// "Local", which time.LoadLocation takes as the zone of the machine herald
// runs on: a recipient's quiet hours must not move with the server.
func TimeZone(name string) (*time.Location, error) {
	z, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		return nil, fmt.Errorf("%q is not an IANA time zone (such as Asia/Seoul)", name)
	}
	return z, nil
}

// Address checks a profile's address for channel ch:
//
//   - sms, alimtalk: a phone number, E.164 (+821012345678) or national
//     (010-1234-5678): an optional leading +, then 7 to 15 digits, with
//     spaces, hyphens, dots and parentheses between them;
//   - email: one bare address as net/mail parses it (no display name), at
//     most MaxEmail bytes;
//   - push: a device token, 1..MaxPushToken bytes of printable ASCII
//     without spaces;
//   - webhook: printable UTF-8, at most MaxWebhookAddress bytes.
func Address(ch heraldtype.Channel, addr string) error {
	if seal.Sealed(addr) {
		return fmt.Errorf("an address may not begin with %q (herald's mark of a sealed value)", seal.Prefix)
	}
	switch ch {
	case heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk:
		return phone(addr)
	case heraldtype.ChannelEmail:
		if len(addr) > MaxEmail {
			return fmt.Errorf("an e-mail address is at most %d bytes", MaxEmail)
		}
		a, err := mail.ParseAddress(addr)
		if err != nil || a.Name != "" || a.Address != addr {
			return errors.New("not an e-mail address (local@domain, no display name)")
		}
		return nil
	case heraldtype.ChannelPush:
		if addr == "" || len(addr) > MaxPushToken {
			return fmt.Errorf("a device token is 1..%d bytes", MaxPushToken)
		}
		for i := 0; i < len(addr); i++ {
			if c := addr[i]; c <= ' ' || c >= 0x7f {
				return errors.New("a device token is printable ASCII without spaces")
			}
		}
		return nil
	default:
		if err := ID(addr, MaxWebhookAddress); err != nil {
			return fmt.Errorf("the address %w", err)
		}
		return nil
	}
}

func phone(addr string) error {
	digits := 0
	for i := 0; i < len(addr); i++ {
		switch c := addr[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '+' && i == 0:
		case c == ' ' || c == '-' || c == '.' || c == '(' || c == ')':
		default:
			return errors.New("not a phone number (+, digits, spaces, hyphens, dots, parentheses)")
		}
	}
	if digits < 7 || digits > 15 {
		return errors.New("a phone number has 7 to 15 digits")
	}
	return nil
}

// JSON checks a JSON text for what the stores cannot hold: it must be
// valid UTF-8, and no string in it (keys included) may hold the escape
// \u0000 or a UTF-16 surrogate escape that is not part of a pair. Go's
// decoder takes all three (it turns the bad ones into U+FFFD, but a raw
// body kept as it came, as intake keeps params, would carry them to
// PostgreSQL's jsonb). It does not check that raw is well-formed JSON:
// the decoder does.
func JSON(raw []byte) error {
	if !utf8.Valid(raw) {
		return fmt.Errorf("%w: the body is not valid UTF-8", ErrHostile)
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(raw) {
				return nil // truncated: the decoder says so
			}
			if raw[i+1] != 'u' {
				i++ // a one-character escape, \" and \\ included
				continue
			}
			r, ok := hex4(raw, i+2)
			if !ok {
				return nil // malformed: the decoder says so
			}
			switch {
			case r == 0:
				return fmt.Errorf(`%w: a string holds \u0000`, ErrHostile)
			case r >= 0xdc00 && r <= 0xdfff:
				return fmt.Errorf("%w: a string holds a lone low surrogate escape", ErrHostile)
			case r >= 0xd800 && r <= 0xdbff:
				lo, ok := -1, false
				if i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					lo, ok = hex4(raw, i+8)
				}
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return fmt.Errorf("%w: a string holds a lone high surrogate escape", ErrHostile)
				}
				i += 6 // the low half is checked with it
			}
			i += 5
		}
	}
	return nil
}

// hex4 reads the four hex digits at raw[i:].
func hex4(raw []byte, i int) (int, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	r := 0
	for _, c := range raw[i : i+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | int(d)
	}
	return r, true
}
