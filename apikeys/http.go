package apikeys

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/problem"
)

// Guard returns the middleware of every API-key route: it verifies the
// bearer key, requires the scope scopeOf names for the request's route,
// and passes the request on with the key's tenant (auth.Tenant) and
// principal (From) in its context. It answers 401 for no key or one that
// is unknown, revoked or expired; 403 for a key without the scope; 429
// for an id throttled after wrong secrets (ThrottledError); 503 when the
// store cannot say or no KDF slot came free (ErrBusy); 500 for a route scopeOf does not know (a
// route added without its scope fails closed). elsewhere, when not nil,
// names an unknown key that is another credential of the caller's (an
// operator key): its detail is the 401's.
func (v *Verifier) Guard(scopeOf func(*http.Request) (Scope, bool), logger *slog.Logger, elsewhere func(cred string) (detail string, ok bool)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scope, ok := scopeOf(r)
			if !ok {
				logger.LogAttrs(r.Context(), slog.LevelError, "apikeys: route has no scope; refused", slog.String("route", r.Pattern))
				problem.New(w, http.StatusInternalServerError, "this route has no scope")
				return
			}
			header, ok := auth.Authorization(w, r)
			if !ok {
				return
			}
			key, ok := auth.Bearer(header)
			switch {
			case !ok && header == "":
				refuse(w, "", "an API key is required: Authorization: Bearer <key>")
				return
			case !ok:
				refuse(w, "", `the Authorization header must be "Bearer <key>"`)
				return
			}
			p, err := v.Verify(r.Context(), key)
			var throttled *ThrottledError
			switch {
			case errors.Is(err, ErrUnknown) && looksLikeRecipientToken(key):
				refuse(w, "invalid_token", "a recipient token is not accepted here: it serves /v1/me/… only; use an API key")
				return
			case errors.Is(err, ErrUnknown):
				detail := "this API key is not known"
				if elsewhere != nil {
					if d, ok := elsewhere(key); ok {
						detail = d
					}
				}
				refuse(w, "invalid_token", detail)
				return
			case errors.Is(err, ErrRevoked):
				refuse(w, "invalid_token", "this API key was revoked")
				return
			case errors.Is(err, ErrExpired):
				refuse(w, "invalid_token", "this API key has expired")
				return
			case errors.As(err, &throttled):
				retry := max(1, int(math.Ceil(throttled.Until.Sub(v.clock.Now()).Seconds())))
				w.Header().Set("Retry-After", strconv.Itoa(retry))
				problem.New(w, http.StatusTooManyRequests, fmt.Sprintf(
					"this API key's id had %d wrong secrets within %s: it is checked again in %d s (a key in use before then still works)",
					MaxFailures, FailureWindow, retry))
				return
			case errors.Is(err, ErrBusy):
				// Load, not a fault: no log line a request, which a flood
				// of checks would turn into a flood of lines.
				problem.Unavailable(w, "too many API keys are being checked at once: retry")
				return
			case err != nil:
				logger.LogAttrs(r.Context(), slog.LevelError, "apikeys: verifying a key failed", slog.Any("error", err))
				problem.Unavailable(w, "the store is unavailable")
				return
			}
			if !p.Has(scope) {
				problem.New(w, http.StatusForbidden, "this API key lacks the "+string(scope)+" scope this route needs")
				return
			}
			ctx := auth.WithTenant(WithPrincipal(r.Context(), p), p.Tenant)
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// refuse answers 401 with the API realm's challenge.
func refuse(w http.ResponseWriter, code, detail string) { auth.Refuse(w, "herald", code, detail) }

// looksLikeRecipientToken reports whether a credential that is no API key
// has a recipient token's shape (a JWT: three base64url parts, the first a
// JSON header), so that the 401 names the mix-up.
func looksLikeRecipientToken(cred string) bool {
	return strings.HasPrefix(cred, "eyJ") && strings.Count(cred, ".") == 2
}
