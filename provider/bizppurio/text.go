package bizppurio

import (
	"strings"
	"unicode/utf8"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/smstext"
)

// Limits the vendor documents for the message body (api/dispatch, the
// SMS/LMS/AT tables). The SMS and LMS body limits (90 and 2,000 EUC-KR
// bytes, the latter the one seed 000 parks at) are package smstext's, which
// measures for the text-limit rule too: one count of EUC-KR bytes.
const (
	subjectMaxBytes = 64   // EUC-KR bytes of an LMS subject
	atMaxRunes      = 1000 // characters of an AlimTalk body
	refKeyMax       = 32   // characters of a refkey
	toMax           = 16   // characters of a destination number
)

// textKind is the vendor's message type for a carrier text: "sms" up to 90
// EUC-KR bytes, "lms" above (smstext.Kind). reason is set (and kind empty)
// when the text cannot be sent as either.
func textKind(body, subject string) (kind, reason string) {
	return textKindAs(body, subject, "")
}

// textKindAs is textKind for a message whose kind the text-limit rule
// chose (provider.Message.SMSKind; "" when none did): an LMS is sent as an
// LMS even when its body would fit a short SMS, while a body too long for
// a short SMS goes as an LMS whatever was chosen, so the vendor never gets
// a text over its type's limit.
func textKindAs(body, subject string, chosen provider.SMSKind) (kind, reason string) {
	if body == "" {
		return "", "EMPTY_BODY"
	}
	k, reason := smstext.Kind(body)
	if reason != "" {
		return "", reason
	}
	if chosen == provider.SMSLong {
		k = provider.SMSLong
	}
	if k == provider.SMSShort {
		return string(k), ""
	}
	switch s, ok := smstext.Len(subject); {
	case !ok:
		return "", heraldtype.ReasonEUCKRUnencodable
	case s > subjectMaxBytes:
		return "", "SUBJECT_TOO_LONG"
	}
	return string(k), ""
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
