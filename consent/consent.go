// Package consent serves a recipient's consent history (issue 11 item 6):
//
//	GET /v1/recipients/{recipient}/consent-history?limit=&cursor=   (API key)
//	  → 200 {"changes": [{"channel", "old", "new", "changed_at", "by": {"tenant", "key"?}}],
//	         "next_cursor"}
//
// newest first, limit 1..200 (default 50); next_cursor is null on the last
// page. old and new are true, false or null (the profile held no consent
// for the channel: no profile yet, or the channel left out), and null
// reads as no consent. A recipient with no history (or unknown) has an
// empty list. A bad limit or cursor, or an unknown or repeated query
// parameter (the history has no filter: since= is refused, not ignored),
// is 400, a store failure 503, all application/problem+json.
//
// # What consent is
//
// The profile's consent (PUT /v1/recipients/{recipient}/profile, {"consent":
// {channel: bool}}) is marketing consent, per channel: a marketing send on a
// channel goes only when the profile, read at send time, says true for
// that channel; anything else is SUPPRESSED(CONSENT_DENIED). It is
// separate from transactional sends, which need no consent: seed 000
// re-checks the SMS consent of advertising messages only, and seed 003's
// payment notices and fraud alerts, like DESIGN §8's rule ("marketing
// without recorded consent ends SUPPRESSED(CONSENT_DENIED)"), ask none;
// alert and internal sends ignore consent too. What keeps a transactional
// send off a channel that needs an address (sms, push, e-mail…) is the
// address: none in the profile is SUPPRESSED(DESTINATION_UNAVAILABLE).
//
// # The history
//
// Every change of a channel's consent is recorded by the profile PUT
// itself, in its transaction (store.ConsentHistory): who (the API key's
// tenant, and the key's name once keys have names), when (the store's
// clock), which channel, old → new. A PUT that changes no consent records
// nothing. Erasing the recipient (DELETE /v1/recipients/{recipient},
// package erasure) deletes the history with the profile.
package consent

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/heraldhq/herald/apikeys"
	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/cursor"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
)

// Page sizes of the history.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// Actor is who an API-key request changes consent as: its key's tenant
// and name (package apikeys; "config" for a config key without one).
func Actor(r *http.Request) store.ConsentActor {
	by := store.ConsentActor{Tenant: auth.Tenant(r.Context())}
	if p, ok := apikeys.From(r.Context()); ok {
		by.Key = p.Name
	}
	return by
}

// History serves GET /v1/recipients/{recipient}/consent-history behind the
// API-key check (auth.Tenant is the caller's tenant).
type History struct {
	Store  store.ConsentHistory
	Logger *slog.Logger
}

// Change is one entry of the answer.
type Change struct {
	Channel   string             `json:"channel"`
	Old       *bool              `json:"old"`
	New       *bool              `json:"new"`
	ChangedAt time.Time          `json:"changed_at"`
	By        store.ConsentActor `json:"by"`
}

// Page is the answer.
type Page struct {
	Changes    []Change `json:"changes"`
	NextCursor *string  `json:"next_cursor"`
}

func (h *History) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant, recipient := auth.Tenant(r.Context()), r.PathValue("recipient")
	q, perr := cursor.Query(r, "limit", "cursor")
	if perr != nil {
		problem.Write(w, *perr)
		return
	}
	limit := DefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest,
				Detail: "limit must be a whole number from 1 to " + strconv.Itoa(MaxLimit), Param: "limit"})
			return
		}
		limit = n
	}
	var before int64
	if s := q.Get("cursor"); s != "" {
		id, err := decodeCursor(tenant, recipient, s)
		if err != nil {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest,
				Detail: "cursor is not a next_cursor of this recipient's consent history", Param: "cursor"})
			return
		}
		before = id
	}
	got, err := h.Store.ConsentHistoryList(r.Context(), store.ConsentHistoryListParams{
		Tenant: tenant, Recipient: recipient, Before: before, Limit: limit + 1}) // cursor.Page
	if err != nil {
		h.Logger.LogAttrs(r.Context(), slog.LevelError, "consent: store unavailable", slog.String("tenant", tenant), slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	page := Page{Changes: []Change{}}
	got, more := cursor.Page(got, limit)
	if more {
		next := encodeCursor(tenant, recipient, got[len(got)-1].ID)
		page.NextCursor = &next
	}
	for _, c := range got {
		page.Changes = append(page.Changes, Change{Channel: string(c.Channel), Old: c.Old, New: c.New, ChangedAt: c.At, By: c.By})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page)
}

// A cursor is opaque to clients: base64url (no padding) of
//
//	version (1 byte, 1) | id (8 bytes, big-endian) | check (8 bytes)
//
// where check is the first 8 bytes of SHA-256 over a domain string, the
// tenant, the recipient and the bytes before it: a changed byte, or a
// cursor of another recipient or tenant, fails (400). The check is not
// keyed: it catches mix-ups, not a forger, who gains nothing (a cursor
// only says where a walk over the caller's own history resumes).
const (
	cursorVersion = 1
	cursorDomain  = "herald/v1/consent-history cursor"
	cursorLen     = 1 + 8 + 8
)

var errCursor = errors.New("consent: not a cursor of this history")

func cursorCheck(tenant, recipient string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(cursorDomain))
	for _, s := range []string{tenant, recipient} {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(s))))
		h.Write([]byte(s))
	}
	h.Write(body)
	return h.Sum(nil)[:8]
}

func encodeCursor(tenant, recipient string, id int64) string {
	b := binary.BigEndian.AppendUint64([]byte{cursorVersion}, uint64(id))
	return base64.RawURLEncoding.EncodeToString(append(b, cursorCheck(tenant, recipient, b)...))
}

func decodeCursor(tenant, recipient, s string) (int64, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	// The decoder skips \r and \n: only the one spelling of a cursor is it.
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion || base64.RawURLEncoding.EncodeToString(b) != s {
		return 0, errCursor
	}
	if !bytes.Equal(b[9:], cursorCheck(tenant, recipient, b[:9])) {
		return 0, errCursor
	}
	id := int64(binary.BigEndian.Uint64(b[1:9]))
	if id <= 0 {
		return 0, errCursor
	}
	return id, nil
}
