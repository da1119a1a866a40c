package storetest

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// secret is the person's words in every erasure test: what must be gone
// from every table afterwards.
const secret = "Kim-Minji-010-1234"

// eraseAll runs RecipientErase batch after batch until Next is nil, and
// returns the batches' results.
func eraseAll(t *testing.T, b bundle, tenant, recipient string, limit int) []store.RecipientEraseResult {
	t.Helper()
	p := store.RecipientEraseParams{Tenant: tenant, Recipient: recipient, Limit: limit}
	var out []store.RecipientEraseResult
	for range 1000 {
		res, err := b.s.RecipientErase(b.ctx, p)
		if err != nil {
			t.Fatalf("RecipientErase (batch %d): %v", len(out)+1, err)
		}
		out = append(out, res)
		if res.Next == nil {
			return out
		}
		p.After = res.Next
	}
	t.Fatal("RecipientErase did not end in 1000 batches")
	return nil
}

// eraseTotals sums batches.
func eraseTotals(rs []store.RecipientEraseResult) (sum store.RecipientEraseResult) {
	for _, r := range rs {
		sum.Profile = sum.Profile || r.Profile
		sum.Devices += r.Devices
		sum.Notifications += r.Notifications
		sum.InboxItems += r.InboxItems
		sum.Suppressed = append(sum.Suppressed, r.Suppressed...)
	}
	return sum
}

// countRows runs a count query through the harness.
func countRows(t *testing.T, h Harness, b bundle, query string) int {
	t.Helper()
	rows := h.Query(t, b.s, query)
	if len(rows) != 1 || len(rows[0]) != 1 {
		t.Fatalf("%s: %v, want one value", query, rows)
	}
	var n int
	if _, err := fmt.Sscan(rows[0][0], &n); err != nil {
		t.Fatalf("%s: %q is not a number", query, rows[0][0])
	}
	return n
}

// wordsAt are the columns that can hold a person's words (package erasure
// lists each with what an erasure does with it), each with the condition
// (%s: the recipient) that picks whose they are.
var wordsAt = []struct{ table, column, whose string }{
	{"profiles", "data", "recipient = '%s'"},
	{"devices", "token", "recipient = '%s'"},
	{"inbox_items", "title", "recipient = '%s'"},
	{"inbox_items", "body", "recipient = '%s'"},
	{"notifications", "params", "recipient = '%s'"},
	{"parked_discards", "reason", "message_id IN (SELECT o.message_id FROM outbox o JOIN notifications n ON n.id = o.notification_id WHERE n.recipient = '%s')"},
}

// holding counts, per column of wordsAt, the rows of recipient (tenant t1)
// whose text holds secret.
func holding(t *testing.T, h Harness, b bundle, recipient string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, w := range wordsAt {
		q := fmt.Sprintf("SELECT count(*) FROM %s WHERE %s AND CAST(%s AS TEXT) LIKE '%%%s%%'", w.table, fmt.Sprintf(w.whose, recipient), w.column, secret)
		out[w.table+"."+w.column] = countRows(t, h, b, q)
	}
	return out
}

func testErasure(t *testing.T, h Harness) {
	// fill gives recipient a profile, two devices, and notifications with
	// the secret in their params and sends in every state an erasure
	// meets, and inbox items (one read); it returns the notifications'
	// ids by what their send was left in.
	fill := func(t *testing.T, b bundle, recipient string) map[string]string {
		t.Helper()
		if err := b.s.ProfilePut(b.ctx, store.Profile{Tenant: "t1", Recipient: recipient,
			Addresses: map[heraldtype.Channel]string{heraldtype.ChannelSMS: secret}}); err != nil {
			t.Fatal(err)
		}
		putDevice(t, b, recipient, secret+"-phone", store.PlatformFCM)
		putDevice(t, b, recipient, secret+"-tablet", store.PlatformAPNs)
		params := json.RawMessage(`{"name":"` + secret + `"}`)
		sends := map[string]string{}
		for _, state := range []string{"accepted", "sending", "retry", "parked", "discarded", "pending"} {
			b.clk.Advance(time.Millisecond)
			p, _ := create(t, b, func(p *store.NotificationCreateParams) { p.Recipient, p.Params = recipient, params })
			sends[state] = p.ID
			c := sendClaim(p.ID)
			mid := c.MessageID
			switch state {
			case "accepted", "sending", "retry":
				if !claimDelivery(t, b, c).Claimed {
					t.Fatalf("claim %s", mid)
				}
				switch state {
				case "accepted":
					record(t, b, mid, 1, heraldtype.DeliveryProviderAccepted, 0)
				case "retry":
					record(t, b, mid, 1, heraldtype.DeliveryRetryWait, time.Minute)
				}
			case "parked", "discarded":
				if ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: mid, NotificationID: p.ID, Tenant: "t1",
					Channel: heraldtype.ChannelWebhook, State: heraldtype.DeliveryParked, Reason: heraldtype.ReasonTemplateFailed}); err != nil || !ok {
					t.Fatalf("park %s: %v %v", mid, ok, err)
				}
				if state == "discarded" && !discard(t, b, store.ParkedDiscardParams{Tenant: "t1", MessageID: mid,
					Reason: "customer " + secret + " asked us to stop", Actor: "api:t1"}) {
					t.Fatalf("discard %s", mid)
				}
			}
		}
		for i := range 3 {
			b.clk.Advance(time.Millisecond)
			p := inboxCreate(t, b, "t1", recipient, func(p *store.NotificationCreateParams) {
				p.Params, p.Channels = params, []heraldtype.Channel{heraldtype.ChannelInbox}
				p.Inbox = []store.InboxText{{Title: fmt.Sprintf("Hello %s %d", secret, i), Body: "Dear " + secret}}
			})
			sends[fmt.Sprintf("inbox%d", i)] = p.ID
			if i == 0 {
				markRead(t, b, "t1", recipient, store.MessageID(p.ID, heraldtype.ChannelInbox))
			}
		}
		return sends
	}

	t.Run("ErasesTheWordsAndKeepsTheAccounting", func(t *testing.T) {
		t.Parallel()
		if h.Query == nil {
			t.Skip("the harness has no Query")
		}
		b := setup(t, h)
		gone := fill(t, b, "r-gone")
		fill(t, b, "r-stays")
		before := holding(t, h, b, "r-gone")
		for col, n := range before {
			if n == 0 {
				t.Fatalf("before the erasure %s holds no row with the secret: the test would prove nothing (%v)", col, before)
			}
		}
		stays := holding(t, h, b, "r-stays")
		goneSeq, staysSeq := badge(t, b, "t1", "r-gone").Seq, badge(t, b, "t1", "r-stays").Seq

		// Batches of 2 over 9 notifications and 3 inbox items: several
		// transactions, each its own.
		batches := eraseAll(t, b, "t1", "r-gone", 2)
		if len(batches) < 5 {
			t.Errorf("%d batches over 9 notifications of limit 2, want at least 5", len(batches))
		}
		sum := eraseTotals(batches)
		if !sum.Profile || sum.Devices != 2 || sum.Notifications != 9 || sum.InboxItems != 3 {
			t.Errorf("erased %+v, want the profile, 2 devices, 9 notifications, 3 inbox items", sum)
		}
		suppressed := map[string]bool{}
		for _, s := range sum.Suppressed {
			suppressed[s.MessageID] = true
			if s.Lane != heraldtype.LaneTransactional || s.Channel != heraldtype.ChannelWebhook {
				t.Errorf("suppressed %+v: want lane transactional, channel webhook", s)
			}
		}
		if len(sum.Suppressed) != 3 {
			t.Errorf("suppressed %v, want the retry, the parked and the pending send", sum.Suppressed)
		}

		// The tables: no word of the person's is left, the other
		// recipient's are all there.
		for col, n := range holding(t, h, b, "r-gone") {
			if n != 0 {
				t.Errorf("after the erasure %d rows of %s still hold the person's words", n, col)
			}
		}
		if got := holding(t, h, b, "r-stays"); fmt.Sprint(got) != fmt.Sprint(stays) {
			t.Errorf("the other recipient's rows changed: %v, were %v", got, stays)
		}
		for _, q := range []struct {
			query string
			want  int
		}{
			{"SELECT count(*) FROM profiles WHERE recipient = 'r-gone'", 0},
			{"SELECT count(*) FROM devices WHERE recipient = 'r-gone'", 0},
			{"SELECT count(*) FROM inbox_items WHERE recipient = 'r-gone'", 0},
			{"SELECT count(*) FROM notifications WHERE recipient = 'r-gone' AND CAST(params AS TEXT) = '{}' AND erased_at IS NOT NULL", 9},
			{"SELECT count(*) FROM notifications WHERE recipient = 'r-stays' AND erased_at IS NULL", 9},
			// Accounting stays: every planned send's outbox row and every
			// delivery row, with its state and reason code, and the three
			// inbox sends, STORED, in their notifications' inbox_at
			// (store.WithInboxSend).
			{"SELECT count(*) FROM outbox o JOIN notifications n ON n.id = o.notification_id WHERE n.recipient = 'r-gone'", 6},
			{"SELECT count(*) FROM deliveries d JOIN notifications n ON n.id = d.notification_id WHERE n.recipient = 'r-gone'", 6},
			{"SELECT count(*) FROM notifications WHERE recipient = 'r-gone' AND inbox_at = 1", 3},
			{"SELECT count(*) FROM parked_discards WHERE reason = 'ERASED' AND parked_reason = 'TEMPLATE_FAILED'", 1},
			// The counter row stays with its seq; nothing is unread.
			{fmt.Sprintf("SELECT count(*) FROM inbox_counters WHERE recipient = 'r-gone' AND unread = 0 AND seq = %d", goneSeq), 1},
			{fmt.Sprintf("SELECT count(*) FROM inbox_counters WHERE recipient = 'r-stays' AND unread = 2 AND seq = %d", staysSeq), 1},
		} {
			if n := countRows(t, h, b, q.query); n != q.want {
				t.Errorf("%s = %d, want %d", q.query, n, q.want)
			}
		}

		// Each send's state: waiting ones ended SUPPRESSED(ERASED), the
		// rest as they were (SENDING is not stopped).
		for state, want := range map[string]string{
			"accepted": "PROVIDER_ACCEPTED/", "sending": "SENDING/", "retry": "SUPPRESSED/ERASED",
			"parked": "SUPPRESSED/ERASED", "discarded": "SUPPRESSED/DISCARDED", "pending": "SUPPRESSED/ERASED",
			"inbox0": "STORED/STORED",
		} {
			mid := store.MessageID(gone[state], heraldtype.ChannelWebhook)
			if state == "inbox0" {
				mid = store.MessageID(gone[state], heraldtype.ChannelInbox)
			}
			d := delivery(t, b, mid)
			if got := string(d.State) + "/" + d.Reason; got != want {
				t.Errorf("%s send: %s, want %s", state, got, want)
			}
			if (want == "SUPPRESSED/ERASED") != suppressed[mid] {
				t.Errorf("%s send: reported suppressed %v", state, suppressed[mid])
			}
		}
		for _, c := range []struct {
			id   string
			want bool
		}{{gone["sending"], true}, {gone["inbox2"], true}, {"ntf_unknown", false}} {
			if got, err := b.s.NotificationErased(b.ctx, c.id); err != nil || got != c.want {
				t.Errorf("NotificationErased(%s) = %v, %v; want %v", c.id, got, err, c.want)
			}
		}
		if _, err := b.s.ProfileGet(b.ctx, "t1", "r-gone"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ProfileGet after the erasure: %v, want ErrNotFound", err)
		}
		if bd := badge(t, b, "t1", "r-gone"); bd.Unread != 0 || bd.Seq != goneSeq {
			t.Errorf("badge after the erasure %+v, want 0 unread at seq %d", bd, goneSeq)
		}
		if bd := badge(t, b, "t1", "r-stays"); bd.Unread != 2 {
			t.Errorf("the other recipient's badge %+v, want 2 unread", bd)
		}
		// A new item after the erasure takes the next seq, never a used one.
		inboxCreate(t, b, "t1", "r-gone", nil)
		if bd := badge(t, b, "t1", "r-gone"); bd.Unread != 1 || bd.Seq <= goneSeq {
			t.Errorf("badge after a new item %+v, want 1 unread at a seq after %d", bd, goneSeq)
		}
	})

	t.Run("ErasingAgainFindsNothingLeft", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		fill(t, b, "r-gone")
		eraseAll(t, b, "t1", "r-gone", 500)
		again := eraseAll(t, b, "t1", "r-gone", 500)
		if sum := eraseTotals(again); len(again) != 1 || sum.Profile || sum.Devices != 0 || sum.Notifications != 0 ||
			sum.InboxItems != 0 || len(sum.Suppressed) != 0 {
			t.Errorf("erasing again: %d batches, %+v; want one batch that erased nothing", len(again), sum)
		}
		if res := recount(t, b, store.InboxRecountParams{Tenant: "t1", Recipient: "r-gone"}); res.Repaired != 0 {
			t.Errorf("the erasure left the counter wrong: %+v", res)
		}
	})

	t.Run("AnUnknownRecipientIsHarmless", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		fill(t, b, "r-stays")
		got := eraseAll(t, b, "t1", "nobody", 500)
		if sum := eraseTotals(got); sum.Profile || sum.Devices != 0 || sum.Notifications != 0 || sum.InboxItems != 0 {
			t.Errorf("erasing an unknown recipient: %+v", sum)
		}
		// Same recipient id in another tenant: untouched.
		got = eraseAll(t, b, "t2", "r-stays", 500)
		if sum := eraseTotals(got); sum.Profile || sum.Devices != 0 || sum.Notifications != 0 || sum.InboxItems != 0 {
			t.Errorf("erasing r-stays of another tenant: %+v", sum)
		}
		if bd := badge(t, b, "t1", "r-stays"); bd.Unread != 2 {
			t.Errorf("badge %+v, want 2 unread", bd)
		}
	})

	t.Run("ManyInboxItemsFewNotificationsTakeSeveralBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for range 5 {
			b.clk.Advance(time.Millisecond)
			inboxCreate(t, b, "t1", "r-gone", nil)
		}
		got := eraseAll(t, b, "t1", "r-gone", 2)
		if sum := eraseTotals(got); sum.InboxItems != 5 || sum.Notifications != 5 {
			t.Errorf("erased %+v in %d batches, want 5 items and 5 notifications", sum, len(got))
		}
		if page := feed(t, b, store.InboxFeedParams{Tenant: "t1", Recipient: "r-gone", Limit: 10, Archived: true}); len(page.Items) != 0 || page.Badge.Unread != 0 {
			t.Errorf("feed after the erasure: %d items, badge %+v", len(page.Items), page.Badge)
		}
	})
}

// TextRows runs query on db and returns its rows as a Harness's Query
// does: each column as text, NULL as "NULL". The drivers' harnesses that
// read through database/sql use it.
func TextRows(t testing.TB, db *sql.DB, query string) [][]string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		row := make([]string, len(cols))
		for i, v := range vals {
			row[i] = "NULL"
			if v.Valid {
				row[i] = v.String
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}
