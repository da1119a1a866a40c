package twilio

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/provider"
)

// SignatureHeader carries Twilio's signature of a callback.
const SignatureHeader = "X-Twilio-Signature"

// ParseCallback checks a status callback's X-Twilio-Signature against the
// URL Twilio called (Config.CallbackURL with the request's own query) and
// its POST parameters, then reads the one report it carries.
func (t *Twilio) ParseCallback(r *http.Request, body []byte) ([]provider.Report, error) {
	if !t.hasCallback {
		return nil, fmt.Errorf("twilio callback: no callback_url is configured to check against: %w", provider.ErrBadSignature)
	}
	sig := r.Header.Get(SignatureHeader)
	if sig == "" {
		return nil, fmt.Errorf("twilio callback: no %s header: %w", SignatureHeader, provider.ErrBadSignature)
	}
	params, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("twilio callback: body is not a form, so it cannot be checked: %w", provider.ErrBadSignature)
	}
	called := t.callback
	if r.URL.RawQuery != "" {
		called += "?" + r.URL.RawQuery
	}
	if !validSignature(t.authToken, called, params, sig) {
		return nil, fmt.Errorf("twilio callback: %s does not match: %w", SignatureHeader, provider.ErrBadSignature)
	}

	id := r.URL.Query().Get("message_id")
	if id == "" {
		return nil, fmt.Errorf("twilio callback: no message_id in the URL: %w", provider.ErrBadCallback)
	}
	status := first(params, "MessageStatus", "SmsStatus")
	c := 0
	if v := params.Get("ErrorCode"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("twilio callback: ErrorCode is not a number: %w", provider.ErrBadCallback)
		}
		c = n
	}
	rep, ok := report(status, c)
	if !ok {
		return nil, fmt.Errorf("twilio callback: message status %s is not an outbound one: %w", statusWord(status), provider.ErrBadCallback)
	}
	rep.MessageID = id
	rep.ProviderRef = first(params, "MessageSid", "SmsSid")
	return []provider.Report{rep}, nil
}

// first is the first non-empty value among the names.
func first(v url.Values, names ...string) string {
	for _, n := range names {
		if s := v.Get(n); s != "" {
			return s
		}
	}
	return ""
}

// validSignature reports whether sig is Twilio's signature of a request to
// rawURL with params: base64 of HMAC-SHA1(authToken, rawURL followed by each
// parameter's name and value, sorted by name, then value). As Twilio's
// helper libraries do, the URL with its port removed or the scheme's default
// port added is accepted too. The comparison is constant-time.
func validSignature(authToken, rawURL string, params url.Values, sig string) bool {
	var tail strings.Builder
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vs := append([]string(nil), params[n]...)
		sort.Strings(vs)
		for _, v := range vs {
			tail.WriteString(n)
			tail.WriteString(v)
		}
	}
	ok := false
	for _, u := range []string{rawURL, portVariant(rawURL)} {
		if u == "" {
			continue
		}
		mac := hmac.New(sha1.New, []byte(authToken))
		mac.Write([]byte(u))
		mac.Write([]byte(tail.String()))
		want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
		// Both are checked, so the time taken says nothing of which matched.
		ok = hmac.Equal([]byte(want), []byte(sig)) || ok
	}
	return ok
}

// portVariant is rawURL without its port, or with the scheme's default port
// when it has none; the path and query stay byte for byte. Empty when rawURL
// has no scheme and host.
func portVariant(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ""
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	host, tail := rest[:end], rest[end:]
	if h, _, err := net.SplitHostPort(host); err == nil {
		if strings.Contains(h, ":") {
			h = "[" + h + "]"
		}
		return scheme + "://" + h + tail
	}
	port := "80"
	if strings.EqualFold(scheme, "https") {
		port = "443"
	}
	return scheme + "://" + host + ":" + port + tail
}
