package inbox_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/inbox"
)

func TestFeed(t *testing.T) {
	t.Parallel()
	t.Run("NewestFirstRenderedAndListingNeverMarksRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		ids := b.notify(t, keyA, "user-1", 3)
		tok := b.mint(t, keyA, "user-1")
		for range 2 {
			res := b.do(t, http.MethodGet, "/v1/me/feed", tok, nil)
			var p inbox.Page
			res.decode(t, http.StatusOK, &p)
			if got := pageIDs(p); !equal(got, itemIDs(ids)) || p.NextCursor != nil || p.UnreadCount != 3 {
				t.Fatalf("feed %v next %v unread %d; want %v, null, 3", got, p.NextCursor, p.UnreadCount, itemIDs(ids))
			}
			if !strings.Contains(string(res.body), `"next_cursor":null`) || res.header.Get("Cache-Control") != "no-store" {
				t.Fatalf("body %s, Cache-Control %q", res.body, res.header.Get("Cache-Control"))
			}
			it := p.Items[2]
			if it.NotificationID != ids[0] || it.Kind != "order.shipped" || it.Title != "Your order has shipped" ||
				!strings.HasPrefix(it.Body, "book ") || it.ReadAt != nil || it.ArchivedAt != nil || !it.CreatedAt.Equal(epoch) {
				t.Fatalf("oldest item %+v", it)
			}
		}
		if n := b.badge(t, tok); n != 3 {
			t.Fatalf("after two listings the badge is %d, want 3", n)
		}
	})
	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		b.notify(t, keyA, "user-1", 21)
		tok := b.mint(t, keyA, "user-1")
		if p := b.feed(t, tok, ""); len(p.Items) != inbox.DefaultLimit || p.NextCursor == nil {
			t.Fatalf("default page: %d items, next %v", len(p.Items), p.NextCursor)
		}
		for _, l := range []string{"1", "100"} {
			if p := b.feed(t, tok, "limit="+l); len(p.Items) != min(21, atoi(l)) {
				t.Fatalf("limit %s: %d items", l, len(p.Items))
			}
		}
		for _, l := range []string{"0", "101", "-1", "x", "", "1.5"} {
			if p := wantProblem(t, b.do(t, http.MethodGet, "/v1/me/feed?limit="+l, tok, nil), http.StatusBadRequest); p.Param != "limit" {
				t.Fatalf("limit %q: param %q", l, p.Param)
			}
		}
		// A misspelt or repeated parameter is refused, not read as the
		// default or its first value.
		for query, param := range map[string]string{"limt=5": "limt", "limit=1&limit=5": "limit", "archived=true&archived=false": "archived"} {
			if p := wantProblem(t, b.do(t, http.MethodGet, "/v1/me/feed?"+query, tok, nil), http.StatusBadRequest); p.Param != param {
				t.Fatalf("%s: param %q, want %q", query, p.Param, param)
			}
		}
	})
	t.Run("ATamperedCursorIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		b.notify(t, keyA, "user-1", 3)
		b.notify(t, keyA, "user-2", 3)
		b.notify(t, keyB, "user-1", 3)
		tok := b.mint(t, keyA, "user-1")
		next := func(token string) string {
			t.Helper()
			p := b.feed(t, token, "limit=1")
			if p.NextCursor == nil {
				t.Fatal("no next cursor")
			}
			return *p.NextCursor
		}
		good := next(tok)
		if p := b.feed(t, tok, "limit=1&cursor="+good); len(p.Items) != 1 {
			t.Fatalf("the genuine cursor reads %d items", len(p.Items))
		}
		bad := map[string]string{
			"Truncated":       good[:len(good)-1],
			"Longer":          good + "A",
			"Empty":           "",
			"Padded":          good + "=",
			"NotBase64":       strings.Repeat("!", len(good)),
			"OtherRecipients": next(b.mint(t, keyA, "user-2")),
			"OtherTenants":    next(b.mint(t, keyB, "user-1")),
		}
		for i := range len(good) {
			c := []byte(good)
			c[i] = map[bool]byte{true: 'B', false: 'A'}[c[i] == 'A']
			bad[fmt.Sprintf("Char%d", i)] = string(c)
		}
		for name, c := range bad {
			res := b.do(t, http.MethodGet, "/v1/me/feed?limit=1&cursor="+url.QueryEscape(c), tok, nil)
			if p := wantProblem(t, res, http.StatusBadRequest); p.Param != "cursor" {
				t.Fatalf("%s: param %q", name, p.Param)
			}
		}
	})
	t.Run("ArchivedItemsOnlyWhenAskedAndTheCursorCarriesIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		ids := b.notify(t, keyA, "user-1", 4)
		tok := b.mint(t, keyA, "user-1")
		b.do(t, http.MethodPost, "/v1/me/items/"+itemID(ids[2])+"/archive", tok, nil).decode(t, http.StatusNoContent, nil)
		all := itemIDs(ids)
		without := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == itemID(ids[2]) })
		if got := pageIDs(b.feed(t, tok, "")); !equal(got, without) {
			t.Fatalf("feed %v, want %v without the archived item", got, without)
		}
		for _, q := range []string{"archived=false", "archived=0"} {
			if got := pageIDs(b.feed(t, tok, q)); !equal(got, without) {
				t.Fatalf("%s: %v", q, got)
			}
		}
		// archived=true, a page of one at a time: the cursor keeps it.
		var got []string
		q := "archived=true&limit=1"
		for range 5 {
			p := b.feed(t, tok, q)
			got = append(got, pageIDs(p)...)
			for _, it := range p.Items {
				if (it.ID == itemID(ids[2])) != (it.ArchivedAt != nil) {
					t.Fatalf("item %s archived_at %v", it.ID, it.ArchivedAt)
				}
			}
			if p.NextCursor == nil {
				break
			}
			q = "limit=1&cursor=" + url.QueryEscape(*p.NextCursor)
		}
		if !equal(got, all) {
			t.Fatalf("archived=true paged %v, want %v", got, all)
		}
		// A cursor and an archived that disagree with it.
		p := b.feed(t, tok, "archived=true&limit=1")
		res := b.do(t, http.MethodGet, "/v1/me/feed?archived=false&cursor="+url.QueryEscape(*p.NextCursor), tok, nil)
		if pb := wantProblem(t, res, http.StatusBadRequest); pb.Param != "archived" {
			t.Fatalf("param %q", pb.Param)
		}
		if pb := wantProblem(t, b.do(t, http.MethodGet, "/v1/me/feed?archived=maybe", tok, nil), http.StatusBadRequest); pb.Param != "archived" {
			t.Fatalf("param %q", pb.Param)
		}
	})
	t.Run("ACursorOutlivesAKeyRotationUntilItsKeyIsDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		b.notify(t, keyA, "user-1", 3)
		old := b.feed(t, b.mint(t, keyA, "user-1"), "limit=1").NextCursor
		// Restarted with k2 first (it signs), k1 still listed.
		rotated := setup(t, options{store: b.store, clock: b.clock, keys: map[string][]auth.RecipientKey{
			"a": {{ID: "k2", Secret: secret3}, {ID: "k1", Secret: secret1}}}})
		tok := rotated.mint(t, keyA, "user-1")
		if p := rotated.feed(t, tok, "limit=1&cursor="+url.QueryEscape(*old)); len(p.Items) != 1 || p.NextCursor == nil || *p.NextCursor == *old {
			t.Fatalf("the old cursor under the rotated keys: %v next %v", pageIDs(p), p.NextCursor)
		}
		// k1 dropped: the token k2 signed still reads, the old cursor not.
		dropped := setup(t, options{store: b.store, clock: b.clock, keys: map[string][]auth.RecipientKey{"a": {{ID: "k2", Secret: secret3}}}})
		if p := dropped.feed(t, tok, "limit=1"); len(p.Items) != 1 {
			t.Fatal("the k2 token reads nothing once k1 is dropped")
		}
		wantProblem(t, dropped.do(t, http.MethodGet, "/v1/me/feed?cursor="+url.QueryEscape(*old), tok, nil), http.StatusBadRequest)
	})
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

func TestReadArchiveBadge(t *testing.T) {
	t.Parallel()
	t.Run("ReadAll", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		b.notify(t, keyA, "user-1", 3)
		b.notify(t, keyA, "user-2", 2)
		tok := b.mint(t, keyA, "user-1")
		var bd inbox.Badge
		b.do(t, http.MethodPost, "/v1/me/read", tok, `{"all":true}`).decode(t, http.StatusOK, &bd)
		if bd.UnreadCount != 0 || b.badge(t, tok) != 0 || b.badge(t, b.mint(t, keyA, "user-2")) != 2 {
			t.Fatalf("after all: %d", bd.UnreadCount)
		}
		b.notify(t, keyA, "user-1", 1)
		if n := b.badge(t, tok); n != 1 {
			t.Fatalf("a new item after read all: badge %d", n)
		}
	})
	t.Run("ReadRefusesWhatIsNotOneOfIDsOrAll", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		tok := b.mint(t, keyA, "user-1")
		many := make([]string, inbox.MaxReadIDs+1)
		for i := range many {
			many[i] = fmt.Sprint("id-", i)
		}
		for _, body := range []any{`{}`, `{"all":false}`, `{"ids":[],"all":false}`, `{"ids":["x"],"all":true}`, `{"ids":[]}`,
			`{"ids":[""]}`, map[string]any{"ids": many}, map[string]any{"ids": []string{strings.Repeat("x", 257)}}} {
			wantProblem(t, b.do(t, http.MethodPost, "/v1/me/read", tok, body), http.StatusUnprocessableEntity)
		}
		for _, body := range []string{`{"ids":"x"}`, `{"up_to":1}`, `{"all":true,"up_to_cursor":5}`, `not json`, ``} {
			wantProblem(t, b.do(t, http.MethodPost, "/v1/me/read", tok, body), http.StatusBadRequest)
		}
		wantProblem(t, b.do(t, http.MethodPost, "/v1/me/read", tok, `{"ids":["`+strings.Repeat("x", 70<<10)+`"]}`), http.StatusRequestEntityTooLarge)
		// A read cursor is for read only, a page cursor for pages only, each
		// for its own recipient only.
		b.notify(t, keyA, "user-1", 2)
		b.notify(t, keyA, "user-2", 1)
		page := b.feed(t, tok, "limit=1")
		other := b.feed(t, b.mint(t, keyA, "user-2"), "")
		for name, c := range map[string]string{"PageCursor": *page.NextCursor, "OtherRecipients": *other.ReadCursor,
			"Tampered": (*page.ReadCursor)[:20] + "A" + (*page.ReadCursor)[21:], "Garbage": "x"} {
			if c == *page.ReadCursor {
				continue
			}
			res := b.do(t, http.MethodPost, "/v1/me/read", tok, map[string]any{"all": true, "up_to_cursor": c})
			if p := wantProblem(t, res, http.StatusBadRequest); p.Param != "up_to_cursor" {
				t.Fatalf("%s: param %q", name, p.Param)
			}
		}
		if p := wantProblem(t, b.do(t, http.MethodGet, "/v1/me/feed?cursor="+url.QueryEscape(*page.ReadCursor), tok, nil), http.StatusBadRequest); p.Param != "cursor" {
			t.Fatalf("a read cursor as a page's: param %q", p.Param)
		}
		if p := wantProblem(t, b.do(t, http.MethodPost, "/v1/me/read", tok, map[string]any{"ids": []string{"x"}, "up_to_cursor": *page.ReadCursor}),
			http.StatusUnprocessableEntity); p.Param != "up_to_cursor" {
			t.Fatalf("up_to_cursor without all: param %q", p.Param)
		}
		if n := b.badge(t, tok); n != 2 {
			t.Fatalf("a refused read changed the badge to %d", n)
		}
	})
	t.Run("BadgeFollowsNewItems", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		tok := b.mint(t, keyA, "user-1")
		for i := range 3 {
			if n := b.badge(t, tok); n != int64(i) {
				t.Fatalf("badge %d, want %d", n, i)
			}
			b.notify(t, keyA, "user-1", 1)
		}
	})
}

// The feed's paging, read and archive are store behaviour: they run
// through HTTP on both stores.
func TestFeedReadArchiveOnBothStores(t *testing.T) {
	t.Parallel()
	for _, d := range drivers {
		for _, c := range []struct {
			name string
			run  func(t *testing.T, b *bundle)
		}{
			{"PagingNeverSkipsOrRepeatsWhileItemsArrive", testPaging},
			{"ReadByIDs", testReadByIDs},
			{"Archive", testArchive},
			{"ReadUpToACursorLeavesLaterItemsUnread", testReadUpTo},
		} {
			t.Run(d.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				clk := clock.NewFake(epoch)
				c.run(t, setup(t, options{store: d.open(t, clk), clock: clk}))
			})
		}
	}
}

func testPaging(t *testing.T, b *bundle) {
	ids := b.notify(t, keyA, "user-1", 7)
	tok := b.mint(t, keyA, "user-1")
	var seen []string
	query := "limit=3"
	for page := 0; ; page++ {
		p := b.feed(t, tok, query)
		seen = append(seen, pageIDs(p)...)
		// Two new items commit between every two pages.
		b.notify(t, keyA, "user-1", 2)
		if p.NextCursor == nil {
			break
		}
		if page > 5 {
			t.Fatal("the feed did not end")
		}
		query = "limit=3&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	if !equal(seen, itemIDs(ids)) {
		t.Fatalf("paged %v, want exactly %v", seen, itemIDs(ids))
	}
	// A new first page starts at the newest.
	if p := b.feed(t, tok, "limit=1"); len(p.Items) != 1 || slices.Contains(itemIDs(ids), p.Items[0].ID) || p.UnreadCount != 7+2*3 {
		t.Fatalf("first page again: %v unread %d", pageIDs(p), p.UnreadCount)
	}
}

func testReadByIDs(t *testing.T, b *bundle) {
	ids := b.notify(t, keyA, "user-1", 4)
	other := b.notify(t, keyA, "user-2", 1)
	tok, tok2 := b.mint(t, keyA, "user-1"), b.mint(t, keyA, "user-2")
	b.clock.Advance(time.Minute)
	var bd inbox.Badge
	// Another recipient's id and an unknown one are ignored.
	body := map[string]any{"ids": []string{itemID(ids[0]), itemID(ids[1]), itemID(other[0]), "nope"}}
	b.do(t, http.MethodPost, "/v1/me/read", tok, body).decode(t, http.StatusOK, &bd)
	if bd.UnreadCount != 2 || b.badge(t, tok) != 2 || b.badge(t, tok2) != 1 {
		t.Fatalf("after reading two: %d (badge %d), user-2 %d", bd.UnreadCount, b.badge(t, tok), b.badge(t, tok2))
	}
	readAt := b.clock.Now()
	// Again, later: the same count, the first read_at kept.
	b.clock.Advance(time.Minute)
	b.do(t, http.MethodPost, "/v1/me/read", tok, body).decode(t, http.StatusOK, &bd)
	if bd.UnreadCount != 2 {
		t.Fatalf("reading them again: %d", bd.UnreadCount)
	}
	for _, it := range b.feed(t, tok, "").Items {
		read := it.ID == itemID(ids[0]) || it.ID == itemID(ids[1])
		if read != (it.ReadAt != nil) || read && !it.ReadAt.Equal(readAt) {
			t.Fatalf("item %s read_at %v, want read %v at %s", it.ID, it.ReadAt, read, readAt)
		}
	}
}

func testArchive(t *testing.T, b *bundle) {
	ids := b.notify(t, keyA, "user-1", 3)
	other := b.notify(t, keyA, "user-2", 1)
	tok := b.mint(t, keyA, "user-1")
	for range 2 { // archiving again is still 204
		b.do(t, http.MethodPost, "/v1/me/items/"+itemID(ids[1])+"/archive", tok, nil).decode(t, http.StatusNoContent, nil)
		if n := b.badge(t, tok); n != 2 {
			t.Fatalf("after archiving an unread item the badge is %d, want 2", n)
		}
	}
	for _, id := range []string{itemID(other[0]), "nope", ids[0], strings.Repeat("x", 300)} {
		wantProblem(t, b.do(t, http.MethodPost, "/v1/me/items/"+id+"/archive", tok, nil), http.StatusNotFound)
	}
	if n := b.badge(t, b.mint(t, keyA, "user-2")); n != 1 {
		t.Fatalf("user-2's item was archived: badge %d", n)
	}
	// A read item archived leaves the badge as it is.
	b.do(t, http.MethodPost, "/v1/me/read", tok, map[string]any{"ids": []string{itemID(ids[0])}}).decode(t, http.StatusOK, nil)
	b.do(t, http.MethodPost, "/v1/me/items/"+itemID(ids[0])+"/archive", tok, nil).decode(t, http.StatusNoContent, nil)
	if n := b.badge(t, tok); n != 1 {
		t.Fatalf("badge %d, want 1", n)
	}
}

func testReadUpTo(t *testing.T, b *bundle) {
	ids := b.notify(t, keyA, "user-1", 3)
	tok := b.mint(t, keyA, "user-1")
	seen := b.feed(t, tok, "limit=2") // the app shows the two newest
	if seen.ReadCursor == nil {
		t.Fatal("no read_cursor")
	}
	later := b.notify(t, keyA, "user-1", 2) // arrive after the app's sync
	var bd inbox.Badge
	b.do(t, http.MethodPost, "/v1/me/read", tok, map[string]any{"all": true, "up_to_cursor": *seen.ReadCursor}).decode(t, http.StatusOK, &bd)
	if bd.UnreadCount != 2 {
		t.Fatalf("unread after reading up to the cursor: %d, want the 2 later items", bd.UnreadCount)
	}
	for _, it := range b.feed(t, tok, "").Items {
		if read := it.ReadAt != nil; read != !slices.Contains(itemIDs(later), it.ID) {
			t.Fatalf("item %s read %v; want the %d items up to the cursor read, the later ones not (ids %v)", it.ID, read, len(ids), itemIDs(ids))
		}
	}
	// An empty page has none.
	if p := b.feed(t, b.mint(t, keyA, "nobody"), ""); p.ReadCursor != nil || p.NextCursor != nil {
		t.Fatalf("an empty page: read_cursor %v, next_cursor %v", p.ReadCursor, p.NextCursor)
	}
}
