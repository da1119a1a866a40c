package allowlist_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/allowlist"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
)

func TestNormalizePhone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string // want "" means not a number
	}{
		{"E164", "+821012345678", "+821012345678"},
		{"E164Spaced", "+82 10 1234 5678", "+821012345678"},
		{"E164Hyphens", "+82-10-1234-5678", "+821012345678"},
		{"KoreanMobile", "010-1234-5678", "+821012345678"},
		{"KoreanMobileBare", "01012345678", "+821012345678"},
		{"KoreanMobileParens", "(010) 1234.5678", "+821012345678"},
		{"KoreanWithCountryAndTrunkZero", "+82 010-1234-5678", "+821012345678"},
		{"SeoulLandline", "02-123-4567", "+8221234567"},
		{"TrunkMarker", "+44 (0)20 7946 0018", "+442079460018"},
		{"USNumber", "+1 (415) 555-0100", "+14155550100"},
		{"SurroundingSpace", "  010-1234-5678 ", "+821012345678"},
		{"InternationalPrefix", "0082-10-1234-5678", ""},
		{"NoPrefix", "821012345678", ""},
		{"Letters", "010-CALL-NOW", ""},
		{"PlusInside", "010+1234", ""},
		{"TooShort", "+8212345", ""},
		{"TooLong", "+8210123456789012", ""},
		{"ZeroCountry", "+0101234567", ""},
		{"Empty", "", ""},
		{"OnlyPlus", "+", ""},
		{"UnicodeHyphen", "010‐1234‐5678", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := allowlist.NormalizePhone(tc.in)
			if ok != (tc.want != "") || got != tc.want {
				t.Fatalf("NormalizePhone(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
			}
		})
	}
}

func TestNormalizeEmail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"Plain", "qa@example.com", "qa@example.com"},
		{"Case", "QA.Team@Example.COM", "qa.team@example.com"},
		{"Plus", "qa+herald@example.com", "qa+herald@example.com"},
		{"DisplayName", "QA <qa@example.com>", ""},
		{"TwoAts", "qa@evil.com@example.com", ""},
		{"NoDomainDot", "qa@localhost", ""},
		{"NoLocal", "@example.com", ""},
		{"Space", "q a@example.com", ""},
		{"TrailingDot", "qa@example.com.", ""},
		{"Empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := allowlist.NormalizeEmail(tc.in)
			if ok != (tc.want != "") || got != tc.want {
				t.Fatalf("NormalizeEmail(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
			}
		})
	}
}

func testList(t *testing.T) *allowlist.List {
	t.Helper()
	l, err := allowlist.New(allowlist.Config{
		Phones:       []string{"010-1234-5678", "+1 415 555 0100"},
		Emails:       []string{"Lead@Partner.example"},
		EmailDomains: []string{"Example.com"},
		DeviceTokens: []string{"tok-qa-1", "AB01CD23EF45"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestAllows(t *testing.T) {
	t.Parallel()
	l := testList(t)
	if l.Len() != 6 {
		t.Fatalf("Len = %d, want 6", l.Len())
	}
	push1 := heraldtype.DeviceSend(heraldtype.ChannelPush, "d1")
	for _, tc := range []struct {
		name    string
		ch      heraldtype.Channel
		address string
		want    bool
	}{
		{"PhoneSameForm", heraldtype.ChannelSMS, "010-1234-5678", true},
		{"PhoneE164OfKoreanEntry", heraldtype.ChannelSMS, "+821012345678", true},
		{"PhoneOtherFormOnAlimTalk", heraldtype.ChannelAlimTalk, "+82 010 1234 5678", true},
		{"PhoneE164Entry", heraldtype.ChannelSMS, "+14155550100", true},
		{"PhoneOther", heraldtype.ChannelSMS, "010-1234-5679", false},
		{"PhoneUnparsable", heraldtype.ChannelSMS, "1234-5678", false},
		{"PhoneEmpty", heraldtype.ChannelSMS, "", false},
		{"EmailExact", heraldtype.ChannelEmail, "lead@partner.example", true},
		{"EmailExactOtherCase", heraldtype.ChannelEmail, "LEAD@partner.EXAMPLE", true},
		{"EmailOtherAtExactDomain", heraldtype.ChannelEmail, "ceo@partner.example", false},
		{"EmailDomain", heraldtype.ChannelEmail, "anyone@example.com", true},
		{"EmailSubdomainOfDomain", heraldtype.ChannelEmail, "anyone@mail.example.com", false},
		{"EmailLookalikeDomain", heraldtype.ChannelEmail, "anyone@notexample.com", false},
		{"EmailDomainSmuggled", heraldtype.ChannelEmail, "x@evil.com@example.com", false},
		{"EmailPhoneEntryIsNoEmail", heraldtype.ChannelEmail, "010-1234-5678", false},
		{"TokenExact", heraldtype.ChannelPush, "tok-qa-1", true},
		{"TokenOnDeviceSend", push1, "tok-qa-1", true},
		{"TokenOtherCase", heraldtype.ChannelPush, "TOK-QA-1", false},
		// An APNs token is hex, one device in either case, and herald
		// stores it in lower case (package devices).
		{"HexTokenOtherCase", push1, "ab01cd23ef45", true},
		{"HexTokenSameCase", push1, "AB01CD23EF45", true},
		{"HexTokenOther", push1, "ab01cd23ef46", false},
		{"TokenOther", push1, "tok-real", false},
		{"TokenEmpty", heraldtype.ChannelPush, "", false},
		{"PhoneIsNoToken", heraldtype.ChannelPush, "+821012345678", false},
		{"WebhookHasNoAddress", heraldtype.ChannelWebhook, "", true},
		{"InboxIsNoProviderChannel", heraldtype.ChannelInbox, "", false},
		{"UnknownChannel", "fax", "010-1234-5678", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := l.Allows(tc.ch, tc.address); got != tc.want {
				t.Fatalf("Allows(%s, %q) = %v, want %v", tc.ch, tc.address, got, tc.want)
			}
		})
	}
}

// An empty list, and the zero List, allow nothing but the webhook channel.
func TestEmptyListAllowsNoAddress(t *testing.T) {
	t.Parallel()
	empty, err := allowlist.New(allowlist.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*allowlist.List{empty, {}, nil} {
		for _, ch := range []heraldtype.Channel{heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk, heraldtype.ChannelEmail, heraldtype.ChannelPush} {
			if l.Allows(ch, "010-1234-5678") || l.Allows(ch, "a@example.com") || l.Allows(ch, "tok") {
				t.Fatalf("an empty list allows a %s send", ch)
			}
		}
		if !l.Allows(heraldtype.ChannelWebhook, "") {
			t.Fatal("an empty list refuses the webhook channel, which carries no address")
		}
	}
}

// A bad entry is refused, naming its key and index.
func TestNewNamesTheBadEntry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    allowlist.Config
		want string
	}{
		{"Phone", allowlist.Config{Phones: []string{"+821012345678", "1234"}}, `phones[1]: "1234" is not a phone number`},
		{"Email", allowlist.Config{Emails: []string{"qa"}}, `emails[0]: "qa" is not an e-mail address`},
		{"DomainWithAt", allowlist.Config{EmailDomains: []string{"@example.com"}}, `email_domains[0]: "@example.com" is not a domain`},
		{"DomainBare", allowlist.Config{EmailDomains: []string{"com"}}, `email_domains[0]: "com" is not a domain`},
		{"TokenEmpty", allowlist.Config{DeviceTokens: []string{""}}, `device_tokens[0]: "" is not a device token`},
		{"TokenSpaced", allowlist.Config{DeviceTokens: []string{"tok "}}, `device_tokens[0]: "tok " is not a device token`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := allowlist.New(tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

type countingProvider struct{ calls atomic.Int32 }

func (p *countingProvider) Send(context.Context, provider.Message) provider.Outcome {
	p.calls.Add(1)
	return provider.AcceptedOutcome("ref")
}

// The adapter's guard refuses a destination not on the list by itself,
// before the adapter sees it, and passes an allowed one through.
func TestGuardRefusesBeforeTheAdapter(t *testing.T) {
	t.Parallel()
	l := testList(t)
	next := &countingProvider{}
	var blocked []string
	g := l.Guard(next, func(_ context.Context, m provider.Message) { blocked = append(blocked, m.MessageID) })
	ctx := context.Background()

	out := g.Send(ctx, provider.Message{MessageID: "m1", Channel: heraldtype.ChannelSMS, Address: "+82 10 9999 0000"})
	if out.Class != provider.NotSent || !out.Suppressed || out.Reason != heraldtype.ReasonNotAllowlisted {
		t.Fatalf("a blocked send = %+v, want not_sent, Suppressed, NOT_ALLOWLISTED", out)
	}
	if next.calls.Load() != 0 || len(blocked) != 1 || blocked[0] != "m1" {
		t.Fatalf("a blocked send reached the adapter (%d calls) or was not reported (%v)", next.calls.Load(), blocked)
	}
	out = g.Send(ctx, provider.Message{MessageID: "m2", Channel: heraldtype.ChannelSMS, Address: "+821012345678"})
	if out.Class != provider.Accepted || out.Suppressed || next.calls.Load() != 1 {
		t.Fatalf("an allowed send = %+v after %d calls, want accepted after 1", out, next.calls.Load())
	}
	// nil blocked is allowed.
	if out := l.Guard(next, nil).Send(ctx, provider.Message{Channel: heraldtype.ChannelEmail, Address: "x@y.example"}); !out.Suppressed {
		t.Fatalf("blocked send = %+v", out)
	}
}

var e164 = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

// NormalizePhone reads addresses from profiles: whatever it is given, what
// it returns is E.164 and normalises to itself, so the list and the
// message are compared in one form.
func FuzzNormalizePhone(f *testing.F) {
	for _, s := range []string{"010-1234-5678", "+82 010 1234 5678", "+44 (0)20 7946 0018", "0082", "+", "(0)(0)0", "+820"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := allowlist.NormalizePhone(s)
		if !ok {
			if n != "" {
				t.Fatalf("NormalizePhone(%q) = %q, false", s, n)
			}
			return
		}
		if !e164.MatchString(n) {
			t.Fatalf("NormalizePhone(%q) = %q, not E.164", s, n)
		}
		if again, ok := allowlist.NormalizePhone(n); !ok || again != n {
			t.Fatalf("NormalizePhone(%q) = %q, but that normalises to %q, %v", s, n, again, ok)
		}
	})
}

// NormalizeEmail's answer is one bare address that normalises to itself.
func FuzzNormalizeEmail(f *testing.F) {
	for _, s := range []string{"qa@example.com", "Q@E.x", "a@b@c.d", "<a@b.c>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := allowlist.NormalizeEmail(s)
		if !ok {
			return
		}
		if strings.Count(n, "@") != 1 || strings.ContainsAny(n, " <>") {
			t.Fatalf("NormalizeEmail(%q) = %q", s, n)
		}
		if again, ok := allowlist.NormalizeEmail(n); !ok || again != n {
			t.Fatalf("NormalizeEmail(%q) = %q, but that normalises to %q, %v", s, n, again, ok)
		}
	})
}

// The check a guarded send pays in each layer, for the report.
func BenchmarkAllows(b *testing.B) {
	phones := make([]string, 1000)
	for i := range phones {
		phones[i] = fmt.Sprintf("010-%04d-%04d", i, i)
	}
	l, err := allowlist.New(allowlist.Config{Phones: phones, EmailDomains: []string{"example.com"}, DeviceTokens: []string{"tok-qa"}})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		ch      heraldtype.Channel
		address string
	}{
		{"Phone", heraldtype.ChannelSMS, "+82 10-9999-0000"},
		{"Email", heraldtype.ChannelEmail, "dev@example.com"},
		{"Token", heraldtype.ChannelPush, "tok-real-0123456789abcdef"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				l.Allows(bc.ch, bc.address)
			}
		})
	}
}
