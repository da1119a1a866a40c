// Package smstext measures the text Korean carriers take (seed 000 §7): an
// SMS body, and the AlimTalk text the vendor resends as an SMS or LMS when
// AlimTalk cannot be delivered (its fallback). Carriers count these in
// EUC-KR bytes, not characters: a Hangul syllable is two bytes, ASCII one.
//
//	EUC-KR bytes of the body   carrier message         provider.Message.SMSKind
//	0 … 90                     short SMS               SMSShort
//	91 … 2,000                 LMS (with a subject)    SMSLong
//	over 2,000                 none: TEXT_TOO_LONG
//	a character EUC-KR lacks   none: EUCKR_UNENCODABLE  (an emoji, most
//	                                                    non-Korean scripts)
//
// EUC-KR here is golang.org/x/text's, which is code page 949: it covers
// every precomposed Hangul syllable, not only KS X 1001's 2,350.
//
// The text-limit rule (package app) runs Measure in the sender's
// pre-checks, so a text no carrier would take is PARKED before any
// provider call, and the kind it chose travels to the adapter in the
// message; the SMS vendor's adapter (provider/bizppurio) measures with
// this package too, so there is one implementation of the count.
package smstext

import (
	"golang.org/x/text/encoding/korean"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
)

// The carriers' limits, in EUC-KR bytes.
const (
	// ShortMaxBytes is the longest short SMS.
	ShortMaxBytes = 90
	// LongMaxBytes is the longest LMS body, and so the longest AlimTalk
	// fallback text.
	LongMaxBytes = 2000
)

// Len is the length of s in EUC-KR bytes; ok is false when s has a
// character EUC-KR cannot encode.
func Len(s string) (n int, ok bool) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		// Every ASCII byte is one EUC-KR byte: no encoder needed.
		return len(s), true
	}
	b, err := korean.EUCKR.NewEncoder().String(s)
	if err != nil {
		return 0, false
	}
	return len(b), true
}

// Kind is the carrier message body goes as: a short SMS up to
// ShortMaxBytes, an LMS up to LongMaxBytes. When it can go as neither,
// kind is empty and reason says why (heraldtype.ReasonTextTooLong,
// heraldtype.ReasonEUCKRUnencodable).
func Kind(body string) (kind provider.SMSKind, reason string) {
	n, ok := Len(body)
	switch {
	case !ok:
		return "", heraldtype.ReasonEUCKRUnencodable
	case n <= ShortMaxBytes:
		return provider.SMSShort, ""
	case n <= LongMaxBytes:
		return provider.SMSLong, ""
	}
	return "", heraldtype.ReasonTextTooLong
}

// Measured reports whether messages on ch are carrier text: the sms
// channel, and alimtalk, whose body is also its fallback text.
func Measured(ch heraldtype.Channel) bool {
	return ch == heraldtype.ChannelSMS || ch == heraldtype.ChannelAlimTalk
}

// Measure is the text-limit rule on a message about to be sent. For a
// carrier text (Measured) it sets m.SMSKind to the body's Kind and
// returns "", or returns the reason no carrier would take it: the body's
// (Kind), or, for an LMS, a title EUC-KR cannot encode (it travels as the
// LMS subject). The title's length is the adapter's to check (vendors'
// subject limits differ). Other channels are left as they are.
func Measure(m *provider.Message) (reason string) {
	if !Measured(m.Channel) {
		return ""
	}
	kind, reason := Kind(m.Body)
	if reason != "" {
		return reason
	}
	if kind == provider.SMSLong {
		if _, ok := Len(m.Title); !ok {
			return heraldtype.ReasonEUCKRUnencodable
		}
	}
	m.SMSKind = kind
	return ""
}
