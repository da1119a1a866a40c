package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/storetest"
)

// withInbox makes a create's kind list the inbox beside a webhook, with
// one text named after its id.
func withInbox(recipient string) func(p *store.NotificationCreateParams) {
	return func(p *store.NotificationCreateParams) {
		p.Recipient = recipient
		p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelInbox}
		p.Inbox = []store.InboxText{{Title: p.ID}}
	}
}

// itemTitles lists the recipient's items' titles (the creates' ids), by seq.
func itemTitles(t *testing.T, s *Store, recipient string) []string {
	t.Helper()
	items, err := s.InboxItemsAfter(context.Background(), "t1", recipient, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, it := range items {
		if it.Seq != int64(i+1) {
			t.Fatalf("%s's item %d has seq %d", recipient, i, it.Seq)
		}
		out = append(out, it.Title)
	}
	return out
}

// Inbox creates waiting in one batch run as one merged statement: one
// recipient's items take consecutive seqs in queue order from one bump of
// its counter, each recipient's counter counts its own, and a replay or a
// dedup hit in the batch adds no item.
func TestMergedCreatesWriteInboxItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{PipelineWorkers: 1})
	replayed := params(withInbox("r1"))
	mustCreate(t, s, replayed)
	if err := s.ProfilePut(ctx, store.Profile{Tenant: "t1", Recipient: "r3", Language: "ko"}); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	s.languageRead = func() { reads.Add(1) }
	batch := []store.NotificationCreateParams{
		params(func(p *store.NotificationCreateParams) { // its text by r3's language, checked in the merged statement
			withInbox("r3")(p)
			p.Inbox = []store.InboxText{{Locale: "default", Title: "Paid"}, {Locale: "ko", Title: "결제 완료"}}
		}),
		params(withInbox("r1")),
		params(withInbox("r2")),
		params(nil), // r1, no inbox
		replayed,
		params(withInbox("r1")),
		params(func(p *store.NotificationCreateParams) { withInbox("r2")(p); p.IdempotencyKey, p.DedupKey = "", "d" }),
		params(func(p *store.NotificationCreateParams) { withInbox("r2")(p); p.IdempotencyKey, p.DedupKey = "", "d" }),
		params(withInbox("r1")),
	}
	var merged []int
	var mu sync.Mutex
	s.pipe.merged = func(n int) { mu.Lock(); merged = append(merged, n); mu.Unlock() }
	s.pipe.rerun = func(n int) { t.Errorf("a batch of %d was rerun statement by statement", n) }
	queued, release := hold(t, s.pipe, s.pool, 4344)
	done := make(chan error, len(batch))
	for i, p := range batch {
		go func() { _, err := s.NotificationCreate(ctx, p); done <- err }()
		storetest.Receive(t, queued, fmt.Sprintf("create %d was queued", i))
	}
	release()
	for range batch {
		if err := storetest.Receive(t, done, "a create returned"); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if !slices.Equal(merged, []int{len(batch)}) {
		t.Fatalf("merged statements stood for %v creates, want one for %d", merged, len(batch))
	}
	mu.Unlock()
	if got, want := itemTitles(t, s, "r1"), []string{replayed.ID, batch[1].ID, batch[5].ID, batch[8].ID}; !slices.Equal(got, want) {
		t.Errorf("r1's items %v, want %v", got, want)
	}
	if got, want := itemTitles(t, s, "r2"), []string{batch[2].ID, batch[6].ID}; !slices.Equal(got, want) {
		t.Errorf("r2's items %v, want %v", got, want)
	}
	if got := itemTitles(t, s, "r3"); !slices.Equal(got, []string{"결제 완료"}) || reads.Load() != 1 {
		t.Errorf("r3's items %v after %d reads of its language, want the Korean text after one", got, reads.Load())
	}
	for r, want := range map[string]store.InboxBadge{"r1": {Unread: 4, Seq: 4}, "r2": {Unread: 2, Seq: 2}} {
		if b, err := s.InboxBadge(ctx, "t1", r); err != nil || b != want {
			t.Errorf("%s's badge %+v (%v), want %+v", r, b, err, want)
		}
	}
	v, err := s.NotificationGet(ctx, "t1", batch[5].ID)
	if err != nil || len(v.Deliveries) != 2 {
		t.Fatalf("view %+v (%v)", v, err)
	}
	if st, _, _ := v.EntryState(v.Deliveries[1]); st != string(heraldtype.DeliveryStored) || v.Deliveries[1].OutboxState != heraldtype.OutboxDone {
		t.Errorf("the merged create's inbox entry %+v, want STORED and its outbox row DONE", v.Deliveries[1])
	}
}

// CreateTx writes the inbox item in the caller's transaction, in the
// text for the profile's language as that transaction reads it; its commit
// NOTIFYs the inbox channel, so the store's listener signals the inbox;
// a rollback leaves no item and no signal.
func TestCreateTxWritesTheInboxItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, _ := enqueueSetup(t)
	signals := make(chan string, 100)
	t.Cleanup(s.InboxSignals().Watch(signalLog(signals)))
	waitFor(t, 10*time.Second, "the listener is connected", s.listening.Load)
	texts := []store.InboxText{{Locale: "default", Title: "Booked"}, {Locale: "ko", Title: "예약 완료"}}
	inbox := func(p *store.NotificationCreateParams) {
		p.Channels = append(p.Channels, heraldtype.ChannelInbox)
		p.Inbox = texts
	}

	tx := begin(t, pool)
	createIn(t, tx, intent("booking-44:confirmed", inbox))
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.ProfilePut(ctx, store.Profile{Tenant: "clinic-7", Recipient: "patient-1", Language: "ko-KR"}); err != nil {
		t.Fatal(err)
	}
	tx = begin(t, pool)
	p := intent("booking-45:confirmed", inbox)
	createIn(t, tx, p)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for heard := false; !heard; {
		select {
		case got := <-signals:
			heard = got == "clinic-7/patient-1"
		case <-deadline:
			t.Fatal("the commit was not signalled within 10s")
		}
	}
	items, err := s.InboxItemsAfter(ctx, "clinic-7", "patient-1", 0, 10)
	if err != nil || len(items) != 1 || items[0].Seq != 1 || items[0].Title != "예약 완료" || items[0].NotificationID != p.ID {
		t.Fatalf("items %+v (%v), want the committed one alone, in Korean, at seq 1", items, err)
	}
	v, err := s.NotificationGet(ctx, "clinic-7", p.ID)
	if err != nil || len(v.Deliveries) != 3 {
		t.Fatalf("view %+v (%v)", v, err)
	}
	if st, reason, _ := v.EntryState(v.Deliveries[2]); st != "STORED" || reason != heraldtype.ReasonStored {
		t.Errorf("inbox entry %s/%s, want STORED", st, reason)
	}
	claimed, err := s.OutboxClaim(ctx, store.OutboxClaimParams{Lane: heraldtype.LaneTransactional, Owner: "w", Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claimed %d (%v), want the sms and push rows alone", len(claimed), err)
	}
}

// A create whose inbox text depends on the profile language chooses it by
// the language read just before its statement, which writes it only if
// that is still the language: changed in between, the create writes
// nothing, reads the language again and writes the new language's text.
func TestInboxLanguageChangedBeforeTheStatementIsChosenAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{})
	profile := func(lang string) {
		t.Helper()
		if err := s.ProfilePut(ctx, store.Profile{Tenant: "t1", Recipient: "r1", Language: lang}); err != nil {
			t.Fatal(err)
		}
	}
	profile("ko")
	reads := 0
	s.languageRead = func() {
		if reads++; reads == 1 {
			profile("fr") // after the text was chosen for ko
		}
	}
	for _, key := range []string{"", "k"} { // the pipeline's statement, and with a dedup key too, createInTx's
		reads = 0
		p := params(withInbox("r1"))
		p.IdempotencyKey, p.DedupKey = key, "d-"+p.ID
		p.Inbox = []store.InboxText{{Locale: "default", Title: "Paid " + key}, {Locale: "ko", Title: "결제 완료 " + key}}
		profile("ko")
		if res, err := s.NotificationCreate(ctx, p); err != nil || res.Outcome != store.Created {
			t.Fatalf("create (key %q): %v %v", key, res.Outcome, err)
		}
		if reads != 2 {
			t.Errorf("key %q: the language was read %d times, want 2", key, reads)
		}
	}
	if got := itemTitles(t, s, "r1"); !slices.Equal(got, []string{"Paid ", "Paid k"}) {
		t.Fatalf("items %v, want the default texts alone (the language was fr at each write)", got)
	}
}
