package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// heads reads keys' heads; any error fails the test.
func heads(t *testing.T, b bundle, keys []store.InboxKey) map[store.InboxKey]store.InboxHead {
	t.Helper()
	got, err := b.s.InboxHeads(b.ctx, keys)
	if err != nil {
		t.Fatalf("InboxHeads (%d keys): %v", len(keys), err)
	}
	return got
}

// wantHead fails the test unless h is what the recipient's badge and
// newest item (read one at a time) say.
func wantHead(t *testing.T, b bundle, k store.InboxKey, h store.InboxHead) {
	t.Helper()
	want := store.InboxHead{Badge: badge(t, b, k.Tenant, k.Recipient)}
	items := allItems(t, b, k.Tenant, k.Recipient)
	if len(items) > 0 {
		want.Newest = &items[len(items)-1]
		// Before: below the newest, at or above the item before it (a
		// store may name any seq in between: there is no item there).
		prev := int64(0)
		if len(items) > 1 {
			prev = items[len(items)-2].Seq
		}
		if h.Before < prev || h.Before >= want.Newest.Seq {
			t.Fatalf("head of %v: before %d, want in [%d, %d)", k, h.Before, prev, want.Newest.Seq)
		}
		want.Before = h.Before
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("head of %v: %s, want %s", k, headString(h), headString(want))
	}
}

func headString(h store.InboxHead) string {
	if h.Newest == nil {
		return fmt.Sprintf("%+v, no item, before %d", h.Badge, h.Before)
	}
	return fmt.Sprintf("%+v, newest %+v, before %d", h.Badge, *h.Newest, h.Before)
}

func testInboxHeads(t *testing.T, h Harness) {
	t.Run("EachInboxItsOwnBadgeAndNewestItem", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// alice of t1: two items, the newest archived and the oldest read.
		a1 := inboxCreate(t, b, "t1", "alice", nil)
		b.clk.Advance(time.Millisecond)
		a2 := inboxCreate(t, b, "t1", "alice", nil)
		archiveItem(t, b, "t1", "alice", store.MessageID(a2.ID, heraldtype.ChannelInbox))
		markRead(t, b, "t1", "alice", store.MessageID(a1.ID, heraldtype.ChannelInbox))
		// alice of t2, another inbox of the same name; bob of t1 unread.
		b.clk.Advance(time.Millisecond)
		other := inboxCreate(t, b, "t2", "alice", nil)
		b.clk.Advance(time.Millisecond)
		inboxCreate(t, b, "t1", "bob", nil)
		b.clk.Advance(time.Millisecond)
		bob2 := inboxCreate(t, b, "t1", "bob", nil)

		alice, alice2, bob := store.InboxKey{Tenant: "t1", Recipient: "alice"}, store.InboxKey{Tenant: "t2", Recipient: "alice"}, store.InboxKey{Tenant: "t1", Recipient: "bob"}
		none, noneT := store.InboxKey{Tenant: "t1", Recipient: "nobody"}, store.InboxKey{Tenant: "t3", Recipient: "alice"}
		got := heads(t, b, []store.InboxKey{alice, alice2, bob, none, noneT, alice})
		if len(got) != 5 {
			t.Fatalf("%d heads for 5 inboxes (one asked twice): %v", len(got), got)
		}
		for _, k := range []store.InboxKey{alice, alice2, bob, none, noneT} {
			h, ok := got[k]
			if !ok {
				t.Fatalf("no head for %v", k)
			}
			wantHead(t, b, k, h)
		}
		// Spelled out: the archived newest item is alice's head, the
		// other tenant's alice has her own, no item is the zero head.
		sa, sa2, sb := itemSeqs(t, b, "t1", "alice"), itemSeqs(t, b, "t2", "alice"), itemSeqs(t, b, "t1", "bob")
		if n := got[alice].Newest; got[alice].Badge != (store.InboxBadge{Unread: 0, Seq: sa[1]}) || n == nil || n.Seq != sa[1] ||
			n.MessageID != store.MessageID(a2.ID, heraldtype.ChannelInbox) || n.ArchivedAt == nil || n.Title != "title "+a2.ID {
			t.Fatalf("alice: %s", headString(got[alice]))
		}
		if n := got[alice2].Newest; got[alice2].Badge != (store.InboxBadge{Unread: 1, Seq: sa2[0]}) || n == nil || n.NotificationID != other.ID {
			t.Fatalf("t2's alice: %s", headString(got[alice2]))
		}
		if n := got[bob].Newest; got[bob].Badge != (store.InboxBadge{Unread: 2, Seq: sb[1]}) || n == nil || n.NotificationID != bob2.ID || n.ReadAt != nil {
			t.Fatalf("bob: %s", headString(got[bob]))
		}
		if got[none] != (store.InboxHead{}) || got[noneT] != (store.InboxHead{}) {
			t.Fatalf("inboxes without items: %s, %s", headString(got[none]), headString(got[noneT]))
		}
		if len(heads(t, b, nil)) != 0 {
			t.Fatal("heads for no key")
		}
	})

	t.Run("AFullBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// MaxInboxHeads keys, a few with items (one to three each).
		keys := make([]store.InboxKey, store.MaxInboxHeads)
		for i := range keys {
			keys[i] = store.InboxKey{Tenant: "t1", Recipient: fmt.Sprintf("r%03d", i)}
			if i%25 == 7 {
				for range i%3 + 1 {
					b.clk.Advance(time.Millisecond)
					inboxCreate(t, b, "t1", keys[i].Recipient, nil)
				}
			}
		}
		got := heads(t, b, keys)
		if len(got) != len(keys) {
			t.Fatalf("%d heads for %d keys", len(got), len(keys))
		}
		withItems := 0
		for _, k := range keys {
			wantHead(t, b, k, got[k])
			if got[k].Newest != nil {
				withItems++
			}
		}
		if withItems != 20 {
			t.Fatalf("%d heads with an item, want 20", withItems)
		}
	})
}
