package bizppurio

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/provider"
)

// CallbackTokenParam is the query parameter of the registered report URL
// that carries Config.CallbackToken.
const CallbackTokenParam = "token"

// pushReport is one report as the vendor pushes it (api/dispatch-result.md).
// encoding/json matches keys without regard to case, so the polling API's
// lower-case spelling reads too. PHONE and TO_NAME are not read: herald
// knows whom it sent to, and keeps no more personal data than it needs.
type pushReport struct {
	Device     flexString `json:"DEVICE"`
	CMsgID     flexString `json:"CMSGID"`
	Media      flexString `json:"MEDIA"`
	UnixTime   flexString `json:"UNIXTIME"`
	Result     flexString `json:"RESULT"`
	TelRes     flexString `json:"TELRES"`
	KaoRes     flexString `json:"KAORES"`
	RCSRes     flexString `json:"RCSRES"`
	ResendFlag flexString `json:"RESEND_FLAG"`
	RefKey     flexString `json:"REFKEY"`
}

// Result codes that mean delivered: SMS, LMS/MMS, AlimTalk/FriendTalk.
const (
	codeSMSDelivered = 4100
	codeLMSDelivered = 6600
	codeATDelivered  = 7000
	// codeATUncertain: Kakao could not confirm; the message may still
	// arrive within 30 days (at-ai-ft.md, 7305).
	codeATUncertain = 7305
)

// deadCodes are results that say the number itself is wrong, unassigned or
// out of service (SMS 4410, 4414; LMS 6606, 6622, 6630; AlimTalk 7308).
var deadCodes = map[int]bool{4410: true, 4414: true, 6606: true, 6622: true, 6630: true, 7308: true}

// ParseCallback checks the registered URL's token and returns the reports
// the body carries (one object or an array of them). Reports without a
// REFKEY were not sent by herald and are left out.
func (b *Bizppurio) ParseCallback(r *http.Request, body []byte) ([]provider.Report, error) {
	if !b.callbackAuthentic(r) {
		return nil, fmt.Errorf("bizppurio: report URL token: %w", provider.ErrBadSignature)
	}
	var raw []pushReport
	body = bytes.TrimSpace(body)
	switch {
	case len(body) > 0 && body[0] == '[':
		if err := json.Unmarshal(body, &raw); err != nil {
			return nil, fmt.Errorf("bizppurio: report is not JSON: %w", provider.ErrBadCallback)
		}
	case len(body) > 0 && body[0] == '{':
		var one pushReport
		if err := json.Unmarshal(body, &one); err != nil {
			return nil, fmt.Errorf("bizppurio: report is not JSON: %w", provider.ErrBadCallback)
		}
		raw = []pushReport{one}
	default:
		return nil, fmt.Errorf("bizppurio: report is not a JSON object or array: %w", provider.ErrBadCallback)
	}
	out := make([]provider.Report, 0, len(raw))
	for i, p := range raw {
		if p.RefKey == "" {
			continue
		}
		rep, ok := p.report()
		if !ok {
			return nil, fmt.Errorf("bizppurio: report %d has no result code: %w", i, provider.ErrBadCallback)
		}
		out = append(out, rep)
	}
	return out, nil
}

// CallbackAccount names the vendor account whose reports reach this
// adapter's URL (provider.AccountReceiver): the API it sends through and
// the account id. The vendor pushes every report of an account to the one
// URL registered for it, so the entries of one account (one per channel)
// take each other's reports. The test API ("검수") and production are
// kept apart: a report taken by an adapter of one never settles a message
// sent through the other.
func (b *Bizppurio) CallbackAccount() string { return b.reportAccount }

// reportAccount is CallbackAccount for an adapter of account on the API at
// base (validated): its scheme and host in lower case and its path, never
// a user or password the URL might carry.
func reportAccount(base, account string) string {
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	return "bizppurio " + strings.ToLower(u.Scheme+"://"+u.Host) + strings.TrimRight(u.Path, "/") + " " + account
}

// callbackAuthentic compares the request's token with the configured one
// in constant time (over their digests, so the length is not timed
// either). Without a configured token nothing is authentic.
func (b *Bizppurio) callbackAuthentic(r *http.Request) bool {
	if b.callbackToken == "" {
		return false
	}
	got := sha256.Sum256([]byte(r.URL.Query().Get(CallbackTokenParam)))
	want := sha256.Sum256([]byte(b.callbackToken))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// resultCode reads a four-digit result code; ok is false for anything else
// (an absent fallback result included).
func resultCode(f flexString) (int, bool) {
	if len(f) != 4 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f))
	return n, err == nil && n >= 1000
}

// isKakao reports whether a DEVICE or MEDIA names a Kakao message (AT, AI,
// FT; KAT, KFT… as MEDIA spells them).
func isKakao(f flexString) bool {
	s := strings.ToUpper(string(f))
	return s == "AT" || s == "AI" || s == "FT" || strings.HasPrefix(s, "KA") || strings.HasPrefix(s, "KF")
}

// report is p as a provider.Report (the package comment's table).
func (p pushReport) report() (provider.Report, bool) {
	code, ok := resultCode(p.Result)
	if !ok {
		return provider.Report{}, false
	}
	id := messageID(string(p.RefKey))
	rep := provider.Report{MessageID: id, ProviderRef: string(p.CMsgID)}
	if s, err := strconv.ParseInt(string(p.UnixTime), 10, 64); err == nil && s > 0 {
		rep.At = time.Unix(s, 0).UTC()
	}
	heraldAT := strings.HasSuffix(id, ".alimtalk") // herald asks every AlimTalk for a fallback
	kakaoSend := heraldAT || isKakao(p.Device)
	fallback := false
	for _, f := range []flexString{p.TelRes, p.KaoRes, p.RCSRes} {
		if c, ok := resultCode(f); ok {
			code, fallback = c, true
			break
		}
	}
	carrier := code/1000 == 4 || code/1000 == 6
	if !fallback && kakaoSend && carrier {
		fallback = true // RESULT is already the SMS/LMS fallback's
	}
	reason := "BIZPPURIO_" + strconv.Itoa(code)
	if fallback {
		reason = "BIZPPURIO_FALLBACK_" + strconv.Itoa(code)
	}
	rep.Reason = reason
	switch {
	case code == codeSMSDelivered || code == codeLMSDelivered || code == codeATDelivered:
		rep.Result = provider.ReportDelivered
	case code == codeATUncertain:
		rep.Result = provider.ReportPending
	case !fallback && code/1000 == 7 && (heraldAT || p.ResendFlag != ""):
		// The AlimTalk failed and its fallback has not reported: the
		// SMS may still arrive.
		rep.Result = provider.ReportPending
	default:
		rep.Result = provider.ReportFailed
		rep.DeadDestination = deadCodes[code]
	}
	return rep, true
}
