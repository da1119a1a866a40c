package store

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/locale"
)

// ErrNoInboxText: a create lists ChannelInbox but carries no InboxText.
// Nothing is written: an inbox send without its item would be a lie.
var ErrNoInboxText = errors.New("store: the inbox channel is listed but no inbox text was given")

// InboxWanted reports whether p writes an inbox item: its Channels list
// ChannelInbox.
func (p NotificationCreateParams) InboxWanted() bool {
	for _, ch := range p.Channels {
		if ch == heraldtype.ChannelInbox {
			return true
		}
	}
	return false
}

// InboxNeedsLanguage reports whether choosing p's inbox text depends on
// the recipient's profile language: there is more than one to choose from.
// A driver reads the language only then.
func (p NotificationCreateParams) InboxNeedsLanguage() bool { return len(p.Inbox) > 1 }

// InboxText returns the text of p.Inbox a recipient whose profile language
// is lang gets (locale.Pick), or ErrNoInboxText.
func (p NotificationCreateParams) InboxText(lang string) (InboxText, error) {
	if len(p.Inbox) == 0 {
		return InboxText{}, ErrNoInboxText
	}
	if len(p.Inbox) == 1 {
		return p.Inbox[0], nil
	}
	keys := make([]string, len(p.Inbox))
	for i, t := range p.Inbox {
		keys[i] = t.Locale
	}
	return p.Inbox[locale.Pick(keys, lang)], nil
}

// Add counts one recount batch into r: checked counter rows, of which
// drifted were wrong (and are set right now); it keeps up to
// MaxInboxDrifts of them and returns the inboxes the batch changed, for
// the driver's signal.
func (r *InboxRecountResult) Add(checked int, drifted []InboxDrift) []InboxKey {
	r.Checked += checked
	r.Repaired += len(drifted)
	keys := make([]InboxKey, len(drifted))
	for i, d := range drifted {
		keys[i] = InboxKey{Tenant: d.Tenant, Recipient: d.Recipient}
		if len(r.Drifted) < MaxInboxDrifts {
			r.Drifted = append(r.Drifted, d)
		}
	}
	return keys
}

// DriftedFrom reports whether a counter that says was is wrong about the
// items, which say b: its unread count differs, or an item is newer than
// its seq. A seq ahead of the items is no drift: a purge or an erasure
// leaves it there, so that no later item takes a seq again.
func (b InboxBadge) DriftedFrom(was InboxBadge) bool {
	return b.Unread != was.Unread || b.Seq > was.Seq
}

// BatchOrDefault returns p.Batch or its default, 1,000.
func (p InboxRecountParams) BatchOrDefault() int {
	if p.Batch <= 0 {
		return 1000
	}
	return p.Batch
}

// Window returns what a driver's feed statement selects for p: items with
// seq below before (every one when p.Before is 0), at most fetch of them,
// one more than the page holds so that Cut can tell whether a next page
// exists.
func (p InboxFeedParams) Window() (before int64, fetch int) {
	before = p.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	return before, max(p.Limit, 1) + 1
}

// Cut ends a page whose items were read with p.Window: past the page's
// limit it drops the extra item and sets Next to the last kept seq.
func (pg *InboxPage) Cut(p InboxFeedParams) {
	if limit := max(p.Limit, 1); len(pg.Items) > limit {
		pg.Items = pg.Items[:limit]
		pg.Next = pg.Items[limit-1].Seq
	}
}

// InboxPurgeItem is one item a purge picked: its key and its age.
type InboxPurgeItem struct {
	Tenant, Recipient string
	Seq               int64
	CreatedAt         time.Time
}

// Tenants returns the tenants a purge of p goes through, of all, the
// tenants that have an inbox: p.Tenant alone, or all but p.Except.
func (p InboxPurgeParams) Tenants(all []string) []string {
	if p.Tenant != "" {
		return []string{p.Tenant}
	}
	return slices.DeleteFunc(all, func(t string) bool { return slices.Contains(p.Except, t) })
}

// Oldest keeps the p.Limit oldest of the items the drivers picked tenant
// by tenant (each tenant's oldest p.Limit, walking its (tenant,
// created_at) index), so a purge deletes the oldest first over all of them.
func (p InboxPurgeParams) Oldest(picked []InboxPurgeItem) []InboxPurgeItem {
	slices.SortFunc(picked, func(a, b InboxPurgeItem) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Tenant, b.Tenant),
			cmp.Compare(a.Recipient, b.Recipient), cmp.Compare(a.Seq, b.Seq))
	})
	return picked[:min(len(picked), max(p.Limit, 1))]
}
