package smstext_test

import (
	"strings"
	"testing"

	"golang.org/x/text/encoding/korean"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/smstext"
)

// TestKind: 90 EUC-KR bytes is still a short SMS, 91 an LMS, 2,000 the
// longest LMS; a Hangul syllable is two bytes, ASCII one.
func TestKind(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name, body string
		kind       provider.SMSKind
		reason     string
	}{
		{"Empty", "", provider.SMSShort, ""},
		{"90ASCII", strings.Repeat("a", 90), provider.SMSShort, ""},
		{"91ASCII", strings.Repeat("a", 91), provider.SMSLong, ""},
		{"45Hangul", strings.Repeat("가", 45), provider.SMSShort, ""},
		{"46Hangul", strings.Repeat("가", 46), provider.SMSLong, ""},
		{"88ASCIIAndOneHangul", strings.Repeat("a", 88) + "가", provider.SMSShort, ""},
		{"89ASCIIAndOneHangul", strings.Repeat("a", 89) + "가", provider.SMSLong, ""},
		{"SyllableOutsideKSX1001", strings.Repeat("똠", 45), provider.SMSShort, ""},
		{"2000Bytes", strings.Repeat("가", 1000), provider.SMSLong, ""},
		{"2000ASCII", strings.Repeat("a", 2000), provider.SMSLong, ""},
		{"2001Bytes", strings.Repeat("가", 1000) + "a", "", heraldtype.ReasonTextTooLong},
		{"2001ASCII", strings.Repeat("a", 2001), "", heraldtype.ReasonTextTooLong},
		{"Emoji", "안녕 😀", "", heraldtype.ReasonEUCKRUnencodable},
		{"LongWithEmoji", strings.Repeat("가", 1200) + "😀", "", heraldtype.ReasonEUCKRUnencodable},
		{"Thai", "สวัสดี", "", heraldtype.ReasonEUCKRUnencodable},
		{"InvalidUTF8", "\xff", "", heraldtype.ReasonEUCKRUnencodable},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			kind, reason := smstext.Kind(row.body)
			if kind != row.kind || reason != row.reason {
				t.Fatalf("Kind = %q %q, want %q %q", kind, reason, row.kind, row.reason)
			}
		})
	}
}

// TestMeasure: the rule sets the kind on sms and alimtalk messages, refuses
// what no carrier takes (an LMS's title included), and leaves other
// channels alone.
func TestMeasure(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("가", 46)
	rows := []struct {
		name    string
		msg     provider.Message
		kind    provider.SMSKind
		reason  string
		touched bool
	}{
		{"ShortSMS", provider.Message{Channel: heraldtype.ChannelSMS, Body: "결제 3,000원"}, provider.SMSShort, "", true},
		{"LongSMS", provider.Message{Channel: heraldtype.ChannelSMS, Title: "안내", Body: long}, provider.SMSLong, "", true},
		{"ShortSMSTitleIgnored", provider.Message{Channel: heraldtype.ChannelSMS, Title: "😀", Body: "짧은 글"}, provider.SMSShort, "", true},
		{"LMSTitleUnencodable", provider.Message{Channel: heraldtype.ChannelSMS, Title: "😀", Body: long}, "", heraldtype.ReasonEUCKRUnencodable, false},
		{"AlimTalkFallbackLong", provider.Message{Channel: heraldtype.ChannelAlimTalk, Body: long}, provider.SMSLong, "", true},
		{"AlimTalkFallbackTooLong", provider.Message{Channel: heraldtype.ChannelAlimTalk, Body: strings.Repeat("a", 2001)}, "", heraldtype.ReasonTextTooLong, false},
		{"AlimTalkEmoji", provider.Message{Channel: heraldtype.ChannelAlimTalk, Body: "🎉"}, "", heraldtype.ReasonEUCKRUnencodable, false},
		{"PushUntouched", provider.Message{Channel: heraldtype.ChannelPush, Body: strings.Repeat("😀", 3000)}, "", "", false},
		{"EmailUntouched", provider.Message{Channel: heraldtype.ChannelEmail, Body: strings.Repeat("a", 5000)}, "", "", false},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			m := row.msg
			reason := smstext.Measure(&m)
			if reason != row.reason || m.SMSKind != row.kind {
				t.Fatalf("Measure = %q, SMSKind %q; want %q, %q", reason, m.SMSKind, row.reason, row.kind)
			}
			if m.Body != row.msg.Body || m.Title != row.msg.Title {
				t.Fatal("Measure changed the text")
			}
		})
	}
}

// FuzzLen: Len is the length of x/text's EUC-KR encoding, ok exactly when
// that encoder takes the text (the ASCII path included).
func FuzzLen(f *testing.F) {
	for _, s := range []string{"", "abc", "가나다", "a가😀", "똠", "\xff", "สวัสดี", "\x7f\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := smstext.Len(s)
		b, err := korean.EUCKR.NewEncoder().String(s)
		if ok != (err == nil) || (ok && n != len(b)) {
			t.Fatalf("Len(%q) = %d %v; encoder: %d bytes, %v", s, n, ok, len(b), err)
		}
	})
}

// BenchmarkKind: the cost the rule adds to a send, for a typical Korean
// LMS and an ASCII SMS.
func BenchmarkKind(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"HangulLMS", strings.Repeat("고객님의 결제가 승인되었습니다. ", 12)},
		{"ASCIISMS", "Your code is 123456."},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, reason := smstext.Kind(bc.body); reason != "" {
					b.Fatal(reason)
				}
			}
		})
	}
}
