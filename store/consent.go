package store

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// ConsentHistory keeps every change of a recipient's marketing consent
// (Profile.Consent, per channel): who made it, when, on which channel,
// and the consent before and after (issue 11 item 6). A change is written
// in the same transaction as the profile, so the history never says what
// the profile does not, and the profile never changes unrecorded.
// Erasing the recipient (Erasure) deletes its history with its profile.
type ConsentHistory interface {
	// ProfilePutBy is ProfilePut made by: it creates or replaces the
	// profile and, in the same transaction, records one ConsentChange per
	// channel whose consent it changes (ConsentDiff of the stored profile
	// and p), at the store's now. A put that changes no consent records
	// nothing. Concurrent puts of one recipient are ordered: each compares
	// with the profile the one before it wrote.
	ProfilePutBy(ctx context.Context, p Profile, by ConsentActor) error
	// ProfileChangeBy changes a recipient's profile in place: change gets
	// the stored profile (one with no addresses or consent when there is
	// none) while its row is held, and what it leaves is written, with its
	// consent changes recorded as ProfilePutBy records them. Concurrent
	// changes of one recipient are ordered, each seeing the one before it
	// (PATCH /v1/recipients/{r}/profile: a consent change keeps the
	// addresses). change may run more than once; it returns a non-nil
	// error to write nothing, and that error is returned.
	ProfileChangeBy(ctx context.Context, tenant, recipient string, by ConsentActor, change func(p *Profile) error) error
	// ConsentHistoryList returns up to p.Limit of a recipient's consent
	// changes, newest first (by ID, descending), those older than p.Before
	// when it is set: the keyset of the next page.
	ConsentHistoryList(ctx context.Context, p ConsentHistoryListParams) ([]ConsentChange, error)
}

// ConsentActor is who changed a consent: the tenant of the API key that
// made the change and, when the key has one, its name ("" when not).
type ConsentActor struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key,omitempty"`
}

// ConsentChange is one change of one channel's consent.
type ConsentChange struct {
	// ID orders a recipient's changes: a later change has a larger ID.
	ID        int64
	Tenant    string
	Recipient string
	Channel   heraldtype.Channel
	// Old and New are the channel's consent before and after the change;
	// nil when the profile held none for the channel (no profile yet, or
	// the channel absent from its consent), which the sender reads as no
	// consent.
	Old, New *bool
	At       time.Time
	By       ConsentActor
}

// ConsentHistoryListParams selects a page of a recipient's consent history.
type ConsentHistoryListParams struct {
	Tenant    string
	Recipient string
	// Before, when not 0, keeps changes whose ID is smaller: the ID of the
	// previous page's last change.
	Before int64
	// Limit caps the page. Defaults to 50.
	Limit int
}

// LimitOrDefault returns p.Limit or its default.
func (p ConsentHistoryListParams) LimitOrDefault() int {
	if p.Limit <= 0 {
		return 50
	}
	return p.Limit
}

// ConsentDiff is what replacing a profile whose consent is old by one whose
// consent is new changes: one ConsentChange (Channel, Old, New set) per
// channel whose value differs, a channel present on one side only
// included, in channel order. Both drivers record exactly these.
func ConsentDiff(old, new map[heraldtype.Channel]bool) []ConsentChange {
	var out []ConsentChange
	seen := map[heraldtype.Channel]bool{}
	for _, m := range []map[heraldtype.Channel]bool{old, new} {
		for ch := range m {
			if seen[ch] {
				continue
			}
			seen[ch] = true
			o, hadOld := old[ch]
			n, hasNew := new[ch]
			if hadOld == hasNew && o == n {
				continue
			}
			c := ConsentChange{Channel: ch}
			if hadOld {
				c.Old = &o
			}
			if hasNew {
				c.New = &n
			}
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b ConsentChange) int { return cmp.Compare(a.Channel, b.Channel) })
	return out
}
