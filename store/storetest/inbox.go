package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// inboxCreate creates a notification for tenant/recipient whose kind lists
// the inbox beside a webhook, with one text per given locale ("" for one
// text without locales); it fails the test unless the outcome is Created.
func inboxCreate(t *testing.T, b bundle, tenant, recipient string, mutate func(p *store.NotificationCreateParams)) store.NotificationCreateParams {
	t.Helper()
	p, res := create(t, b, func(p *store.NotificationCreateParams) {
		p.Tenant, p.Recipient = tenant, recipient
		p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelInbox}
		p.Inbox = []store.InboxText{{Title: "title " + p.ID, Body: "body " + p.ID}}
		if mutate != nil {
			mutate(p)
		}
	})
	if res.Outcome != store.Created {
		t.Fatalf("create %s: outcome %v, want Created", p.ID, res.Outcome)
	}
	return p
}

// inboxCreateN is n inboxCreates of tenant/recipient without a mutation,
// oldest first.
func inboxCreateN(t *testing.T, b bundle, tenant, recipient string, n int) []store.NotificationCreateParams {
	t.Helper()
	ps := make([]store.NotificationCreateParams, n)
	for i := range ps {
		ps[i] = inboxCreate(t, b, tenant, recipient, nil)
	}
	return ps
}

// markRead marks tenant/recipient's items messageIDs read, a step before
// what a test looks at; any error fails the test.
func markRead(t *testing.T, b bundle, tenant, recipient string, messageIDs ...string) {
	t.Helper()
	if _, err := b.s.InboxMarkRead(b.ctx, store.InboxMarkReadParams{Tenant: tenant, Recipient: recipient, IDs: messageIDs}); err != nil {
		t.Fatalf("InboxMarkRead %s/%s %v: %v", tenant, recipient, messageIDs, err)
	}
}

// archiveItem archives tenant/recipient's item messageID, a step before
// what a test looks at; any error fails the test.
func archiveItem(t *testing.T, b bundle, tenant, recipient, messageID string) {
	t.Helper()
	if _, err := b.s.InboxArchive(b.ctx, tenant, recipient, messageID); err != nil {
		t.Fatalf("InboxArchive %s/%s %s: %v", tenant, recipient, messageID, err)
	}
}

// feed reads a page; any error fails the test.
func feed(t *testing.T, b bundle, p store.InboxFeedParams) store.InboxPage {
	t.Helper()
	page, err := b.s.InboxFeed(b.ctx, p)
	if err != nil {
		t.Fatalf("InboxFeed %+v: %v", p, err)
	}
	return page
}

// badge reads a badge; any error fails the test.
func badge(t *testing.T, b bundle, tenant, recipient string) store.InboxBadge {
	t.Helper()
	bd, err := b.s.InboxBadge(b.ctx, tenant, recipient)
	if err != nil {
		t.Fatalf("InboxBadge %s/%s: %v", tenant, recipient, err)
	}
	return bd
}

// allItems reads the recipient's every item, archived ones too, oldest
// first.
func allItems(t *testing.T, b bundle, tenant, recipient string) []store.InboxItem {
	t.Helper()
	items, err := b.s.InboxItemsAfter(b.ctx, tenant, recipient, 0, 1_000_000)
	if err != nil {
		t.Fatalf("InboxItemsAfter: %v", err)
	}
	return items
}

// unreadOf counts the items neither read nor archived: what the counter
// must say.
func unreadOf(items []store.InboxItem) int64 {
	var n int64
	for _, it := range items {
		if it.ReadAt == nil && it.ArchivedAt == nil {
			n++
		}
	}
	return n
}

// seqs lists the items' seqs in order.
func seqs(items []store.InboxItem) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Seq
	}
	return out
}

// reversed returns s newest first.
func reversed(s []int64) []int64 {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// itemSeqs reads the seqs of tenant/recipient's items, archived ones too,
// oldest first, and fails the test unless each is greater than the one
// before. A seq is only ordered: PostgreSQL numbers a recipient's items
// 1, 2, 3…, SQLite numbers all items of the file in one sequence.
func itemSeqs(t *testing.T, b bundle, tenant, recipient string) []int64 {
	t.Helper()
	s := seqs(allItems(t, b, tenant, recipient))
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			t.Fatalf("%s/%s: seqs %v do not increase", tenant, recipient, s)
		}
	}
	return s
}

// recount recomputes every counter; any error fails the test.
func recount(t *testing.T, b bundle, p store.InboxRecountParams) store.InboxRecountResult {
	t.Helper()
	res, err := b.s.InboxRecount(b.ctx, p)
	if err != nil {
		t.Fatalf("InboxRecount: %v", err)
	}
	return res
}

// inboxLog records the inbox signals of a store: "tenant/recipient" per
// changed inbox.
type inboxLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *inboxLog) InboxChanged(keys []store.InboxKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		l.keys = append(l.keys, k.Tenant+"/"+k.Recipient)
	}
}

func (l *inboxLog) InboxMissed() {}

// take returns the signals so far and forgets them.
func (l *inboxLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.keys
	l.keys = nil
	return out
}

func testInbox(t *testing.T, h Harness) {
	t.Run("CreateWritesTheItemAtOnceWithANewerSeq", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ps := inboxCreateN(t, b, "t1", "r1", 3)
		s := itemSeqs(t, b, "t1", "r1")
		if len(s) != 3 {
			t.Fatalf("items after 0: %v, want 3", s)
		}
		page := feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Limit: 10})
		if got := seqs(page.Items); !slices.Equal(got, reversed(s)) || page.Next != 0 {
			t.Fatalf("feed seqs %v next %d, want %v and 0", got, page.Next, reversed(s))
		}
		for i, it := range page.Items {
			p := ps[2-i]
			// The clock stands still; a store may move a created_at a few
			// milliseconds on to keep its feed in commit order (SQLite).
			if it.MessageID != p.ID+".inbox" || it.NotificationID != p.ID || it.Kind != "k" ||
				it.Title != "title "+p.ID || it.Body != "body "+p.ID || it.CreatedAt.Before(Epoch) || it.CreatedAt.After(Epoch.Add(time.Second)) ||
				it.ReadAt != nil || it.ArchivedAt != nil {
				t.Errorf("item %d = %+v", i, it)
			}
		}
		if page.Badge != (store.InboxBadge{Unread: 3, Seq: s[2]}) {
			t.Errorf("feed's badge %+v, want 3 unread at seq %d", page.Badge, s[2])
		}
		if bd := badge(t, b, "t1", "r1"); bd != (store.InboxBadge{Unread: 3, Seq: s[2]}) {
			t.Errorf("badge %+v, want 3 unread at seq %d", bd, s[2])
		}
		if after, err := b.s.InboxItemsAfter(b.ctx, "t1", "r1", s[0], 1); err != nil || !slices.Equal(seqs(after), s[1:2]) {
			t.Errorf("one item after seq %d: %v (%v), want %v", s[0], seqs(after), err, s[1:2])
		}
	})
	t.Run("TheInboxSendIsStoredAndNeverClaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := inboxCreate(t, b, "t1", "r1", nil)
		v, err := b.s.NotificationGet(b.ctx, "t1", p.ID)
		if err != nil {
			t.Fatal(err)
		}
		states := map[heraldtype.Channel]string{}
		for _, dv := range v.Deliveries {
			state, reason, _ := v.EntryState(dv)
			states[dv.Channel] = state + "/" + reason
			if dv.Channel == heraldtype.ChannelInbox {
				if dv.OutboxState != heraldtype.OutboxDone || dv.OutboxReason != heraldtype.ReasonStored || dv.MessageID != p.ID+".inbox" {
					t.Errorf("inbox outbox row %+v, want DONE(STORED)", dv)
				}
			}
		}
		want := map[heraldtype.Channel]string{heraldtype.ChannelWebhook: "PENDING/", heraldtype.ChannelInbox: "STORED/STORED"}
		if fmt.Sprint(states) != fmt.Sprint(want) {
			t.Fatalf("entries %v, want %v", states, want)
		}
		d := delivery(t, b, p.ID+".inbox")
		if d.State != heraldtype.DeliveryStored || d.Channel != heraldtype.ChannelInbox {
			t.Errorf("inbox delivery %+v, want STORED", d)
		}
		b.clk.Advance(time.Hour)
		rows := claim(t, b, heraldtype.LaneTransactional, 100)
		if len(rows) != 1 || rows[0].Channel != heraldtype.ChannelWebhook {
			t.Fatalf("claimed %+v, want the webhook row alone", rows)
		}
		// The listing shows the entry STORED too.
		list, err := b.s.NotificationList(b.ctx, store.NotificationListParams{Tenant: "t1", State: "STORED", Limit: 10})
		if err != nil || len(list) != 1 || list[0].ID != p.ID {
			t.Errorf("list of STORED: %d (%v), want the notification", len(list), err)
		}
	})
	t.Run("TheInboxSendHasNoRowsAndKeepsItsPlace", func(t *testing.T) {
		// The inbox send is the notification's inbox_at, not outbox and
		// delivery rows (store, inboxsend.go): the read API shows it in its
		// channel's place (after a push's sends, one per device), the
		// listing filters on it, a receipt is refused as for any STORED
		// send and finds nothing for another recipient, and reconciliation
		// counts it STORED and an inbox-only notification as planned.
		t.Parallel()
		b := setup(t, h)
		putDevice(t, b, "r1", "tok-a", store.PlatformFCM)
		putDevice(t, b, "r1", "tok-b", store.PlatformFCM)
		mixed := inboxCreate(t, b, "t1", "r1", func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelInbox, heraldtype.ChannelSMS}
		})
		only := inboxCreate(t, b, "t1", "r1", func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelInbox}
		})
		plain, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Tenant, p.Recipient = "t1", "r1" })
		want := map[string]string{
			mixed.ID: "[push=PENDING push=PENDING inbox=STORED sms=PENDING]",
			only.ID:  "[inbox=STORED]",
			plain.ID: "[webhook=PENDING]",
		}
		for id, want := range want {
			v, err := b.s.NotificationGet(b.ctx, "t1", id)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, dv := range v.Deliveries {
				state, _, _ := v.EntryState(dv)
				got = append(got, string(dv.Channel.Base())+"="+state)
			}
			if fmt.Sprint(got) != want {
				t.Errorf("%s's sends %v, want %s", id, got, want)
			}
		}
		list, err := b.s.NotificationList(b.ctx, store.NotificationListParams{Tenant: "t1", State: "STORED", Limit: 10})
		if err != nil || len(list) != 2 || (list[0].ID != only.ID && list[1].ID != only.ID) || (list[0].ID != mixed.ID && list[1].ID != mixed.ID) {
			t.Errorf("list of STORED: %d (%v), want the two with an inbox item", len(list), err)
		}
		if _, err := b.s.DeliveryGet(b.ctx, plain.ID+".inbox"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the inbox send of a notification without one: %v, want ErrNotFound", err)
		}
		if out, err := b.s.DeliveryReceipt(b.ctx, "t1", "r1", only.ID+".inbox"); err != nil || out.Result != store.ReceiptNotPush ||
			out.From != heraldtype.DeliveryStored || out.Channel != heraldtype.ChannelInbox {
			t.Errorf("receipt for the inbox send: %+v (%v), want not a push, STORED", out, err)
		}
		if _, err := b.s.DeliveryReceipt(b.ctx, "t1", "r2", only.ID+".inbox"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("another recipient's receipt for it: %v, want ErrNotFound", err)
		}
		c := count(t, b, time.Hour, 2)
		if c.MissingOutbox.Count != 0 || c.ByState["STORED"] != 2 || c.ByState["PENDING"] != 4 {
			t.Errorf("reconciliation counted %+v, want 2 STORED, 4 PENDING, none missing its outbox", c)
		}
	})
	t.Run("TheRecipientsLanguageChoosesTheText", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		texts := []store.InboxText{{Locale: "en", Title: "Paid"}, {Locale: "default", Title: "default"}, {Locale: "ko", Title: "결제 완료"}}
		for _, c := range []struct{ recipient, language, want string }{
			{"ko-user", "ko-KR", "결제 완료"},
			{"en-user", "en-US", "Paid"},
			{"fr-user", "fr", "default"},
			{"no-language", "", "default"},
			{"no-profile", "-", "default"},
		} {
			if c.language != "-" {
				if err := b.s.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: c.recipient, Language: c.language}); err != nil {
					t.Fatal(err)
				}
			}
			inboxCreate(t, b, "t1", c.recipient, func(p *store.NotificationCreateParams) { p.Inbox = texts })
			items := allItems(t, b, "t1", c.recipient)
			if len(items) != 1 || items[0].Title != c.want {
				t.Errorf("%s (language %q): items %+v, want the text %q", c.recipient, c.language, items, c.want)
			}
		}
		// One text without locales is every recipient's.
		inboxCreate(t, b, "t1", "ko-user", func(p *store.NotificationCreateParams) { p.Inbox = []store.InboxText{{Title: "only"}} })
		if items := allItems(t, b, "t1", "ko-user"); len(items) != 2 || items[1].Title != "only" {
			t.Errorf("a single text: %+v", items)
		}
	})
	t.Run("NoItemOnReplayDedupOrConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		inboxCreate(t, b, "t1", "r1", func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k" })
		for _, c := range []struct {
			name   string
			mutate func(p *store.NotificationCreateParams)
			want   store.CreateOutcome
		}{
			{"replay", func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k" }, store.Replayed},
			{"conflict", func(p *store.NotificationCreateParams) { p.IdempotencyKey = "k"; p.RequestHash = "h2" }, store.Conflict},
		} {
			_, res := create(t, b, func(p *store.NotificationCreateParams) {
				p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelInbox}
				p.Inbox = []store.InboxText{{Title: "again"}}
				c.mutate(p)
			})
			if res.Outcome != c.want {
				t.Fatalf("%s: outcome %v, want %v", c.name, res.Outcome, c.want)
			}
		}
		// A dedup hit, alone (r2) and with a new idempotency key (r3).
		for r, key := range map[string]string{"r2": "", "r3": "k3"} {
			inboxCreate(t, b, "t1", r, func(p *store.NotificationCreateParams) { p.IdempotencyKey = "first-" + r; p.DedupKey = "d-" + r })
			_, res := create(t, b, func(p *store.NotificationCreateParams) {
				p.Recipient, p.IdempotencyKey, p.DedupKey = r, key, "d-"+r
				p.Channels = []heraldtype.Channel{heraldtype.ChannelInbox}
				p.Inbox = []store.InboxText{{Title: "again"}}
			})
			if res.Outcome != store.Deduplicated {
				t.Fatalf("dedup for %s: outcome %v", r, res.Outcome)
			}
		}
		for _, r := range []string{"r1", "r2", "r3"} {
			items := allItems(t, b, "t1", r)
			if len(items) != 1 || items[0].Title == "again" {
				t.Errorf("%s: items %+v, want the first alone", r, items)
			}
			if bd := badge(t, b, "t1", r); len(items) != 1 || bd != (store.InboxBadge{Unread: 1, Seq: items[0].Seq}) {
				t.Errorf("%s: badge %+v, want 1 at the item's seq", r, bd)
			}
		}
	})
	t.Run("NoInboxTextWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := store.NotificationCreateParams{
			Tenant: "t1", IdempotencyKey: "k", RequestHash: "h", IdempotencyTTL: time.Hour, Response: []byte("{}"),
			ID: "ntf_notext", Recipient: "r1", EventID: "e", Kind: "k", Lane: heraldtype.LaneTransactional,
			Channels: []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelInbox},
		}
		if _, err := b.s.NotificationCreate(b.ctx, p); !errors.Is(err, store.ErrNoInboxText) {
			t.Fatalf("a create listing the inbox without a text: %v, want ErrNoInboxText", err)
		}
		if _, err := b.s.NotificationGet(b.ctx, "t1", p.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after the failed create: %v, want ErrNotFound", err)
		}
		if bd := badge(t, b, "t1", "r1"); bd != (store.InboxBadge{}) {
			t.Errorf("badge %+v after a failed create, want none", bd)
		}
		// The key was not taken either: the same request goes through.
		p.Inbox = []store.InboxText{{Title: "t"}}
		if res, err := b.s.NotificationCreate(b.ctx, p); err != nil || res.Outcome != store.Created {
			t.Fatalf("retry: %v %v, want Created", res.Outcome, err)
		}
	})
	t.Run("PagesNeitherSkipNorRepeatWhileItemsArrive", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// The clock stands still: every item has the same millisecond.
		inboxCreateN(t, b, "t1", "r1", 25)
		first := itemSeqs(t, b, "t1", "r1")
		var seen []int64
		before := int64(0)
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("more than 10 pages of 10 for 25 items")
			}
			page := feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Before: before, Limit: 10})
			seen = append(seen, seqs(page.Items)...)
			// Items arrive between pages; they are newer than the first
			// page, so this walk does not see them.
			inboxCreateN(t, b, "t1", "r1", 3)
			if page.Next == 0 {
				break
			}
			before = page.Next
		}
		if !slices.Equal(seen, reversed(first)) {
			t.Fatalf("walked %v, want %v once each", seen, reversed(first))
		}
		// A walk of the new items from the newest down to the first walk's
		// start meets it exactly.
		all := itemSeqs(t, b, "t1", "r1")
		page := feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Limit: 100})
		if len(all) != 34 || !slices.Equal(seqs(page.Items), reversed(all)) || page.Next != 0 {
			t.Fatalf("second walk: %v next %d, want %v", seqs(page.Items), page.Next, reversed(all))
		}
		// Exactly a page's worth: the last page says it is the last.
		page = feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Before: all[10], Limit: 10})
		if len(page.Items) != 10 || page.Next != 0 {
			t.Errorf("the last full page: %v next %d, want 10 items and next 0", seqs(page.Items), page.Next)
		}
	})
	t.Run("ItemsKeepTheirCommitOrderWhateverTheirTimesAndIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		// Ids that sort backwards within one millisecond, then a clock
		// stepped back an hour: the feed, a page's cursor and a replay
		// still go by the order the items were committed in.
		byID := map[int64]string{}
		mk := func(id string) {
			t.Helper()
			inboxCreate(t, b, "t1", "r1", func(p *store.NotificationCreateParams) { p.ID = id })
			items := allItems(t, b, "t1", "r1")
			if last := items[len(items)-1]; last.NotificationID != id {
				t.Fatalf("after creating %s the newest item is %s", id, last.NotificationID)
			} else {
				byID[last.Seq] = id
			}
		}
		mk("ntf_9")
		mk("ntf_8")
		mk("ntf_7")
		page := feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Limit: 2})
		if got := seqs(page.Items); len(got) != 2 || byID[got[0]] != "ntf_7" || byID[got[1]] != "ntf_8" || page.Next != got[1] {
			t.Fatalf("first page %v (next %d), want ntf_7 and ntf_8", got, page.Next)
		}
		lastSeen := page.Items[0].Seq
		b.clk.Advance(-time.Hour)
		mk("ntf_6")
		mk("ntf_5")
		s := itemSeqs(t, b, "t1", "r1") // increasing, in commit order (mk checked each newest)
		if len(s) != 5 {
			t.Fatalf("items %v, want 5", s)
		}
		rest := feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Before: page.Next, Limit: 10})
		if got := seqs(rest.Items); len(got) != 1 || byID[got[0]] != "ntf_9" || rest.Next != 0 {
			t.Errorf("the page after the cursor: %v (next %d), want ntf_9 alone", got, rest.Next)
		}
		after, err := b.s.InboxItemsAfter(b.ctx, "t1", "r1", lastSeen, 10)
		if err != nil || len(after) != 2 || after[0].NotificationID != "ntf_6" || after[1].NotificationID != "ntf_5" {
			t.Errorf("replay after the newest seen: %v (%v), want ntf_6 and ntf_5", seqs(after), err)
		}
		// Each item's time is its notification's.
		for _, it := range allItems(t, b, "t1", "r1") {
			v, err := b.s.NotificationGet(b.ctx, "t1", it.NotificationID)
			if err != nil {
				t.Fatal(err)
			}
			if !v.CreatedAt.Equal(it.CreatedAt) {
				t.Errorf("%s: item at %v, notification at %v", it.NotificationID, it.CreatedAt, v.CreatedAt)
			}
		}
	})
	t.Run("ArchiveHidesAndCounts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ps := inboxCreateN(t, b, "t1", "r1", 3)
		inboxCreate(t, b, "t1", "r2", nil)
		s := itemSeqs(t, b, "t1", "r1")
		archive := func(tenant, recipient, id string, want bool) {
			t.Helper()
			found, err := b.s.InboxArchive(b.ctx, tenant, recipient, id)
			if err != nil || found != want {
				t.Fatalf("archive %s as %s/%s: %v (%v), want %v", id, tenant, recipient, found, err, want)
			}
		}
		archive("t1", "r1", ps[0].ID+".inbox", true) // unread: counts
		if bd := badge(t, b, "t1", "r1"); bd.Unread != 2 {
			t.Fatalf("archiving an unread item: unread %d, want 2", bd.Unread)
		}
		markRead(t, b, "t1", "r1", ps[1].ID+".inbox")
		archive("t1", "r1", ps[1].ID+".inbox", true) // read already: does not count again
		archive("t1", "r1", ps[0].ID+".inbox", true) // archived already: nothing changes
		archive("t1", "r2", ps[2].ID+".inbox", false)
		archive("t2", "r1", ps[2].ID+".inbox", false)
		archive("t1", "r1", "ntf_unknown.inbox", false)
		if bd := badge(t, b, "t1", "r1"); bd != (store.InboxBadge{Unread: 1, Seq: s[2]}) {
			t.Fatalf("badge %+v, want 1 unread at seq %d", bd, s[2])
		}
		if bd := badge(t, b, "t1", "r2"); bd.Unread != 1 {
			t.Errorf("r2's badge %+v, want 1 unread", bd)
		}
		page := feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Limit: 10})
		if got := seqs(page.Items); !slices.Equal(got, s[2:]) {
			t.Errorf("feed without archived: %v, want %v", got, s[2:])
		}
		page = feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r1", Limit: 10, Archived: true})
		if got := seqs(page.Items); !slices.Equal(got, reversed(s)) || page.Items[2].ArchivedAt == nil || page.Items[1].ReadAt == nil {
			t.Errorf("feed with archived: %+v", page.Items)
		}
		if res := recount(t, b, store.InboxRecountParams{}); res.Repaired != 0 {
			t.Errorf("recount found drift: %+v", res)
		}
	})
	t.Run("MarkReadTouchesOnlyTheRecipientsUnreadItems", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mine := inboxCreateN(t, b, "t1", "r1", 5)
		other := inboxCreate(t, b, "t1", "r2", nil)
		otherTenant := inboxCreate(t, b, "t2", "r1", nil)
		s := itemSeqs(t, b, "t1", "r1")
		read := func(p store.InboxMarkReadParams) store.InboxBadge {
			t.Helper()
			p.Tenant, p.Recipient = "t1", "r1"
			bd, err := b.s.InboxMarkRead(b.ctx, p)
			if err != nil {
				t.Fatalf("InboxMarkRead %+v: %v", p, err)
			}
			return bd
		}
		bd := read(store.InboxMarkReadParams{IDs: []string{mine[0].ID + ".inbox", other.ID + ".inbox", otherTenant.ID + ".inbox", "nope"}})
		if bd != (store.InboxBadge{Unread: 4, Seq: s[4]}) {
			t.Fatalf("after reading one of mine and others': %+v, want 4 unread", bd)
		}
		firstRead := allItems(t, b, "t1", "r1")[0].ReadAt
		b.clk.Advance(time.Minute)
		if bd := read(store.InboxMarkReadParams{IDs: []string{mine[0].ID + ".inbox"}}); bd.Unread != 4 {
			t.Fatalf("reading it again: unread %d, want 4", bd.Unread)
		}
		if again := allItems(t, b, "t1", "r1")[0].ReadAt; firstRead == nil || again == nil || !again.Equal(*firstRead) {
			t.Errorf("read_at %v then %v, want kept", firstRead, again)
		}
		// An unread item archived (it leaves the count) and then read
		// does not leave it twice.
		archiveItem(t, b, "t1", "r1", mine[2].ID+".inbox")
		if bd := read(store.InboxMarkReadParams{All: true, UpToSeq: s[2]}); bd.Unread != 2 {
			t.Fatalf("all up to the third item's seq: unread %d, want 2", bd.Unread)
		}
		if got := unreadOf(allItems(t, b, "t1", "r1")); got != 2 {
			t.Fatalf("items unread %d, want 2 (4 and 5)", got)
		}
		if bd := read(store.InboxMarkReadParams{All: true}); bd != (store.InboxBadge{Unread: 0, Seq: s[4]}) {
			t.Fatalf("all: %+v, want none unread", bd)
		}
		for _, k := range [][2]string{{"t1", "r2"}, {"t2", "r1"}} {
			if bd := badge(t, b, k[0], k[1]); bd.Unread != 1 {
				t.Errorf("%v: unread %d, want 1 (untouched)", k, bd.Unread)
			}
			if n := unreadOf(allItems(t, b, k[0], k[1])); n != 1 {
				t.Errorf("%v: %d items unread, want 1", k, n)
			}
		}
		// No item yet: a zero badge, no error.
		if bd, err := b.s.InboxMarkRead(b.ctx, store.InboxMarkReadParams{Tenant: "t9", Recipient: "r9", All: true}); err != nil || bd != (store.InboxBadge{}) {
			t.Errorf("a recipient without items: %+v (%v)", bd, err)
		}
	})
	t.Run("BadgeExactUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const writers, each = 4, 25
		var mu sync.Mutex
		var created []string
		start := make(chan struct{})
		var wg, creating sync.WaitGroup
		createsDone := make(chan struct{})
		errs := make(chan error, 100)
		for w := range writers {
			creating.Add(1)
			wg.Go(func() { // creates
				defer creating.Done()
				<-start
				for i := range each {
					id := fmt.Sprintf("ntf_race_%d_%d", w, i)
					_, err := b.s.NotificationCreate(b.ctx, store.NotificationCreateParams{
						Tenant: "t1", ID: id, Recipient: "r1", EventID: "e", Kind: "k", Lane: heraldtype.LaneTransactional,
						Channels: []heraldtype.Channel{heraldtype.ChannelInbox}, Inbox: []store.InboxText{{Title: id}},
					})
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					created = append(created, id+".inbox")
					mu.Unlock()
				}
			})
			wg.Go(func() { // marks read and archives what exists so far, while creates go on and after
				rng := rand.New(rand.NewPCG(uint64(w), 9))
				<-start
				for i := 0; ; i++ {
					select {
					case <-createsDone:
						if i >= 2*each {
							return
						}
					default:
					}
					mu.Lock()
					var pick []string
					for range 3 {
						if len(created) > 0 {
							pick = append(pick, created[rng.IntN(len(created))])
						}
					}
					mu.Unlock()
					var err error
					switch {
					case i%10 == 9:
						_, err = b.s.InboxMarkRead(b.ctx, store.InboxMarkReadParams{Tenant: "t1", Recipient: "r1", All: true, UpToSeq: int64(rng.IntN(50))})
					case i%2 == 0 && len(pick) > 0:
						_, err = b.s.InboxArchive(b.ctx, "t1", "r1", pick[0])
					default:
						_, err = b.s.InboxMarkRead(b.ctx, store.InboxMarkReadParams{Tenant: "t1", Recipient: "r1", IDs: pick})
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		close(start)
		go func() { creating.Wait(); close(createsDone) }()
		wait(t, &wg, "creates, reads and archives")
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		items := allItems(t, b, "t1", "r1")
		s := itemSeqs(t, b, "t1", "r1")
		if bd := badge(t, b, "t1", "r1"); bd.Unread != unreadOf(items) || len(items) != writers*each || bd.Seq != s[len(s)-1] {
			t.Fatalf("badge %+v, items %d of which %d unread, the newest at seq %d; want %d items", bd, len(items), unreadOf(items), s[len(s)-1], writers*each)
		}
		if res := recount(t, b, store.InboxRecountParams{Tenant: "t1", Recipient: "r1"}); res.Repaired != 0 || res.Checked != 1 {
			t.Errorf("recount after the race: %+v, want one row checked, none drifted", res)
		}
	})
	t.Run("RecountRepairsABrokenCounter", func(t *testing.T) {
		t.Parallel()
		if h.Exec == nil {
			t.Skip("the harness has no Exec")
		}
		b := setup(t, h)
		for _, r := range []string{"r1", "r2", "r3", "r4", "r5"} {
			inboxCreateN(t, b, "t1", r, 2)
		}
		inboxCreate(t, b, "t2", "r1", nil)
		r2, r4 := itemSeqs(t, b, "t1", "r2"), itemSeqs(t, b, "t1", "r4")
		h.Exec(t, b.s, `UPDATE inbox_counters SET unread = unread + 7 WHERE tenant = 't1' AND recipient = 'r2'`)
		h.Exec(t, b.s, `UPDATE inbox_counters SET unread = 0, seq = 1 WHERE tenant = 't1' AND recipient = 'r4'`)
		h.Exec(t, b.s, `UPDATE inbox_counters SET unread = 5 WHERE tenant = 't2' AND recipient = 'r1'`)
		res := recount(t, b, store.InboxRecountParams{Tenant: "t1", Batch: 2})
		want := []store.InboxDrift{
			{Tenant: "t1", Recipient: "r2", Was: store.InboxBadge{Unread: 9, Seq: r2[1]}, Now: store.InboxBadge{Unread: 2, Seq: r2[1]}},
			{Tenant: "t1", Recipient: "r4", Was: store.InboxBadge{Unread: 0, Seq: 1}, Now: store.InboxBadge{Unread: 2, Seq: r4[1]}},
		}
		if res.Checked != 5 || res.Repaired != 2 || fmt.Sprint(res.Drifted) != fmt.Sprint(want) {
			t.Fatalf("recount of t1: %+v, want 5 checked and %v", res, want)
		}
		if bd := badge(t, b, "t2", "r1"); bd.Unread != 5 {
			t.Errorf("t2's counter %+v: a recount of t1 touched it", bd)
		}
		if res := recount(t, b, store.InboxRecountParams{}); res.Checked != 6 || res.Repaired != 1 || res.Drifted[0].Tenant != "t2" {
			t.Errorf("recount of all: %+v, want t2/r1 repaired", res)
		}
		if res := recount(t, b, store.InboxRecountParams{Batch: 1}); res.Checked != 6 || res.Repaired != 0 {
			t.Errorf("recount after repair: %+v, want nothing", res)
		}
		// The next item continues after the highest seq.
		inboxCreate(t, b, "t1", "r4", nil)
		if s := itemSeqs(t, b, "t1", "r4"); len(s) != 3 || s[2] <= r4[1] || badge(t, b, "t1", "r4") != (store.InboxBadge{Unread: 3, Seq: s[2]}) {
			t.Errorf("r4 after a new item: %v, badge %+v, want 3 unread at the new item's seq", s, badge(t, b, "t1", "r4"))
		}
	})
	t.Run("PurgeIsBoundedOldestFirstAndKeepsCountersExact", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var r1 []store.NotificationCreateParams
		for range 4 {
			r1 = append(r1, inboxCreate(t, b, "t1", "r1", nil))
			inboxCreate(t, b, "t2", "r1", nil)
			b.clk.Advance(time.Hour)
		}
		cutoff := b.clk.Now()
		inboxCreate(t, b, "t1", "r1", nil) // newer than the cutoff: stays
		markRead(t, b, "t1", "r1", r1[0].ID+".inbox")
		archiveItem(t, b, "t1", "r1", r1[1].ID+".inbox")
		s1, s2 := itemSeqs(t, b, "t1", "r1"), itemSeqs(t, b, "t2", "r1")
		purge := func(p store.InboxPurgeParams) int {
			t.Helper()
			p.Before = cutoff
			n, err := b.s.InboxPurge(b.ctx, p)
			if err != nil {
				t.Fatalf("InboxPurge %+v: %v", p, err)
			}
			return n
		}
		if n := purge(store.InboxPurgeParams{Tenant: "t1", Limit: 3}); n != 3 {
			t.Fatalf("purged %d, want the limit 3", n)
		}
		items := allItems(t, b, "t1", "r1")
		if got := seqs(items); !slices.Equal(got, s1[3:]) {
			t.Fatalf("t1/r1 left with %v, want the newest two %v", got, s1[3:])
		}
		if bd := badge(t, b, "t1", "r1"); bd != (store.InboxBadge{Unread: 2, Seq: s1[4]}) {
			t.Fatalf("badge %+v, want 2 unread at seq %d", bd, s1[4])
		}
		if n := purge(store.InboxPurgeParams{Except: []string{"t2"}, Limit: 10}); n != 1 {
			t.Fatalf("purge of all but t2: %d, want 1", n)
		}
		if n := len(allItems(t, b, "t2", "r1")); n != 4 {
			t.Fatalf("t2 has %d items, want its 4 (excepted)", n)
		}
		if n := purge(store.InboxPurgeParams{Limit: 10}); n != 4 {
			t.Fatalf("purge of all: %d, want t2's 4", n)
		}
		if n := purge(store.InboxPurgeParams{Limit: 10}); n != 0 {
			t.Fatalf("purge again: %d, want 0", n)
		}
		if bd := badge(t, b, "t2", "r1"); bd != (store.InboxBadge{Unread: 0, Seq: s2[3]}) {
			t.Errorf("t2 badge %+v, want 0 unread at seq %d (seq stays)", bd, s2[3])
		}
		if res := recount(t, b, store.InboxRecountParams{}); res.Repaired != 0 {
			t.Errorf("recount after purges: %+v", res)
		}
		inboxCreate(t, b, "t2", "r1", nil)
		if got := seqs(allItems(t, b, "t2", "r1")); len(got) != 1 || got[0] <= s2[3] {
			t.Errorf("after a purge the next item is %v, want a seq after %d", got, s2[3])
		}
	})
	t.Run("PurgeTakesTheOldestOfEveryTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var made []store.NotificationCreateParams
		for _, tenant := range []string{"t3", "t2", "t1", "t1", "t2"} { // an hour apart, oldest first
			made = append(made, inboxCreate(t, b, tenant, "r1", nil))
			b.clk.Advance(time.Hour)
		}
		left := func() []string {
			t.Helper()
			var ids []string
			for _, tenant := range []string{"t1", "t2", "t3"} {
				for _, it := range allItems(t, b, tenant, "r1") {
					ids = append(ids, it.NotificationID)
				}
			}
			slices.Sort(ids)
			return ids
		}
		n, err := b.s.InboxPurge(b.ctx, store.InboxPurgeParams{Before: b.clk.Now(), Limit: 3})
		if err != nil || n != 3 {
			t.Fatalf("purged %d (%v), want 3", n, err)
		}
		want := []string{made[3].ID, made[4].ID}
		slices.Sort(want)
		if got := left(); !slices.Equal(got, want) {
			t.Fatalf("left %v, want the two newest %v", got, want)
		}
	})
	t.Run("TenantsAndRecipientsAreIsolated", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		inboxCreateN(t, b, "t1", "r1", 2)
		inboxCreate(t, b, "t1", "r2", nil)
		inboxCreate(t, b, "t2", "r1", nil)
		for _, c := range []struct {
			tenant, recipient string
			want              int
		}{{"t1", "r1", 2}, {"t1", "r2", 1}, {"t2", "r1", 1}, {"t2", "r2", 0}} {
			page := feed(t, b, store.InboxFeedParams{Tenant: c.tenant, Recipient: c.recipient, Limit: 10, Archived: true})
			newest := int64(0)
			if len(page.Items) > 0 {
				newest = page.Items[0].Seq
			}
			if len(page.Items) != c.want || page.Badge.Unread != int64(c.want) || page.Badge.Seq != newest {
				t.Errorf("%s/%s: %d items, badge %+v; want %d", c.tenant, c.recipient, len(page.Items), page.Badge, c.want)
			}
		}
	})
	t.Run("WritesSignalTheInboxesTheyChanged", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var log inboxLog
		t.Cleanup(b.s.InboxSignals().Watch(&log))
		// Each step changes (or leaves alone) an inbox of its own. A
		// driver may hear its own signals again later (PostgreSQL's
		// LISTEN), so a step's signal is looked for, not counted, and a
		// write that changed nothing must never name its inbox.
		ps := map[string]store.NotificationCreateParams{}
		for _, r := range []string{"purge", "read", "archive"} {
			ps[r] = inboxCreate(t, b, "t1", r, nil)
			b.clk.Advance(time.Hour) // the purge's item is the oldest
		}
		for _, s := range []struct {
			name, recipient string
			do              func() error
		}{
			{"create", "create", func() error { inboxCreate(t, b, "t1", "create", nil); return nil }},
			{"read", "read", func() error {
				_, err := b.s.InboxMarkRead(b.ctx, store.InboxMarkReadParams{Tenant: "t1", Recipient: "read", IDs: []string{ps["read"].ID + ".inbox"}})
				return err
			}},
			{"archive", "archive", func() error {
				_, err := b.s.InboxArchive(b.ctx, "t1", "archive", ps["archive"].ID+".inbox")
				return err
			}},
			{"purge", "purge", func() error {
				_, err := b.s.InboxPurge(b.ctx, store.InboxPurgeParams{Tenant: "t1", Before: Epoch.Add(30 * time.Minute), Limit: 10})
				return err
			}},
		} {
			log.take()
			if err := s.do(); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if got := log.take(); !slices.Contains(got, "t1/"+s.recipient) {
				t.Errorf("%s signalled %v, want t1/%s among them", s.name, got, s.recipient)
			}
		}
		// Writes that change no inbox.
		log.take()
		create(t, b, func(p *store.NotificationCreateParams) { p.Recipient = "plain" })
		if bd, err := b.s.InboxMarkRead(b.ctx, store.InboxMarkReadParams{Tenant: "t1", Recipient: "quiet", All: true}); err != nil || bd != (store.InboxBadge{}) {
			t.Fatalf("reading an empty inbox: %+v (%v)", bd, err)
		}
		if found, err := b.s.InboxArchive(b.ctx, "t1", "quiet", ps["read"].ID+".inbox"); err != nil || found {
			t.Fatalf("archiving another's item: %v (%v)", found, err)
		}
		if n, err := b.s.InboxPurge(b.ctx, store.InboxPurgeParams{Tenant: "t1", Before: Epoch, Limit: 10}); err != nil || n != 0 {
			t.Fatalf("purging nothing: %d (%v)", n, err)
		}
		if got := log.take(); slices.Contains(got, "t1/plain") || slices.Contains(got, "t1/quiet") {
			t.Errorf("writes that changed no inbox signalled %v", got)
		}
	})
}
