package app

import (
	"context"
	"unicode/utf8"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider/twilio"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/smstext"
)

// The text limits (issue 11 item 4, seed 000 §7): an SMS, and the
// AlimTalk text the vendor resends as an SMS or LMS, are measured in
// EUC-KR bytes (package smstext) in the sender's pre-checks. Up to 90
// bytes goes as a short SMS, up to 2,000 as an LMS (the choice travels in
// provider.Message.SMSKind); over 2,000, or a character EUC-KR cannot
// encode, is PARKED (TEXT_TOO_LONG, EUCKR_UNENCODABLE) before any provider
// call, since the vendor would refuse it every time. The rule needs no
// configuration: the limits are the carriers'.
//
// It applies to the providers that send through Korean carriers, by type:
// bizppurio, and sim, which stands in for it in development so that
// development parks what production would. Twilio counts its own units
// (GSM-7 and UCS-2 segments; an emoji is fine there) and a webhook
// receiver sets its own limits, so their sends are not measured in EUC-KR.
// Twilio does have one limit of its own that the same text breaks every
// time: a Body over 1,600 characters (its error 21617). Such a text is
// PARKED (TEXT_TOO_LONG) before the call, as a too long text for a Korean
// carrier is, rather than ending PERMANENT_FAILURE after a call Twilio was
// bound to refuse. Characters are counted as code points, so nothing
// Twilio would take is parked.
var euckrProviderTypes = map[string]bool{"bizppurio": true, "sim": true}

// textLimitChecks is the rule's sender check, over the configured
// providers whose type is measured in EUC-KR and the Twilio ones; none
// when there is neither.
func (a *App) textLimitChecks() []sender.Check {
	measured, twilios := map[string]bool{}, map[string]bool{}
	for _, p := range a.cfg.Providers {
		switch {
		case euckrProviderTypes[p.Type]:
			measured[p.Name] = true
		case p.Type == "twilio":
			twilios[p.Name] = true
		}
	}
	if len(measured) == 0 && len(twilios) == 0 {
		return nil
	}
	return []sender.Check{textLimit{providers: measured, twilio: twilios}}
}

// textLimit parks the carrier texts of its providers that no carrier would
// take, and sets the kind of the others.
type textLimit struct {
	// providers are the names of the providers measured in EUC-KR.
	providers map[string]bool
	// twilio are the names of the Twilio providers, held to
	// twilio.MaxBodyChars.
	twilio map[string]bool
}

var _ sender.Check = textLimit{}

func (r textLimit) Check(_ context.Context, s sender.Subject) sender.Ruling {
	if r.twilio[s.Provider] {
		if utf8.RuneCountInString(twilio.Text(*s.Message)) > twilio.MaxBodyChars {
			return sender.ParkFor(heraldtype.ReasonTextTooLong)
		}
		return sender.Ruling{}
	}
	if !r.providers[s.Provider] {
		return sender.Ruling{}
	}
	if reason := smstext.Measure(s.Message); reason != "" {
		return sender.ParkFor(reason)
	}
	return sender.Ruling{}
}
