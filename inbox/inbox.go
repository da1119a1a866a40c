// Package inbox serves the recipient inbox over HTTP (DESIGN §4 and §8):
// the tenant's backend mints a recipient token with its API key, and the
// app reads and settles that one recipient's inbox with the token.
//
//	POST /v1/recipients/{recipient}/tokens  (API key)  → 201 {"token", "expires_at"}     Mint
//	GET  /v1/me/feed?limit=&cursor=&archived=           → {"items", "next_cursor", "unread_count", "read_cursor"}  Feed
//	GET  /v1/me/badge                                   → {"unread_count"}               Badge
//	POST /v1/me/read {"ids": […]} | {"all": true[, "up_to_cursor"]}  → {"unread_count"}     Read
//	POST /v1/me/items/{id}/archive                      → 204                            Archive
//	POST /v1/me/receipts {"message_id"}                 → 204                            Receipt
//
// httpapi routes them (httpapi/me.go): Mint behind the API key, the rest
// behind auth.RequireRecipient, which puts the verified tenant and
// recipient in the request's context. A handler here takes who is asking
// from there only, never from the path, the query or the body. Every
// error is application/problem+json; no answer says whether another
// recipient has an item or a message (such an id is simply not found).
//
// Nothing here logs a recipient id, a text, a token or a cursor.
package inbox

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// Store is what the inbox reads and writes.
type Store interface {
	store.Inbox
	store.Receipts
}

// API is the inbox's handlers.
type API struct {
	Store Store
	// Tokens mints and verifies recipient tokens and signs feed cursors.
	// Nil, or a tenant without keys: Mint answers 409 and every /v1/me
	// request is refused (401).
	Tokens *auth.RecipientTokens
	// Metrics counts receipts; nil counts nothing.
	Metrics *metrics.Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// maxBody bounds every request body of the inbox: a read of 1,000 ids is
// well under it.
const maxBody = 64 << 10

func (a *API) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

// decodeBody decodes a JSON body of at most maxBody bytes with no unknown
// field into v, or answers 400 (413 when too large) and returns false.
// An empty body is allowed when emptyOK, leaving v as it is.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) bool {
	return validate.DecodeJSON(w, r, v, maxBody, emptyOK)
}

// storeFailed answers 503 for a store error and logs it (the error only:
// it names no recipient).
func (a *API) storeFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	a.logger().LogAttrs(r.Context(), slog.LevelError, "inbox: "+what+" failed", slog.Any("error", err))
	problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
}

// writeJSON answers status with v, never cached: it is one recipient's.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// noContent answers 204.
func noContent(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}
