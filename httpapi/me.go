package httpapi

import (
	"net/http"

	"github.com/heraldhq/herald/auth"
)

// routeMe adds the recipient inbox's routes (package inbox has the
// handlers and their answers):
//
//	POST /v1/recipients/{recipient}/tokens   API key: mint a recipient token
//	GET  /v1/me/feed                         recipient token: a page of the feed
//	GET  /v1/me/badge                        recipient token: the unread count
//	POST /v1/me/read                         recipient token: mark read by ids or all
//	POST /v1/me/items/{id}/archive           recipient token: archive an item
//	POST /v1/me/receipts                     recipient token: the app showed a push
//
// /v1/me/… takes a recipient token only (an API key there is 401, named in
// the answer); every other route takes an API key only, so a recipient
// token there is 401 too (requireTenant knows no token). cfg.Inbox nil
// leaves them all out.
func routeMe(mux *router, cfg Config, authed func(http.Handler) http.Handler) {
	in := cfg.Inbox
	if in == nil {
		return
	}
	mux.Handle("POST /v1/recipients/{recipient}/tokens", authed(http.HandlerFunc(in.Mint)))
	me := meAuth(cfg)
	mux.Handle("GET /v1/me/feed", me(http.HandlerFunc(in.Feed)))
	mux.Handle("GET /v1/me/badge", me(http.HandlerFunc(in.Badge)))
	mux.Handle("POST /v1/me/read", me(http.HandlerFunc(in.Read)))
	mux.Handle("POST /v1/me/items/{id}/archive", me(http.HandlerFunc(in.Archive)))
	mux.Handle("POST /v1/me/receipts", me(http.HandlerFunc(in.Receipt)))
}

// meAuth is the authentication of every /v1/me/… route: a recipient token
// that cfg.Inbox's tokens verify.
func meAuth(cfg Config) func(http.Handler) http.Handler {
	var tokens *auth.RecipientTokens
	if cfg.Inbox != nil {
		tokens = cfg.Inbox.Tokens
	}
	return auth.RequireRecipient(tokens, cfg.Keys)
}
