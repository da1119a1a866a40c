package smtp

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/provider"
)

// refusal classifies a reply that ends a step before the final dot was
// written: nothing was delivered, so it is NotSent or Permanent, never
// Unknown (see the package comment).
func refusal(step string, r reply) provider.Outcome {
	reason := r.reason(step)
	transaction := step == stepMail || step == stepRcpt || step == stepData
	if !transaction || r.code/100 != 5 || r.code == 530 {
		return provider.NotSentOutcome(reason, 0)
	}
	if step == stepRcpt && r.deadMailbox() {
		return provider.DeadDestinationOutcome(reason)
	}
	return provider.PermanentOutcome(reason)
}

// finalReply classifies the reply to the final dot.
func finalReply(r reply) provider.Outcome {
	switch {
	case r.code/100 == 2:
		return provider.AcceptedOutcome(queueID(r.text))
	case r.code/100 == 4:
		return provider.NotSentOutcome(r.reason(stepMessage), 0)
	case r.code/100 == 5:
		return provider.PermanentOutcome(r.reason(stepMessage))
	}
	// A 1xx or 3xx to the end of data is no answer SMTP defines: the
	// server had the message, and what it did with it is not known.
	return provider.UnknownOutcome(r.reason(stepMessage))
}

// reason is SMTP_<step>_<code>, with _<enhanced code> when there is one.
func (r reply) reason(step string) string {
	reason := "SMTP_" + step + "_" + strconv.Itoa(r.code)
	if e := r.enhanced(); e != "" {
		reason += "_" + e
	}
	return reason
}

// enhancedCode is an RFC 3463 status code at the start of a reply's text:
// class.subject.detail, each 1-3 digits, followed by a space or the end.
var enhancedCode = regexp.MustCompile(`^([245])\.([0-9]{1,3})\.([0-9]{1,3})(?: |\n|$)`)

// enhanced returns the reply's enhanced status code ("5.1.1"), or "" when
// it has none or one whose class disagrees with the reply code.
func (r reply) enhanced() string {
	m := enhancedCode.FindStringSubmatch(r.text)
	if m == nil || m[1] != strconv.Itoa(r.code/100) {
		return ""
	}
	return m[1] + "." + trimZeros(m[2]) + "." + trimZeros(m[3])
}

func trimZeros(s string) string {
	n, _ := strconv.Atoi(s)
	return strconv.Itoa(n)
}

// deadMailbox reports whether a permanent refusal says that the address
// itself does not exist (see the package comment for why these codes).
func (r reply) deadMailbox() bool {
	e := r.enhanced()
	if e == "" {
		return r.code == 551
	}
	switch strings.TrimPrefix(e, "5.") {
	case "1.1", "1.2", "1.3", "1.6", "1.10":
		return true
	}
	return false
}

// queueIDs are the shapes of an accepting reply that name the server's
// queue id: Postfix's "queued as 4Z9xQk1TmWz3n" and Exim's
// "id=1tZxyz-000ABC-1x". The id is a short token, so nothing else of the
// reply (an address, a name) can ride along.
var queueIDs = regexp.MustCompile(`(?i)(?:\bqueued as |(?:^|[ \[(])id=)([A-Za-z0-9][A-Za-z0-9._-]{0,63})(?:[ \n\])]|$)`)

// queueID returns the server's queue id from an accepting reply, or "".
func queueID(text string) string {
	m := queueIDs.FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}
