package inbox

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

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
// appear on a new first page). Listing never marks anything read.
// A limit, archived or cursor that is not valid is 400 (param names it).
func (a *API) Feed(w http.ResponseWriter, r *http.Request) {
	rc, ok := recipient(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
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
		if err != nil {
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
		Tenant: rc.Tenant, Recipient: rc.ID, Before: cur.Before, Limit: limit, Archived: cur.Archived,
	})
	if err != nil {
		a.storeFailed(w, r, "read a feed", err)
		return
	}
	out := Page{Items: make([]Item, 0, len(page.Items)), UnreadCount: page.Badge.Unread}
	for _, it := range page.Items {
		out.Items = append(out.Items, ItemOf(it))
	}
	if page.Next > 0 {
		next, ok := encodeCursor(a.Tokens, rc.Tenant, rc.ID, feedCursor{Before: page.Next, Archived: cur.Archived})
		if !ok {
			// The token verified under the tenant's keys a moment ago.
			problem.New(w, http.StatusInternalServerError, "the cursor could not be signed")
			return
		}
		out.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// Badge serves GET /v1/me/badge: the recipient's unread count, from the
// counter intake and every read, archive and purge keep exact.
func (a *API) Badge(w http.ResponseWriter, r *http.Request) {
	rc, ok := recipient(w, r)
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

// readBody names what to mark read: ids, or all.
type readBody struct {
	IDs []string `json:"ids"`
	All bool     `json:"all"`
}

// MaxReadIDs bounds the ids of one read.
const MaxReadIDs = 1000

// maxItemID bounds an item id (a notification id and ".inbox").
const maxItemID = 256

// Read serves POST /v1/me/read: {"ids": [item ids]} marks those of the
// recipient's items read (ids of no item of theirs are ignored, read ones
// keep their read_at), {"all": true} every unread item; the answer is the
// unread count after it. Both, neither, more than 1,000 ids or an empty
// id is 422.
func (a *API) Read(w http.ResponseWriter, r *http.Request) {
	rc, ok := recipient(w, r)
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
	}
	for _, id := range body.IDs {
		if id == "" || len(id) > maxItemID {
			problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "ids",
				Detail: fmt.Sprintf("an item id is 1..%d characters", maxItemID)})
			return
		}
	}
	b, err := a.Store.InboxMarkRead(r.Context(), store.InboxMarkReadParams{Tenant: rc.Tenant, Recipient: rc.ID, IDs: body.IDs, All: body.All})
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
	rc, ok := recipient(w, r)
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
