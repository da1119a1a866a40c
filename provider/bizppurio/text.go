package bizppurio

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding/korean"
)

// Limits the vendor documents for the message body (api/dispatch, the
// SMS/LMS/AT tables; the 2,000-byte LMS limit is the one seed 000 parks at).
const (
	smsMaxBytes     = 90   // EUC-KR bytes of an SMS
	lmsMaxBytes     = 2000 // EUC-KR bytes of an LMS body
	subjectMaxBytes = 64   // EUC-KR bytes of an LMS subject
	atMaxRunes      = 1000 // characters of an AlimTalk body
	refKeyMax       = 32   // characters of a refkey
	toMax           = 16   // characters of a destination number
)

// euckrLen is the length of s in EUC-KR, the encoding the vendor and the
// carriers count SMS bytes in; ok is false when s has a character EUC-KR
// cannot encode (an emoji, most non-Korean scripts). x/text's EUCKR is
// code page 949, which covers every precomposed Hangul syllable.
func euckrLen(s string) (n int, ok bool) {
	b, err := korean.EUCKR.NewEncoder().String(s)
	if err != nil {
		return 0, false
	}
	return len(b), true
}

// textKind is the vendor's message type for a carrier text: "sms" up to 90
// EUC-KR bytes, "lms" above. reason is set (and kind empty) when the text
// cannot be sent as either.
func textKind(body, subject string) (kind, reason string) {
	if body == "" {
		return "", "EMPTY_BODY"
	}
	n, ok := euckrLen(body)
	if !ok {
		return "", "EUCKR_UNENCODABLE"
	}
	if n <= smsMaxBytes {
		return "sms", ""
	}
	if n > lmsMaxBytes {
		return "", "TEXT_TOO_LONG"
	}
	switch s, ok := euckrLen(subject); {
	case !ok:
		return "", "EUCKR_UNENCODABLE"
	case s > subjectMaxBytes:
		return "", "SUBJECT_TOO_LONG"
	}
	return "lms", ""
}

// atTextOK reports why an AlimTalk body cannot be sent, or "".
func atTextOK(body string) string {
	if body == "" {
		return "EMPTY_BODY"
	}
	if utf8.RuneCountInString(body) > atMaxRunes {
		return "TEXT_TOO_LONG"
	}
	return ""
}

// The vendor keeps a refkey of at most 32 characters, and herald's message
// ids are longer: "ntf_" + 26 characters + ".sms" is 34, ".alimtalk" 39.
// The channel suffix is the part that does not fit, so it travels as one
// letter: "<notification id>.s" and "<notification id>.a" (32 characters),
// which still read as the message id to an operator matching by refkey.
// No herald message id ends in ".s" or ".a" (channels are words; a push
// device id is longer), so decoding is unambiguous; any other id travels
// as it is when it fits.
var refSuffixes = [...]struct{ long, short string }{
	{".sms", ".s"},
	{".alimtalk", ".a"},
}

// refKey is the refkey that carries message id id; ok is false when id
// cannot travel as one (too long, or it would read back as another id).
func refKey(id string) (key string, ok bool) {
	key = id
	shortened := false
	for _, s := range refSuffixes {
		if strings.HasSuffix(id, s.long) {
			key, shortened = strings.TrimSuffix(id, s.long)+s.short, true
			break
		}
	}
	if !shortened {
		for _, s := range refSuffixes {
			if strings.HasSuffix(id, s.short) {
				return "", false
			}
		}
	}
	return key, key != "" && utf8.RuneCountInString(key) <= refKeyMax
}

// messageID is the message id a refkey carries (refKey's inverse).
func messageID(key string) string {
	for _, s := range refSuffixes {
		if strings.HasSuffix(key, s.short) {
			return strings.TrimSuffix(key, s.short) + s.long
		}
	}
	return key
}

// phoneNumber is a Korean number as the vendor takes it: digits only, the
// domestic form ("010…"). It accepts the usual spellings of a profile's
// number: hyphens, spaces, dots, parentheses and a +82 prefix.
func phoneNumber(addr string) (string, bool) {
	var b strings.Builder
	for i, r := range addr {
		switch {
		case r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == '+' && i == 0:
			b.WriteRune(r)
		case r == '-' || r == ' ' || r == '.' || r == '(' || r == ')':
		default:
			return "", false
		}
	}
	n := b.String()
	if rest, ok := strings.CutPrefix(n, "+82"); ok {
		n = "0" + strings.TrimPrefix(rest, "0")
	}
	if len(n) < 3 || len(n) > toMax || n[0] == '+' {
		return "", false
	}
	return n, true
}
