package inbox

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/cursor"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
)

// Item is one inbox item as the API shows it. ID is the item's message id
// (the notification's id + ".inbox"), the id read and archive take.
type Item struct {
	ID             string     `json:"id"`
	NotificationID string     `json:"notification_id"`
	Kind           string     `json:"kind"`
	Title          string     `json:"title"`
	Body           string     `json:"body"`
	CreatedAt      time.Time  `json:"created_at"`
	ReadAt         *time.Time `json:"read_at"`
	ArchivedAt     *time.Time `json:"archived_at"`
}

// ItemOf returns the API's view of a stored item.
func ItemOf(it store.InboxItem) Item {
	return Item{ID: it.MessageID, NotificationID: it.NotificationID, Kind: it.Kind, Title: it.Title, Body: it.Body,
		CreatedAt: it.CreatedAt.UTC(), ReadAt: utcPtr(it.ReadAt), ArchivedAt: utcPtr(it.ArchivedAt)}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Page is the body of GET /v1/me/feed.
type Page struct {
	Items []Item `json:"items"`
	// NextCursor reads the next (older) page; nil on the last.
	NextCursor  *string `json:"next_cursor"`
	UnreadCount int64   `json:"unread_count"`
	// ReadCursor marks read every item up to this page's newest (POST
	// /v1/me/read {"all": true, "up_to_cursor"}); nil for an empty page.
	ReadCursor *string `json:"read_cursor"`
}

// Badge is the body of GET /v1/me/badge and POST /v1/me/read.
type Badge struct {
	UnreadCount int64 `json:"unread_count"`
}

// Feed limits.
const (
	DefaultLimit = 20
	MaxLimit     = 100
)

// Feed serves GET /v1/me/feed: a page of the recipient's items, newest
// first, with the unread count read with it. Query:
//
//	limit     1..100, default 20
//	cursor    the next_cursor of the page before; absent for the newest
//	archived  true lists archived items too (default false); a cursor
//	          carries it, so a later page needs none, and one that
//	          disagrees with its cursor is refused
//
// Pages follow the items' seq, which intake assigns in commit order, so
// paging never skips or repeats an item while new ones arrive (those
// appear on a new first page). Listing never marks anything read; a
// page's read_cursor marks read up to its newest item (Read).
// A limit, archived or cursor that is not valid is 400 (param names it),
// and so is a parameter the feed does not know or one given twice (a
// misspelt limit would otherwise be the default, silently).
func (a *API) Feed(w http.ResponseWriter, r *http.Request) {
	rc, ok := auth.RequiredRecipient(w, r)
	if !ok {
		return
	}
	q, prob := cursor.Query(r, "limit", "cursor", "archived")
	if prob != nil {
		problem.Write(w, *prob)
		return
	}
	limit := DefaultLimit
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > MaxLimit {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: "limit",
				Detail: fmt.Sprintf("limit must be an integer 1..%d", MaxLimit)})
			return
		}
		limit = n
	}
	var cur feedCursor
	archivedSet := q.Has("archived")
	if archivedSet {
		b, err := strconv.ParseBool(q.Get("archived"))
		if err != nil {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: "archived", Detail: "archived must be true or false"})
			return
		}
		cur.Archived = b
	}
	if q.Has("cursor") {
		c, err := decodeCursor(a.Tokens, rc.Tenant, rc.ID, q.Get("cursor"))
		if err != nil || c.Read {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: "cursor",
				Detail: "the cursor is not valid: pass next_cursor exactly as a feed page of this recipient gave it"})
			return
		}
		if archivedSet && c.Archived != cur.Archived {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: "archived",
				Detail: "archived disagrees with the cursor, which carries it: leave it out"})
			return
		}
		cur = c
	}
	page, err := a.Store.InboxFeed(r.Context(), store.InboxFeedParams{
		Tenant: rc.Tenant, Recipient: rc.ID, Before: cur.Seq, Limit: limit, Archived: cur.Archived,
	})
	if err != nil {
		a.storeFailed(w, r, "read a feed", err)
		return
	}
	out := Page{Items: make([]Item, 0, len(page.Items)), UnreadCount: page.Badge.Unread}
	for _, it := range page.Items {
		out.Items = append(out.Items, ItemOf(it))
	}
	if out.NextCursor, ok = a.cursor(rc, feedCursor{Seq: page.Next, Archived: cur.Archived}); ok && len(page.Items) > 0 {
		out.ReadCursor, ok = a.cursor(rc, feedCursor{Seq: page.Items[0].Seq, Read: true})
	}
	if !ok {
		// The token verified under the tenant's keys a moment ago.
		problem.New(w, http.StatusInternalServerError, "a cursor could not be signed")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// cursor returns c encoded for rc, or nil when c.Seq is 0 (nothing to
// point at); ok is false when it could not be signed.
func (a *API) cursor(rc auth.Recipient, c feedCursor) (*string, bool) {
	if c.Seq <= 0 {
		return nil, true
	}
	s, ok := encodeCursor(a.Tokens, rc.Tenant, rc.ID, c)
	return &s, ok
}

// Badge serves GET /v1/me/badge: the recipient's unread count, from the
// counter intake and every read, archive and purge keep exact.
func (a *API) Badge(w http.ResponseWriter, r *http.Request) {
	rc, ok := auth.RequiredRecipient(w, r)
	if !ok {
		return
	}
	b, err := a.Store.InboxBadge(r.Context(), rc.Tenant, rc.ID)
	if err != nil {
		a.storeFailed(w, r, "read a badge", err)
		return
	}
	writeJSON(w, http.StatusOK, Badge{UnreadCount: b.Unread})
}

// readBody names what to mark read: ids, or all (up to a read cursor).
type readBody struct {
	IDs        []string `json:"ids"`
	All        bool     `json:"all"`
	UpToCursor string   `json:"up_to_cursor"`
}

// MaxReadIDs bounds the ids of one read.
const MaxReadIDs = 1000

// maxItemID bounds an item id (a notification id and ".inbox").
const maxItemID = 256

// Read serves POST /v1/me/read: {"ids": [item ids]} marks those of the
// recipient's items read (ids of no item of theirs are ignored, read ones
// keep their read_at), {"all": true} every unread item, and {"all": true,
// "up_to_cursor": a page's read_cursor} every unread item up to that
// page's newest, leaving unread what arrived after it; the answer is the
// unread count after it. Both ids and all, neither, up_to_cursor without
// all, more than 1,000 ids or an empty id is 422; a read_cursor that is
// not valid (as for the feed's cursor) is 400.
func (a *API) Read(w http.ResponseWriter, r *http.Request) {
	rc, ok := auth.RequiredRecipient(w, r)
	if !ok {
		return
	}
	var body readBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	switch {
	case body.All == (body.IDs != nil):
		problem.New(w, http.StatusUnprocessableEntity, `give either "ids": [item ids] or "all": true`)
		return
	case len(body.IDs) > MaxReadIDs || !body.All && len(body.IDs) == 0:
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "ids",
			Detail: fmt.Sprintf("ids must list 1..%d item ids", MaxReadIDs)})
		return
	case body.UpToCursor != "" && !body.All:
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "up_to_cursor",
			Detail: `up_to_cursor goes with "all": true`})
		return
	}
	p := store.InboxMarkReadParams{Tenant: rc.Tenant, Recipient: rc.ID, IDs: body.IDs, All: body.All}
	if body.UpToCursor != "" {
		c, err := decodeCursor(a.Tokens, rc.Tenant, rc.ID, body.UpToCursor)
		if err != nil || !c.Read {
			problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Param: "up_to_cursor",
				Detail: "up_to_cursor is not valid: pass a feed page's read_cursor exactly as it was given"})
			return
		}
		p.UpToSeq = c.Seq
	}
	for _, id := range body.IDs {
		if id == "" || len(id) > maxItemID {
			problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "ids",
				Detail: fmt.Sprintf("an item id is 1..%d characters", maxItemID)})
			return
		}
	}
	b, err := a.Store.InboxMarkRead(r.Context(), p)
	if err != nil {
		a.storeFailed(w, r, "mark read", err)
		return
	}
	writeJSON(w, http.StatusOK, Badge{UnreadCount: b.Unread})
}

// Archive serves POST /v1/me/items/{id}/archive: 204 once the item is
// archived (again: still 204, its archived_at kept), 404 when the
// recipient has no such item. An archived item leaves the feed (but for
// archived=true) and the unread count.
func (a *API) Archive(w http.ResponseWriter, r *http.Request) {
	rc, ok := auth.RequiredRecipient(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	found := false
	if len(id) <= maxItemID {
		var err error
		found, err = a.Store.InboxArchive(r.Context(), rc.Tenant, rc.ID, id)
		if err != nil {
			a.storeFailed(w, r, "archive", err)
			return
		}
	}
	if !found {
		problem.New(w, http.StatusNotFound, "no such item")
		return
	}
	noContent(w)
}
