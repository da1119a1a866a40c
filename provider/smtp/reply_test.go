package smtp

import (
	"regexp"
	"strings"
	"testing"

	"github.com/heraldhq/herald/provider"
)

func TestQueueID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, text, want string }{
		{"Postfix", "2.0.0 Ok: queued as 4Z9xQk1TmWz3n", "4Z9xQk1TmWz3n"},
		{"Exim", "OK id=1tZxyz-000ABC-1x", "1tZxyz-000ABC-1x"},
		{"MultiLine", "2.0.0 Ok\nqueued as ABC123", "ABC123"},
		{"GoSMTPDefault", "2.0.0 OK: queued", ""},
		{"Gmail", "2.0.0 OK  1700000000 a1si1234567wrk.123 - gsmtp", ""},
		{"ExchangeInternalIdIsNotAnEximId", "2.6.0 <n1.email@mail.example.org> [InternalId=1234, Hostname=EX1] Queued mail for delivery", ""},
		{"AnAddressIsNeverTaken", "2.0.0 Ok: queued as kim@example.com", ""},
		{"AnAngleAddressIsNeverTaken", "2.0.0 Ok: queued as <kim@example.com>", ""},
		{"TooLong", "2.0.0 Ok: queued as A" + strings.Repeat("1", 64), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := queueID(tc.text); got != tc.want {
				t.Errorf("queueID(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}

func TestEnhancedCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code       int
		text, want string
	}{
		{550, "5.1.1 no such user", "5.1.1"},
		{556, "5.1.10 null MX", "5.1.10"},
		{550, "5.001.001 padded", "5.1.1"},
		{550, "5.1.1", "5.1.1"},
		{550, "4.1.1 class disagrees with the code", ""},
		{550, "5.1.1no space after it", ""},
		{550, "no such user 5.1.1", ""},
		{550, "5.1234.1 too many digits", ""},
	} {
		if got := (reply{code: tc.code, text: tc.text}).enhanced(); got != tc.want {
			t.Errorf("enhanced(%d %q) = %q, want %q", tc.code, tc.text, got, tc.want)
		}
	}
}

var (
	reasonShape = regexp.MustCompile(`^SMTP_[A-Z]+_[0-9]+(_[245]\.[0-9]{1,3}\.[0-9]{1,3})?$`)
	refShape    = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]{0,63})?$`)
)

// FuzzReply: whatever a server answers, the outcome's reason is a code of
// a fixed shape (never the server's text), the provider reference is a
// short token, and the class follows the reply code's class.
func FuzzReply(f *testing.F) {
	f.Add(250, "2.0.0 Ok: queued as 4Z9xQk1TmWz3n")
	f.Add(550, "5.1.1 no such user")
	f.Add(451, "4.7.1 greylisted\nplease retry")
	f.Add(354, "go ahead")
	f.Add(553, "5.1.3 "+"\x00\r\n")
	f.Fuzz(func(t *testing.T, code int, text string) {
		if code < 100 || code > 599 {
			return
		}
		r := reply{code: code, text: text}
		final := finalReply(r)
		outcomes := []provider.Outcome{final}
		for _, step := range []string{stepGreeting, stepEHLO, stepSTARTTLS, stepAuth, stepMail, stepRcpt, stepData} {
			o := refusal(step, r)
			if o.Class != provider.NotSent && o.Class != provider.Permanent {
				t.Fatalf("refusal(%s, %d %q) = %+v: before the dot only NotSent or Permanent", step, code, text, o)
			}
			if o.DeadDestination && step != stepRcpt {
				t.Fatalf("refusal(%s, %d %q) is a dead destination outside RCPT", step, code, text)
			}
			outcomes = append(outcomes, o)
		}
		for _, o := range outcomes {
			if o.Class != provider.Accepted && !reasonShape.MatchString(o.Reason) {
				t.Fatalf("reason %q of %d %q has not the code shape", o.Reason, code, text)
			}
			if !refShape.MatchString(o.ProviderRef) {
				t.Fatalf("provider ref %q of %d %q is not a short token", o.ProviderRef, code, text)
			}
		}
		want := map[int]provider.Class{2: provider.Accepted, 4: provider.NotSent, 5: provider.Permanent}[code/100]
		if want == 0 {
			want = provider.Unknown
		}
		if final.Class != want {
			t.Fatalf("finalReply(%d %q) = %v, want %v", code, text, final.Class, want)
		}
	})
}
