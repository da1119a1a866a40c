package auth

import (
	"errors"
	"net/http"
	"strings"

	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/validate"
)

// RequireRecipient returns the middleware of /v1/me/…: it lets through a
// request whose Authorization is "Bearer <recipient token>" that tokens
// verifies, with the recipient in its context (RecipientFrom), and answers
// everything else 401 problem+json: no token, an expired, forged or
// malformed one, one whose kid its tenant does not list, and an API key
// (apiKeys, named in the answer so a developer sees the mix-up). A nil
// tokens refuses every request.
func RequireRecipient(tokens *RecipientTokens, apiKeys *Keys) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			authz, ok := Authorization(w, r)
			if !ok {
				return
			}
			cred, ok := bearer(authz)
			if !ok {
				refuseRecipient(w, "", detailNoToken)
				return
			}
			rcpt, err := tokens.Verify(cred)
			switch {
			case err == nil:
				next.ServeHTTP(w, r.WithContext(WithRecipient(r.Context(), rcpt)))
			case errors.Is(err, ErrTokenExpired):
				refuseRecipient(w, "invalid_token", "the recipient token has expired: mint a new one (POST /v1/recipients/{recipient}/tokens)")
			default:
				// A config key, or one shaped like a stored key
				// (hk_<id>_<secret>, package apikeys).
				if _, isKey := apiKeys.Lookup(authz); isKey || strings.HasPrefix(cred, "hk_") {
					refuseRecipient(w, "invalid_token", "an API key is not accepted on /v1/me/…: use a recipient token (POST /v1/recipients/{recipient}/tokens)")
					return
				}
				refuseRecipient(w, "invalid_token", "the recipient token is not valid")
			}
		})
	}
}

// detailNoToken is the detail of the 401 to a request without a recipient
// token.
const detailNoToken = "a recipient token is required: Authorization: Bearer <recipient token>"

// RequiredRecipient returns the recipient RequireRecipient verified for r.
// A handler of /v1/me/… takes who is asking from here; reached without
// RequireRecipient (a routing mistake), it answers 401 as RequireRecipient
// answers a request without a token, and ok is false.
func RequiredRecipient(w http.ResponseWriter, r *http.Request) (rcpt Recipient, ok bool) {
	rcpt, ok = RecipientFrom(r.Context())
	if !ok {
		refuseRecipient(w, "", detailNoToken)
	}
	return rcpt, ok
}

// refuseRecipient answers 401 with the recipient realm's challenge.
func refuseRecipient(w http.ResponseWriter, code, detail string) {
	Refuse(w, "herald recipient", code, detail)
}

// Refuse answers 401 problem+json with a Bearer challenge of realm and,
// when code is not "", its error code (RFC 6750 §3: none when no
// credentials came).
func Refuse(w http.ResponseWriter, realm, code, detail string) {
	challenge := `Bearer realm="` + realm + `"`
	if code != "" {
		challenge += `, error="` + code + `"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	problem.New(w, http.StatusUnauthorized, detail)
}

// Authorization returns the request's Authorization header ("" when it has
// none). A request that sends the header twice with different values is
// answered 400 naming it, and ok is false: HTTP allows one (RFC 9110
// §11.6.2), and with two, which credential counts would depend on which one
// each hop in front of herald reads (a proxy that checks the last, herald
// the first).
func Authorization(w http.ResponseWriter, r *http.Request) (header string, ok bool) {
	header, err := validate.OneHeader(r, "Authorization")
	if err != nil {
		problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: "Authorization", Detail: err.Error()})
		return "", false
	}
	return header, true
}
