package inbox

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/problem"
)

// mintBody is the optional body of a mint: the token's lifetime in
// seconds. No body, {} or ttl_seconds 0 mean the configured default
// (recipient_tokens.ttl, 1 hour unless set).
type mintBody struct {
	TTLSeconds int64 `json:"ttl_seconds"`
}

// Minted is the 201 body of a mint.
type Minted struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// DetailNoKeys is the detail of the 409 a tenant without recipient token
// keys gets from a mint.
const DetailNoKeys = "recipient tokens are not configured for this tenant"

// Mint serves POST /v1/recipients/{recipient}/tokens for the API key's
// tenant (auth.Tenant): a token for that recipient, valid for ttl_seconds
// (1..max_ttl, 24 hours at most) or the default. Tokens are not stored.
//
//	201 {"token", "expires_at"}
//	400 a body that is not {"ttl_seconds": N}
//	409 the tenant has no recipient token keys (DetailNoKeys)
//	422 ttl_seconds out of range (param ttl_seconds), or a recipient id
//	    that is not 1..200 printable characters (param recipient)
func (a *API) Mint(w http.ResponseWriter, r *http.Request) {
	tenant, rcpt := auth.Tenant(r.Context()), r.PathValue("recipient")
	var body mintBody
	if !decodeBody(w, r, &body, true) {
		return
	}
	if !a.Tokens.HasKeys(tenant) {
		problem.New(w, http.StatusConflict, DetailNoKeys)
		return
	}
	maxTTL := a.Tokens.MaxTTL()
	if body.TTLSeconds < 0 || body.TTLSeconds > int64(maxTTL/time.Second) {
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "ttl_seconds",
			Detail: fmt.Sprintf("ttl_seconds must be 1..%d, or 0 or absent for the default (%d)", int64(maxTTL/time.Second), int64(a.Tokens.TTL()/time.Second))})
		return
	}
	if len(rcpt) > catalog.MaxRecipientLen || !catalog.Printable(rcpt) {
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "recipient",
			Detail: fmt.Sprintf("recipient must be 1..%d printable characters", catalog.MaxRecipientLen)})
		return
	}
	tok, err := a.Tokens.Mint(tenant, rcpt, time.Duration(body.TTLSeconds)*time.Second)
	switch {
	case errors.Is(err, auth.ErrTTL):
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "ttl_seconds", Detail: err.Error()})
		return
	case err != nil:
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Detail: err.Error()})
		return
	}
	writeJSON(w, http.StatusCreated, Minted{Token: tok.Token, ExpiresAt: tok.ExpiresAt})
}
