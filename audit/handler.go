package audit

import (
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/cursor"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
)

// Handler serves GET /v1/admin/audit?limit=&cursor= (admin scope): the
// caller's tenant's entries, newest first,
//
//	{"entries": [{"id", "at", "actor_key", "actor_name", "action", "target", "remote", "detail"}], "next_cursor"}
//
// next_cursor is null on the last page; limit is 1..500 (default 100); a
// cursor that is not one herald gave, or an unknown or repeated query
// parameter, is 400 (as on every other listing: a filter this listing does
// not have, since= say, is refused, not ignored).
type Handler struct {
	Store  store.Audit
	Logger *slog.Logger
}

// EntryBody is one entry of the answer.
type EntryBody struct {
	ID        int64           `json:"id"`
	At        time.Time       `json:"at"`
	ActorKey  string          `json:"actor_key"`
	ActorName string          `json:"actor_name"`
	Action    string          `json:"action"`
	Target    string          `json:"target"`
	Remote    string          `json:"remote"`
	Detail    json.RawMessage `json:"detail"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := store.AuditListParams{Tenant: auth.Tenant(r.Context()), Limit: 100}
	if p.Tenant == "" {
		problem.New(w, http.StatusUnauthorized, "a valid API key is required: Authorization: Bearer <key>")
		return
	}
	q, perr := cursor.Query(r, "limit", "cursor")
	if perr != nil {
		problem.Write(w, *perr)
		return
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Detail: "limit must be 1..500", Param: "limit"})
			return
		}
		p.Limit = n
	}
	if c := q.Get("cursor"); c != "" {
		before, ok := decodeCursor(c)
		if !ok {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Detail: "the cursor is not valid", Param: "cursor"})
			return
		}
		p.Before = before
	}
	limit := p.Limit
	p.Limit++ // cursor.Page
	entries, err := h.Store.AuditList(r.Context(), p)
	if err != nil {
		h.Logger.LogAttrs(r.Context(), slog.LevelError, "audit: listing failed", slog.Any("error", err))
		problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
		return
	}
	out := struct {
		Entries    []EntryBody `json:"entries"`
		NextCursor *string     `json:"next_cursor"`
	}{}
	entries, more := cursor.Page(entries, limit)
	out.Entries = make([]EntryBody, 0, len(entries))
	for _, e := range entries {
		out.Entries = append(out.Entries, EntryBody{ID: e.ID, At: e.At, ActorKey: e.ActorKey, ActorName: e.ActorName,
			Action: e.Action, Target: e.Target, Remote: e.Remote, Detail: json.RawMessage(e.Detail)})
	}
	if more {
		c := encodeCursor(entries[len(entries)-1].ID)
		out.NextCursor = &c
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func encodeCursor(before int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("audit:" + strconv.FormatInt(before, 10)))
}

func decodeCursor(c string) (int64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	s, ok := strings.CutPrefix(string(b), "audit:")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}
