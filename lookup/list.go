package lookup

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/cursor"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
)

// Limits of GET /v1/notifications, every listing's (package cursor).
const (
	DefaultListLimit = cursor.DefaultLimit
	MaxListLimit     = cursor.MaxLimit
)

// maxKindLen bounds the kind filter.
const maxKindLen = 200

// ListStates are the values of the state filter: every state an entry can
// show (store.NotificationView.EntryState).
var ListStates = []string{
	heraldtype.ViewScheduled, heraldtype.ViewPending,
	string(heraldtype.DeliverySending), string(heraldtype.DeliveryRetryWait), string(heraldtype.DeliveryParked),
	string(heraldtype.DeliveryProviderAccepted), string(heraldtype.DeliveryDelivered), string(heraldtype.DeliveryPermanentFailure),
	string(heraldtype.DeliveryRetryExhausted), string(heraldtype.DeliveryUnknown), string(heraldtype.DeliverySuppressed),
	string(heraldtype.OutboxExpired), string(heraldtype.OutboxFailed), string(heraldtype.DeliveryStored),
	string(heraldtype.OutboxWaiting), string(heraldtype.OutboxSkipped), // fallback steps
}

// ListHandler serves GET /v1/notifications: the caller's notifications,
// newest first, each shaped as GET /v1/notifications/{id} answers it but
// without attempts_log.
//
// Query parameters, each optional and given at most once (any other is 400):
//
//	recipient  only this recipient's notifications
//	kind       only this kind's
//	state      only notifications with at least one planned send in this
//	           state, as the entries show it (SCHEDULED, PENDING, SENDING,
//	           RETRY_WAIT, PARKED, PROVIDER_ACCEPTED, DELIVERED,
//	           PERMANENT_FAILURE, RETRY_EXHAUSTED, UNKNOWN, SUPPRESSED,
//	           EXPIRED, FAILED, STORED, and a fallback step's WAITING,
//	           SKIPPED)
//	since      only notifications accepted at or after this RFC 3339 time
//	limit      page size, 1..100; defaults to 50
//	cursor     next_cursor of the previous page, with the same filters
//
// The answer is {"notifications": […], "next_cursor"}: next_cursor is null
// on the last page. Pages follow the order (created_at, id) descending, in
// which rows accepted in the same instant keep one order, so a walk never
// skips or repeats a notification that existed when it started.
// Notifications accepted after the walk started sort before its first page
// and are not part of it (one accepted in the very millisecond of a page's
// last row may be).
type ListHandler struct {
	Store  store.NotificationListing
	Logger *slog.Logger
}

// Page is the response body of GET /v1/notifications.
type Page struct {
	Notifications []Notification `json:"notifications"`
	NextCursor    *string        `json:"next_cursor"`
}

var listParams = []string{"recipient", "kind", "state", "since", "limit", "cursor"}

func (h *ListHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, f, perr := parseList(r, auth.Tenant(r.Context()))
	if perr != nil {
		problem.Write(w, *perr)
		return
	}
	want := p.Limit
	p.Limit++ // cursor.Page
	views, err := h.Store.NotificationList(r.Context(), p)
	if err != nil {
		storeFailed(w, r, h.Logger, "lookup: list", err)
		return
	}
	views, more := cursor.Page(views, want)
	page := Page{Notifications: make([]Notification, 0, len(views))}
	for _, v := range views {
		page.Notifications = append(page.Notifications, View(v))
	}
	if more {
		c := encodeCursor(f, views[len(views)-1].Position())
		page.NextCursor = &c
	}
	writeJSON(w, page)
}

// parseList reads the query into store params, refusing what it cannot use.
func parseList(r *http.Request, tenant string) (store.NotificationListParams, filters, *problem.Problem) {
	bad := func(param, format string, args ...any) (store.NotificationListParams, filters, *problem.Problem) {
		return store.NotificationListParams{}, filters{}, &problem.Problem{
			Status: http.StatusBadRequest, Detail: fmt.Sprintf(format, args...), Param: param,
		}
	}
	q, perr := cursor.Query(r, listParams...)
	if perr != nil {
		return store.NotificationListParams{}, filters{}, perr
	}
	p := store.NotificationListParams{Tenant: tenant, Recipient: q.Get("recipient"), Kind: q.Get("kind"),
		State: q.Get("state"), Limit: DefaultListLimit}
	switch {
	case len(p.Recipient) > catalog.MaxRecipientLen || !catalog.Printable(p.Recipient):
		return bad("recipient", "recipient must be at most %d printable characters", catalog.MaxRecipientLen)
	case len(p.Kind) > maxKindLen || !catalog.Printable(p.Kind):
		return bad("kind", "kind must be at most %d printable characters", maxKindLen)
	case p.State != "" && !slices.Contains(ListStates, p.State):
		return bad("state", "unknown state %q; one of %s", p.State, strings.Join(ListStates, ", "))
	}
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return bad("since", "since must be an RFC 3339 time such as 2030-03-14T09:00:00Z")
		}
		t = t.UTC()
		p.Since = &t
	}
	if p.Limit, perr = cursor.Limit(q); perr != nil {
		return store.NotificationListParams{}, filters{}, perr
	}
	f := filters{tenant: tenant, recipient: p.Recipient, kind: p.Kind, state: p.State, since: p.Since}
	if s := q.Get("cursor"); s != "" {
		pos, err := decodeCursor(f, s)
		if err != nil {
			return bad("cursor", "the cursor is not valid for this listing: pass next_cursor unchanged, with the same recipient, kind, state and since")
		}
		p.Before = &pos
	}
	return p, f, nil
}
