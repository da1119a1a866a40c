package store

import "context"

// InboxHeads reads many inboxes' heads at once: what a live stream needs
// after a signal (package stream), one statement per batch of keys rather
// than one per inbox.
type InboxHeads interface {
	// InboxHeads returns, for every key, its badge and its newest item
	// (archived or not), each inbox's in one snapshot. The map holds every
	// key asked for; an inbox with no item yet has the zero InboxHead.
	// A caller keeps a batch to MaxInboxHeads keys.
	InboxHeads(ctx context.Context, keys []InboxKey) (map[InboxKey]InboxHead, error)
}

// MaxInboxHeads is the most keys one InboxHeads call should ask for: one
// statement reads them all.
const MaxInboxHeads = 500

// InboxHead is an inbox's badge and newest item.
type InboxHead struct {
	Badge InboxBadge
	// Newest is the item of greatest seq, archived or not; nil when there
	// is none (no item yet, or every one purged). Its Seq is Badge.Seq
	// unless that item is gone.
	Newest *InboxItem
	// Before is a seq below Newest's with no item between them: the seq of
	// the item before it, or any lower one (PostgreSQL numbers an inbox
	// 1, 2, 3…, so its Newest.Seq-1; SQLite's seqs are the file's, so the
	// inbox's item before Newest, 0 for none). A stream that has sent up to
	// a seq in [Before, Newest.Seq) has only Newest to send.
	Before int64
}
