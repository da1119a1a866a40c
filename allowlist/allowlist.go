// Package allowlist is the non-production guard's list (seed 000 §7): the
// destinations a herald outside production may reach. Outside production
// the app checks it in three places, each on its own: the dispatcher (the
// db claimer's Gate), the sender's pre-checks, and around every adapter
// (Guard), so that a slip in one layer still sends nothing to a real
// person.
//
// A destination is the address a send carries, matched by its channel:
//
//	sms, alimtalk   a phone number, exactly, after normalising both sides
//	                (NormalizePhone: "+82 10-1234-5678", "010-1234-5678"
//	                and "+821012345678" are one number)
//	email           an address, exactly (case-insensitive), or any address
//	                of a listed domain (that domain itself, not its
//	                subdomains)
//	push            a device token, exactly
//	webhook         always allowed: the channel carries no recipient
//	                address, it goes to the URL the same configuration names
//
// Anything that does not parse as its channel's kind of address is not on
// the list: the guard fails closed.
package allowlist

import (
	"context"
	"fmt"
	"strings"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
)

// Config is the list as written in the configuration.
type Config struct {
	// Phones are phone numbers: E.164 (+821012345678) or Korean national
	// (010-1234-5678).
	Phones []string
	// Emails are exact e-mail addresses.
	Emails []string
	// EmailDomains are domains every address of which is allowed
	// (example.com).
	EmailDomains []string
	// DeviceTokens are push device tokens.
	DeviceTokens []string
}

// List is a compiled allow-list. The zero List allows no address.
type List struct {
	phones  map[string]bool
	emails  map[string]bool
	domains map[string]bool
	tokens  map[string]bool
}

// New compiles c. An entry that is not a valid address of its kind is an
// error naming it by its key and index (phones[2]), so a typo cannot leave
// a tester's number off the list unnoticed.
func New(c Config) (*List, error) {
	l := &List{phones: map[string]bool{}, emails: map[string]bool{}, domains: map[string]bool{}, tokens: map[string]bool{}}
	for _, k := range []struct {
		key       string
		entries   []string
		into      map[string]bool
		normalize func(string) (string, bool)
		want      string
	}{
		{"phones", c.Phones, l.phones, NormalizePhone, "a phone number (E.164 like +821012345678, or Korean like 010-1234-5678)"},
		{"emails", c.Emails, l.emails, NormalizeEmail, "an e-mail address (name@example.com)"},
		{"email_domains", c.EmailDomains, l.domains, normalizeDomain, "a domain (example.com, without @)"},
		{"device_tokens", c.DeviceTokens, l.tokens, normalizeToken, "a device token (not empty, no white space around it)"},
	} {
		for i, e := range k.entries {
			n, ok := k.normalize(e)
			if !ok {
				return nil, fmt.Errorf("%s[%d]: %q is not %s", k.key, i, e, k.want)
			}
			k.into[n] = true
		}
	}
	return l, nil
}

// normalizeToken returns a device token as it is, a hex one (an APNs
// token) in lower case, or false when it is empty or has white space
// around it.
func normalizeToken(token string) (string, bool) {
	return hexLower(token), token != "" && strings.TrimSpace(token) == token
}

// hexLower returns a token of hex digits alone in lower case, any other
// as it is: APNs reads a hex token in either case, and herald stores it
// in lower case (package devices), while other tokens are case-sensitive.
func hexLower(token string) string {
	for i := 0; i < len(token); i++ {
		if c := token[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return token
		}
	}
	return strings.ToLower(token)
}

// Len is the number of entries on the list.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.phones) + len(l.emails) + len(l.domains) + len(l.tokens)
}

// Allows reports whether a send on ch (a channel or a send to one device:
// its base channel decides) may go to address.
func (l *List) Allows(ch heraldtype.Channel, address string) bool {
	switch ch.Base() {
	case heraldtype.ChannelWebhook:
		return true
	case heraldtype.ChannelSMS, heraldtype.ChannelAlimTalk:
		n, ok := NormalizePhone(address)
		return ok && l != nil && l.phones[n]
	case heraldtype.ChannelEmail:
		n, ok := NormalizeEmail(address)
		if !ok || l == nil {
			return false
		}
		_, domain, _ := strings.Cut(n, "@")
		return l.emails[n] || l.domains[domain]
	case heraldtype.ChannelPush:
		return address != "" && l != nil && l.tokens[hexLower(address)]
	}
	return false
}

// NormalizePhone returns number in E.164 (+ and 8 to 15 digits, no leading
// zero), or false. Spaces, hyphens, dots and parentheses are dropped, and
// so is a trunk "(0)" (+44 (0)20…). A number starting with + is
// international; one starting with a single 0 is Korean national
// (010-1234-5678 → +821012345678), and a Korean number written with both
// (+82 010-…) loses its 0. Anything else — letters, a 00 prefix, digits
// with neither + nor 0 in front — is not a number the guard can compare,
// and so never matches.
func NormalizePhone(number string) (string, bool) {
	s := strings.Replace(strings.TrimSpace(number), "(0)", "", 1)
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+' && i == 0, c >= '0' && c <= '9':
			b.WriteByte(c)
		case c == ' ' || c == '-' || c == '.' || c == '(' || c == ')':
		default:
			return "", false
		}
	}
	d := b.String()
	var digits string
	switch {
	case strings.HasPrefix(d, "+820"):
		if strings.HasPrefix(d[4:], "0") {
			return "", false // no Korean number goes on with a second 0
		}
		digits = "82" + d[4:]
	case strings.HasPrefix(d, "+"):
		digits = d[1:]
	case strings.HasPrefix(d, "00"):
		return "", false // an international prefix: which one varies by country
	case strings.HasPrefix(d, "0"):
		digits = "82" + d[1:]
	default:
		return "", false
	}
	if len(digits) < 8 || len(digits) > 15 || digits[0] == '0' {
		return "", false
	}
	return "+" + digits, true
}

// NormalizeEmail returns address lower-cased, or false when it is not one
// bare address (local@domain: one @, no spaces, no display name).
func NormalizeEmail(address string) (string, bool) {
	local, domain, ok := strings.Cut(address, "@")
	if !ok || local == "" || strings.ContainsAny(local, " \t\r\n<>,;@\"") {
		return "", false
	}
	d, ok := normalizeDomain(domain)
	if !ok {
		return "", false
	}
	return strings.ToLower(local) + "@" + d, true
}

// normalizeDomain returns domain lower-cased, or false when it is not a
// dotted name.
func normalizeDomain(domain string) (string, bool) {
	if domain == "" || !strings.Contains(domain, ".") || strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") ||
		strings.Contains(domain, "..") || strings.ContainsAny(domain, " \t\r\n<>,;@\"()[]\\/:") {
		return "", false
	}
	return strings.ToLower(domain), true
}

// Guard wraps an adapter so that it refuses, by itself, every message
// whose destination is not on l: the guard's last layer, right before the
// call. A refused message gets provider.SuppressedOutcome(NOT_ALLOWLISTED)
// and never reaches p; blocked, when set, is told of it (the earlier
// layers let it through: worth a log line).
func (l *List) Guard(p provider.Provider, blocked func(ctx context.Context, m provider.Message)) provider.Provider {
	return &guarded{list: l, next: p, blocked: blocked}
}

type guarded struct {
	list    *List
	next    provider.Provider
	blocked func(ctx context.Context, m provider.Message)
}

var _ provider.Provider = (*guarded)(nil)

func (g *guarded) Send(ctx context.Context, m provider.Message) provider.Outcome {
	if !g.list.Allows(m.Channel, m.Address) {
		if g.blocked != nil {
			g.blocked(ctx, m)
		}
		return provider.SuppressedOutcome(heraldtype.ReasonNotAllowlisted)
	}
	return g.next.Send(ctx, m)
}
