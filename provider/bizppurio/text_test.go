package bizppurio

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/provider"
)

// TestTextKindBoundary: 90 EUC-KR bytes is still an SMS, 91 is an LMS; a
// Hangul syllable is two bytes, ASCII one.
func TestTextKindBoundary(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name, body, subject string
		kind, reason        string
	}{
		{"90ASCII", strings.Repeat("a", 90), "", "sms", ""},
		{"91ASCII", strings.Repeat("a", 91), "", "lms", ""},
		{"45Hangul", strings.Repeat("가", 45), "", "sms", ""},
		{"46Hangul", strings.Repeat("가", 46), "", "lms", ""},
		{"88ASCIIAndOneHangul", strings.Repeat("a", 88) + "가", "", "sms", ""},
		{"89ASCIIAndOneHangul", strings.Repeat("a", 89) + "가", "", "lms", ""},
		{"SyllableOutsideKSX1001", strings.Repeat("똠", 45), "", "sms", ""}, // code page 949 has every syllable
		{"2000Bytes", strings.Repeat("가", 1000), "", "lms", ""},
		{"2001Bytes", strings.Repeat("가", 1000) + "a", "", "", "TEXT_TOO_LONG"},
		{"Subject64Bytes", strings.Repeat("가", 46), strings.Repeat("나", 32), "lms", ""},
		{"Subject65Bytes", strings.Repeat("가", 46), strings.Repeat("나", 32) + "a", "", "SUBJECT_TOO_LONG"},
		{"SubjectIgnoredForSMS", "짧은 글", "😀", "sms", ""},
		{"Emoji", "안녕 😀", "", "", "EUCKR_UNENCODABLE"},
		{"Thai", "สวัสดี", "", "", "EUCKR_UNENCODABLE"},
		{"Empty", "", "", "", "EMPTY_BODY"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			kind, reason := textKind(row.body, row.subject)
			if kind != row.kind || reason != row.reason {
				t.Fatalf("textKind = %q %q, want %q %q", kind, reason, row.kind, row.reason)
			}
		})
	}
}

func TestRefKey(t *testing.T) {
	t.Parallel()
	rows := []struct {
		id, key string
		ok      bool
	}{
		{"ntf_01JNQ8ZK3M4V5W6X7Y8Z9ABCDE.sms", "ntf_01JNQ8ZK3M4V5W6X7Y8Z9ABCDE.s", true},
		{"ntf_01JNQ8ZK3M4V5W6X7Y8Z9ABCDE.alimtalk", "ntf_01JNQ8ZK3M4V5W6X7Y8Z9ABCDE.a", true},
		{"notification-outbox-42", "notification-outbox-42", true},
		{strings.Repeat("x", 32), strings.Repeat("x", 32), true},
		{strings.Repeat("x", 33), "", false},
		{strings.Repeat("x", 30) + ".sms", strings.Repeat("x", 30) + ".s", true},
		{strings.Repeat("x", 31) + ".sms", "", false},
		{"looks.s", "", false},
		{"looks.a", "", false},
		{"", "", false},
	}
	for _, row := range rows {
		key, ok := refKey(row.id)
		if ok != row.ok || (ok && key != row.key) {
			t.Errorf("refKey(%q) = %q %v, want %q %v", row.id, key, ok, row.key, row.ok)
		}
		if ok && messageID(key) != row.id {
			t.Errorf("messageID(%q) = %q, want %q", key, messageID(key), row.id)
		}
	}
}

// FuzzRefKey: every id that travels as a refkey comes back as itself, in
// at most 32 characters.
func FuzzRefKey(f *testing.F) {
	for _, s := range []string{"ntf_01JNQ8ZK3M4V5W6X7Y8Z9ABCDE.sms", "a.alimtalk", "x.s", "push.d1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		key, ok := refKey(id)
		if !ok {
			return
		}
		if len([]rune(key)) > refKeyMax {
			t.Fatalf("refKey(%q) = %q: longer than %d", id, key, refKeyMax)
		}
		if got := messageID(key); got != id {
			t.Fatalf("messageID(refKey(%q)) = %q", id, got)
		}
	})
}

func TestPhoneNumber(t *testing.T) {
	t.Parallel()
	rows := []struct {
		in, want string
		ok       bool
	}{
		{"01012345678", "01012345678", true},
		{"010-1234-5678", "01012345678", true},
		{"+82 10-1234-5678", "01012345678", true},
		{"+82 010 1234 5678", "01012345678", true},
		{"(02) 1234.5678", "0212345678", true},
		{"+1 415 555 0100", "", false},
		{"010-CALL-ME", "", false},
		{"12", "", false},
		{"01012345678901234", "", false},
		{"010+1234", "", false},
	}
	for _, row := range rows {
		got, ok := phoneNumber(row.in)
		if got != row.want || ok != row.ok {
			t.Errorf("phoneNumber(%q) = %q %v, want %q %v", row.in, got, ok, row.want, row.ok)
		}
	}
}

// TestTextKindAsChosen: the rule's choice of an LMS is sent as an LMS (with
// its subject checked); a short SMS chosen for a long body still goes as an
// LMS, never over the short type's limit.
func TestTextKindAsChosen(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name, body, subject string
		chosen              provider.SMSKind
		kind, reason        string
	}{
		{"NoneChosen", "짧은 글", "", "", "sms", ""},
		{"ShortChosen", "짧은 글", "", provider.SMSShort, "sms", ""},
		{"LongChosenForShortBody", "짧은 글", "제목", provider.SMSLong, "lms", ""},
		{"LongChosenSubjectTooLong", "짧은 글", strings.Repeat("나", 33), provider.SMSLong, "", "SUBJECT_TOO_LONG"},
		{"ShortChosenForLongBody", strings.Repeat("가", 46), "", provider.SMSShort, "lms", ""},
		{"TooLongWhateverChosen", strings.Repeat("가", 1001), "", provider.SMSLong, "", "TEXT_TOO_LONG"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			kind, reason := textKindAs(row.body, row.subject, row.chosen)
			if kind != row.kind || reason != row.reason {
				t.Fatalf("textKindAs = %q %q, want %q %q", kind, reason, row.kind, row.reason)
			}
		})
	}
}
