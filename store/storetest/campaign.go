package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
)

// campaignBundle is a bundle whose store keeps campaigns.
type campaignBundle struct {
	bundle
	c store.Campaigns
}

func setupCampaigns(t *testing.T, h Harness) campaignBundle {
	t.Helper()
	b := setup(t, h)
	c, ok := b.s.(store.Campaigns)
	if !ok {
		t.Skip("the store does not keep campaigns")
	}
	return campaignBundle{bundle: b, c: c}
}

// recipients makes n recipients r<from>… of campaign id, each with a
// notification id of its own: the same recipient, the same id.
func recipients(id string, from, n int) []store.CampaignRecipient {
	out := make([]store.CampaignRecipient, n)
	for i := range out {
		r := fmt.Sprintf("r%d", from+i)
		out[i] = store.CampaignRecipient{Recipient: r, NotificationID: "ntf_" + id[4:] + "_" + r}
	}
	return out
}

// newCampaign creates a DRAFT campaign of tenant t1 with rs; mutate adjusts
// the params. Any error fails the test.
func newCampaign(t *testing.T, b campaignBundle, rs func(id string) []store.CampaignRecipient, mutate func(p *store.CampaignCreateParams)) store.CampaignCreateParams {
	t.Helper()
	id := ids.New("cmp", b.clk.Now())
	p := store.CampaignCreateParams{ID: id, Tenant: "t1", IdempotencyKey: "key-" + id, RequestHash: "h1", Kind: "k",
		Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook}, Params: json.RawMessage(`{"a":1}`)}
	if rs != nil {
		p.Recipients = rs(id)
	}
	if mutate != nil {
		mutate(&p)
	}
	res, err := b.c.CampaignCreate(b.ctx, p)
	if err != nil || res.Outcome != store.Created || res.ID != id {
		t.Fatalf("CampaignCreate = %+v, %v; want Created %s", res, err, id)
	}
	return p
}

// newestFirst is the ids of ps in a listing's order, (CreatedAt, ID)
// descending: in one instant the greater id first.
func newestFirst(ps []store.ListPosition) []string {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(x, y store.ListPosition) int {
		return cmp.Or(y.CreatedAt.Compare(x.CreatedAt), strings.Compare(y.ID, x.ID))
	})
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

// walkPages walks a listing in pages of size, each read by next after the
// last item of the page before (nil for the first), and returns each
// item's id, in order; it fails the test when the walk does not end
// within a few pages.
func walkPages[T any](t *testing.T, size int, next func(last *T) ([]T, error), id func(T) string) []string {
	t.Helper()
	var got []string
	var last *T
	for pages := 0; ; pages++ {
		page, err := next(last)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page {
			got = append(got, id(item))
		}
		if len(page) < size {
			return got
		}
		if pages > 5 {
			t.Fatalf("paging does not end: %v", got)
		}
		last = &page[len(page)-1]
	}
}

// addPage adds rs to tenant's campaign id under the cap max (0: none).
func addPage(b campaignBundle, tenant, id string, rs []store.CampaignRecipient, max int64) (int, error) {
	return b.c.CampaignAddRecipients(b.ctx, store.CampaignAddParams{Tenant: tenant, ID: id, Recipients: rs, MaxRecipients: max})
}

func startCampaign(t *testing.T, b campaignBundle, id string) store.Campaign {
	t.Helper()
	c, err := b.c.CampaignStart(b.ctx, "t1", id)
	if err != nil {
		t.Fatalf("CampaignStart: %v", err)
	}
	return c
}

func fanOut(t *testing.T, b campaignBundle, id string, limit int) store.CampaignFanOutResult {
	t.Helper()
	res, err := b.c.CampaignFanOut(b.ctx, store.CampaignFanOutParams{Tenant: "t1", ID: id, Limit: limit})
	if err != nil {
		t.Fatalf("CampaignFanOut: %v", err)
	}
	return res
}

func getCampaign(t *testing.T, b campaignBundle, id string) store.Campaign {
	t.Helper()
	c, err := b.c.CampaignGet(b.ctx, "t1", id)
	if err != nil {
		t.Fatalf("CampaignGet: %v", err)
	}
	return c
}

// campaignNotifications reads how many notifications each recipient of
// the campaign has (through the harness's Query).
func campaignNotifications(t *testing.T, h Harness, b campaignBundle, id string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, row := range h.Query(t, b.s, "SELECT recipient, count(*) FROM notifications WHERE campaign_id = '"+id+"' GROUP BY recipient") {
		var n int
		fmt.Sscan(row[1], &n)
		out[row[0]] = n
	}
	return out
}

// campaignRecipientRows reads the campaign's recipients as stored.
func campaignRecipientRows(t *testing.T, h Harness, b campaignBundle, id string) [][]string {
	t.Helper()
	return h.Query(t, b.s, "SELECT recipient FROM campaign_recipients WHERE campaign_id = '"+id+"'")
}

func testCampaigns(t *testing.T, h Harness) {
	t.Run("PagesAreIdempotentPerRecipientAndTotalIsKept", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 3) }, nil)
		n, err := addPage(b, "t1", p.ID, recipients(p.ID, 2, 4), 0) // r2, r3 again; r4, r5 new
		if err != nil || n != 2 {
			t.Fatalf("CampaignAddRecipients = %d, %v; want 2 new", n, err)
		}
		n, err = addPage(b, "t1", p.ID, recipients(p.ID, 1, 5), 0)
		if err != nil || n != 0 {
			t.Fatalf("the same page again = %d, %v; want 0 new", n, err)
		}
		c := getCampaign(t, b, p.ID)
		if c.State != store.CampaignDraft || c.Total != 5 || c.Enqueued != 0 || c.Kind != "k" || c.Lane != heraldtype.LaneMarketing {
			t.Fatalf("campaign = %+v; want DRAFT, total 5, enqueued 0", c)
		}
		if _, err := b.c.CampaignGet(b.ctx, "t2", p.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's CampaignGet: %v; want ErrNotFound", err)
		}
		if _, err := addPage(b, "t2", p.ID, recipients(p.ID, 9, 1), 0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's page: %v; want ErrNotFound", err)
		}
	})

	t.Run("CapRefusesAPageWholeAndCountsOnlyNewRecipients", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		id := ids.New("cmp", b.clk.Now())
		if _, err := b.c.CampaignCreate(b.ctx, store.CampaignCreateParams{ID: id, Tenant: "t1", IdempotencyKey: "key-" + id, RequestHash: "h1",
			Kind: "k", Lane: heraldtype.LaneMarketing, Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
			Recipients: recipients(id, 1, 3), MaxRecipients: 2}); !errors.Is(err, store.ErrCampaignFull) {
			t.Fatalf("a create whose first page is past the cap: %v; want ErrCampaignFull", err)
		}
		if _, err := b.c.CampaignGet(b.ctx, "t1", id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused create wrote its campaign: %v", err)
		}
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 3) }, func(p *store.CampaignCreateParams) { p.MaxRecipients = 5 })
		// r3 again and r4..r6 new: 6 > 5, refused whole (r4 and r5 would fit).
		if n, err := addPage(b, "t1", p.ID, recipients(p.ID, 3, 4), 5); !errors.Is(err, store.ErrCampaignFull) || n != 0 {
			t.Fatalf("a page past the cap = %d, %v; want 0, ErrCampaignFull", n, err)
		}
		if c := getCampaign(t, b, p.ID); c.Total != 3 {
			t.Fatalf("total after the refused page = %d; want 3 (nothing of it written)", c.Total)
		}
		if n, err := addPage(b, "t1", p.ID, recipients(p.ID, 2, 4), 5); err != nil || n != 2 { // r2, r3 again; r4, r5 new: exactly 5
			t.Fatalf("a page up to the cap = %d, %v; want 2 new", n, err)
		}
		if n, err := addPage(b, "t1", p.ID, recipients(p.ID, 1, 5), 5); err != nil || n != 0 {
			t.Fatalf("a page sent again at the cap = %d, %v; want 0 new, accepted", n, err)
		}
		if n, err := addPage(b, "t1", p.ID, recipients(p.ID, 6, 1), 0); err != nil || n != 1 {
			t.Fatalf("a page without a cap = %d, %v; want 1 new", n, err)
		}
		if got := len(campaignRecipientRows(t, h, b, p.ID)); got != 6 {
			t.Fatalf("%d recipient rows; want 6", got)
		}
	})

	t.Run("CapHoldsAgainstPagesAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, nil, nil)
		// Eight pages of two new recipients each at once, cap 5: whatever
		// the order, two fit (4) and a third would make 6, so exactly two
		// are added and six refused.
		const pages = 8
		errs := make(chan error, pages)
		start := make(chan struct{})
		for i := range pages {
			go func() {
				<-start
				_, err := addPage(b, "t1", p.ID, recipients(p.ID, 1+2*i, 2), 5)
				errs <- err
			}()
		}
		close(start)
		added, full := 0, 0
		for range pages {
			switch err := <-errs; {
			case err == nil:
				added++
			case errors.Is(err, store.ErrCampaignFull):
				full++
			default:
				t.Errorf("a page: %v", err)
			}
		}
		c := getCampaign(t, b, p.ID)
		if added != 2 || full != pages-2 || c.Total != 4 || len(campaignRecipientRows(t, h, b, p.ID)) != 4 {
			t.Fatalf("%d pages added, %d refused, total %d; want 2, %d, 4", added, full, c.Total, pages-2)
		}
	})

	t.Run("SameKeyReplaysOtherBodyConflicts", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, nil, nil)
		again := p
		again.ID = ids.New("cmp", b.clk.Now())
		res, err := b.c.CampaignCreate(b.ctx, again)
		if err != nil || res.Outcome != store.Replayed || res.ID != p.ID {
			t.Fatalf("same key and hash = %+v, %v; want Replayed %s", res, err, p.ID)
		}
		again.RequestHash = "h2"
		if res, err = b.c.CampaignCreate(b.ctx, again); err != nil || res.Outcome != store.Conflict {
			t.Fatalf("same key, other hash = %+v, %v; want Conflict", res, err)
		}
		if _, err := b.c.CampaignGet(b.ctx, "t1", again.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the replay wrote campaign %s: %v", again.ID, err)
		}
	})

	t.Run("FanOutWritesEachRecipientOnceInBatches", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient {
			rs := recipients(id, 1, 5)
			rs[1].Params = json.RawMessage(`{"a":2,"b":"x"}`)
			return rs
		}, nil)
		if _, err := b.c.CampaignFanOut(b.ctx, store.CampaignFanOutParams{Tenant: "t1", ID: p.ID, Limit: 2}); err != nil {
			t.Fatalf("CampaignFanOut of a DRAFT campaign: %v", err)
		}
		if c := getCampaign(t, b, p.ID); c.Enqueued != 0 {
			t.Fatalf("a DRAFT campaign was fanned out: %+v", c)
		}
		if c := startCampaign(t, b, p.ID); c.State != store.CampaignRunning || c.StartedAt == nil {
			t.Fatalf("started campaign = %+v; want RUNNING with started_at", c)
		}
		if _, err := addPage(b, "t1", p.ID, recipients(p.ID, 6, 1), 0); !errors.Is(err, store.ErrCampaignState) {
			t.Fatalf("a page after start: %v; want ErrCampaignState", err)
		}
		refs, err := b.c.CampaignsRunning(b.ctx, nil, 10)
		if err != nil || len(refs) != 1 || refs[0] != (store.CampaignRef{Tenant: "t1", ID: p.ID, Lane: heraldtype.LaneMarketing, Started: b.clk.Now()}) {
			t.Fatalf("CampaignsRunning = %+v, %v; want the campaign", refs, err)
		}
		var batches []int
		for {
			res := fanOut(t, b, p.ID, 2)
			if res.Notifications != res.Recipients || res.Outbox != res.Recipients {
				t.Fatalf("batch = %+v; want one notification and one outbox row per recipient", res)
			}
			batches = append(batches, res.Recipients)
			if c := getCampaign(t, b, p.ID); c.Enqueued != int64(sum(batches)) {
				t.Fatalf("enqueued %d after batches %v", c.Enqueued, batches)
			}
			if res.Done {
				break
			}
		}
		if fmt.Sprint(batches) != "[2 2 1]" {
			t.Fatalf("batches %v; want [2 2 1]", batches)
		}
		c := getCampaign(t, b, p.ID)
		if c.State != store.CampaignDone || c.Total != 5 || c.Enqueued != 5 || c.EndedAt == nil {
			t.Fatalf("campaign after fan-out = %+v; want DONE, 5 of 5", c)
		}
		if res := fanOut(t, b, p.ID, 2); !res.Done || res.Recipients != 0 {
			t.Fatalf("a DONE campaign's fan-out = %+v; want done, nothing", res)
		}
		rs := recipients(p.ID, 1, 5)
		for _, r := range rs {
			v, err := b.s.NotificationGet(b.ctx, "t1", r.NotificationID)
			if err != nil {
				t.Fatalf("NotificationGet %s: %v", r.Recipient, err)
			}
			if v.Recipient != r.Recipient || v.Kind != "k" || v.EventID != p.ID || v.Lane != heraldtype.LaneMarketing ||
				len(v.Deliveries) != 1 || v.Deliveries[0].OutboxState != heraldtype.OutboxPending {
				t.Fatalf("notification of %s = %+v", r.Recipient, v)
			}
		}
		jobs := claim(t, b.bundle, heraldtype.LaneMarketing, 10)
		params := map[string]string{}
		for _, j := range jobs {
			params[j.Recipient] = string(j.Params)
		}
		if len(jobs) != 5 || params["r1"] != `{"a":1}` || params["r2"] != `{"a":2,"b":"x"}` {
			t.Fatalf("claimed %d jobs with params %v; want 5, r2's own", len(jobs), params)
		}
	})

	t.Run("AFailedBatchLeavesNothingAndTheNextResumes", func(t *testing.T) {
		t.Parallel()
		if h.Query == nil {
			t.Skip("needs Harness.Query")
		}
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 7) }, nil)
		startCampaign(t, b, p.ID)
		fanOut(t, b, p.ID, 3)
		crash := errors.New("crash")
		_, err := b.c.CampaignFanOut(b.ctx, store.CampaignFanOutParams{Tenant: "t1", ID: p.ID, Limit: 3, BeforeCommit: func() error { return crash }})
		if !errors.Is(err, crash) {
			t.Fatalf("CampaignFanOut with a failing commit: %v; want the crash", err)
		}
		if c := getCampaign(t, b, p.ID); c.Enqueued != 3 || c.State != store.CampaignRunning {
			t.Fatalf("after the failed batch: %+v; want enqueued 3, RUNNING", c)
		}
		if got := campaignNotifications(t, h, b, p.ID); len(got) != 3 {
			t.Fatalf("after the failed batch the notifications are %v; want r1..r3 only", got)
		}
		for !fanOut(t, b, p.ID, 3).Done {
		}
		got := campaignNotifications(t, h, b, p.ID)
		for i := 1; i <= 7; i++ {
			if got[fmt.Sprintf("r%d", i)] != 1 {
				t.Fatalf("notifications per recipient %v; want exactly one each of r1..r7", got)
			}
		}
		if c := getCampaign(t, b, p.ID); c.Enqueued != 7 || c.State != store.CampaignDone {
			t.Fatalf("after resuming: %+v; want DONE, enqueued 7", c)
		}
	})

	// Batches written side by side (Range) still move the cursor in seq
	// order: a batch whose predecessor has not committed, failed or was
	// overtaken writes nothing; the campaign ends DONE with one
	// notification per recipient.
	t.Run("RangedBatchesCommitOnlyInSeqOrder", func(t *testing.T) {
		t.Parallel()
		if h.Query == nil {
			t.Skip("needs Harness.Query")
		}
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 11) }, nil)
		if rs, err := b.c.CampaignBatches(b.ctx, "t1", p.ID, nil, 3, 2); err != nil || len(rs) != 0 {
			t.Fatalf("batches of a DRAFT campaign = %v, %v; want none", rs, err)
		}
		if _, err := b.c.CampaignBatches(b.ctx, "t1", "cmp_none", nil, 3, 2); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("batches of no campaign: %v; want ErrNotFound", err)
		}
		startCampaign(t, b, p.ID)
		batches := func(size, count int) []store.CampaignRange {
			t.Helper()
			rs, err := b.c.CampaignBatches(b.ctx, "t1", p.ID, nil, size, count)
			if err != nil {
				t.Fatalf("CampaignBatches: %v", err)
			}
			return rs
		}
		ranged := func(r store.CampaignRange, hook func() error) (store.CampaignFanOutResult, error) {
			return b.c.CampaignFanOut(b.ctx, store.CampaignFanOutParams{Tenant: "t1", ID: p.ID, Limit: 3, Range: &r, BeforeCommit: hook})
		}
		rs := batches(3, 2)
		if len(rs) != 2 || rs[0].Upto != rs[1].After || rs[0].After >= rs[0].Upto || rs[1].After >= rs[1].Upto {
			t.Fatalf("batches = %v; want two that follow each other", rs)
		}
		// The second before the first: refused, nothing written.
		if _, err := ranged(rs[1], nil); !errors.Is(err, store.ErrCampaignBehind) {
			t.Fatalf("the second batch first: %v; want ErrCampaignBehind", err)
		}
		if got := campaignNotifications(t, h, b, p.ID); len(got) != 0 {
			t.Fatalf("a refused batch wrote %v", got)
		}
		// The first fails with the second started beside it (it waits for
		// the first's end, or runs after it): both write nothing.
		crash := errors.New("crash")
		second := make(chan error, 1)
		if _, err := ranged(rs[0], func() error {
			go func() { _, err := ranged(rs[1], nil); second <- err }()
			return crash
		}); !errors.Is(err, crash) {
			t.Fatalf("the first batch with a failing commit: %v; want the crash", err)
		}
		if err := <-second; !errors.Is(err, store.ErrCampaignBehind) {
			t.Fatalf("the second batch beside a failed first: %v; want ErrCampaignBehind", err)
		}
		if c := getCampaign(t, b, p.ID); c.Enqueued != 0 || len(campaignNotifications(t, h, b, p.ID)) != 0 {
			t.Fatalf("after a failed first batch: %+v, notifications %v; want nothing", c, campaignNotifications(t, h, b, p.ID))
		}
		// The first commits with the second beside it: both are written.
		if res, err := ranged(rs[0], func() error {
			go func() {
				res, err := ranged(rs[1], nil)
				second <- errors.Join(err, check(res.Recipients == 3 && !res.Done, "second %+v", res))
			}()
			return nil
		}); err != nil || res.Recipients != 3 || res.Notifications != 3 || res.Outbox != 3 || res.Done {
			t.Fatalf("the first batch = %+v, %v; want 3 recipients written, not done", res, err)
		}
		if err := <-second; err != nil {
			t.Fatalf("the second batch beside the first: %v", err)
		}
		if c := getCampaign(t, b, p.ID); c.Enqueued != 6 || c.State != store.CampaignRunning {
			t.Fatalf("after two batches: %+v; want 6 enqueued, RUNNING", c)
		}
		// Written already: refused.
		if _, err := ranged(rs[0], nil); !errors.Is(err, store.ErrCampaignBehind) {
			t.Fatalf("a batch written already: %v; want ErrCampaignBehind", err)
		}
		// The rest: one full batch and a shorter last one, which ends the
		// campaign DONE; then no batch is left.
		rest := batches(3, 4)
		if len(rest) != 2 || rest[0].After != rs[1].Upto || rest[1].After != rest[0].Upto {
			t.Fatalf("the rest's batches = %v; want two after %d", rest, rs[1].Upto)
		}
		if res, err := ranged(rest[0], nil); err != nil || res.Recipients != 3 || res.Done {
			t.Fatalf("the third batch = %+v, %v; want 3, not done", res, err)
		}
		if res, err := ranged(rest[1], nil); err != nil || res.Recipients != 2 || !res.Done {
			t.Fatalf("the last batch = %+v, %v; want 2, done", res, err)
		}
		if left := batches(3, 2); len(left) != 0 {
			t.Fatalf("batches of a DONE campaign: %v; want none", left)
		}
		got := campaignNotifications(t, h, b, p.ID)
		for i := 1; i <= 11; i++ {
			if got[fmt.Sprintf("r%d", i)] != 1 {
				t.Fatalf("notifications per recipient %v; want exactly one each of r1..r11", got)
			}
		}
		if c := getCampaign(t, b, p.ID); c.Enqueued != 11 || c.State != store.CampaignDone || c.EndedAt == nil {
			t.Fatalf("after the ranged batches: %+v; want DONE, enqueued 11", c)
		}
	})

	// A ranged batch not at the cursor calls Turn before it takes the
	// campaign's lock (on PostgreSQL after its writes, on SQLite before
	// it begins), and waits for it: the batch before it, begun later, is
	// written and committed meanwhile, and then it commits after it. An
	// error from Turn writes nothing.
	t.Run("ARangedBatchWaitsForItsTurn", func(t *testing.T) {
		t.Parallel()
		if h.Query == nil {
			t.Skip("needs Harness.Query")
		}
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 6) }, nil)
		startCampaign(t, b, p.ID)
		rs, err := b.c.CampaignBatches(b.ctx, "t1", p.ID, nil, 3, 2)
		if err != nil || len(rs) != 2 {
			t.Fatalf("CampaignBatches = %v, %v; want two", rs, err)
		}
		ranged := func(ctx context.Context, r store.CampaignRange, turn func(context.Context) error) (store.CampaignFanOutResult, error) {
			return b.c.CampaignFanOut(ctx, store.CampaignFanOutParams{Tenant: "t1", ID: p.ID, Limit: 3, Range: &r, Turn: turn})
		}
		refused := errors.New("not its turn")
		if _, err := ranged(b.ctx, rs[1], func(context.Context) error { return refused }); !errors.Is(err, refused) {
			t.Fatalf("a batch whose turn failed: %v; want that failure", err)
		}
		if got := campaignNotifications(t, h, b, p.ID); len(got) != 0 {
			t.Fatalf("a batch whose turn failed wrote %v", got)
		}
		waiting, turn := make(chan struct{}), make(chan struct{})
		second := make(chan error, 1)
		go func() {
			res, err := ranged(b.ctx, rs[1], func(context.Context) error { close(waiting); <-turn; return nil })
			second <- errors.Join(err, check(res.Recipients == 3 && res.Done, "second %+v", res))
		}()
		select {
		case <-waiting:
		case err := <-second:
			t.Fatalf("the second batch ended without waiting for its turn: %v", err)
		}
		// Were the second holding the campaign's lock (or the single
		// writer), the first would wait for it: bounded, so the test
		// fails rather than hangs.
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		if res, err := ranged(ctx, rs[0], nil); err != nil || res.Recipients != 3 || res.Done {
			t.Fatalf("the first batch while the second waits for its turn = %+v, %v; want 3 written, not done", res, err)
		}
		close(turn)
		if err := <-second; err != nil {
			t.Fatalf("the second batch after its turn: %v", err)
		}
		got := campaignNotifications(t, h, b, p.ID)
		for i := 1; i <= 6; i++ {
			if got[fmt.Sprintf("r%d", i)] != 1 {
				t.Fatalf("notifications per recipient %v; want exactly one each of r1..r6", got)
			}
		}
		if c := getCampaign(t, b, p.ID); c.Enqueued != 6 || c.State != store.CampaignDone {
			t.Fatalf("after both batches: %+v; want DONE, enqueued 6", c)
		}
	})

	t.Run("PushDevicesAndFallbackStepsAsIntakeWritesThem", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		d1 := putDevice(t, b.bundle, "r1", "tok-1", store.PlatformFCM)
		d2 := putDevice(t, b.bundle, "r1", "tok-2", store.PlatformAPNs)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 2) }, func(p *store.CampaignCreateParams) {
			p.Channels, p.Fallback = []heraldtype.Channel{heraldtype.ChannelPush, heraldtype.ChannelSMS}, true
		})
		startCampaign(t, b, p.ID)
		if res := fanOut(t, b, p.ID, 10); res.Notifications != 2 || res.Outbox != 5 || !res.Done {
			t.Fatalf("fan-out = %+v; want 2 notifications, 5 outbox rows (r1: 2 devices + sms, r2: push + sms)", res)
		}
		for _, r := range recipients(p.ID, 1, 2) {
			v, err := b.s.NotificationGet(b.ctx, "t1", r.NotificationID)
			if err != nil {
				t.Fatal(err)
			}
			got := map[heraldtype.Channel]string{}
			for _, dv := range v.Deliveries {
				step := 0
				if dv.Fallback != nil {
					step = dv.Fallback.Step
				}
				got[dv.Channel] = fmt.Sprintf("%s/%d", dv.OutboxState, step)
			}
			want := map[heraldtype.Channel]string{"push": "PENDING/1", "sms": "WAITING/2"}
			if r.Recipient == "r1" {
				want = map[heraldtype.Channel]string{heraldtype.DeviceSend("push", d1): "PENDING/1",
					heraldtype.DeviceSend("push", d2): "PENDING/1", "sms": "WAITING/2"}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s's sends = %v; want %v", r.Recipient, got, want)
			}
		}
	})

	t.Run("CancelReportsWhatHadGoneAndStopsTheRest", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 6) }, nil)
		startCampaign(t, b, p.ID)
		fanOut(t, b, p.ID, 4) // r1..r4 have notifications, r5 and r6 not yet
		rs := recipients(p.ID, 1, 4)
		send := func(r store.CampaignRecipient) string {
			mid := store.MessageID(r.NotificationID, heraldtype.ChannelWebhook)
			res := claimDelivery(t, b.bundle, store.DeliveryClaimParams{MessageID: mid, NotificationID: r.NotificationID, Tenant: "t1",
				Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w1"})
			if !res.Claimed {
				t.Fatalf("DeliveryClaim %s: %+v", mid, res)
			}
			return mid
		}
		sent := send(rs[0])
		if _, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: sent, Attempt: 1, State: heraldtype.DeliveryProviderAccepted,
			Owner: "w1", Class: "accepted", StartedAt: b.clk.Now()}); err != nil {
			t.Fatal(err)
		}
		inFlight := send(rs[1])
		if c := getCampaign(t, b, p.ID); c.Counts != (store.CampaignCounts{Sent: 1}) {
			t.Fatalf("counts before the cancel = %+v; want 1 sent", c.Counts)
		}
		res, err := b.c.CampaignCancel(b.ctx, "t1", p.ID)
		if err != nil {
			t.Fatalf("CampaignCancel: %v", err)
		}
		c := res.Campaign
		if c.State != store.CampaignCancelled || c.Enqueued != 4 || c.Total != 6 || c.Counts != (store.CampaignCounts{Sent: 1}) ||
			res.Cancelled != 2 || res.InFlight != 1 || res.Already || c.EndedAt == nil {
			t.Fatalf("CampaignCancel = %+v; want CANCELLED, 4 of 6 enqueued, 1 sent, 2 cancelled, 1 in flight", res)
		}
		for _, r := range rs[2:] {
			if d := delivery(t, b.bundle, store.MessageID(r.NotificationID, heraldtype.ChannelWebhook)); d.State != heraldtype.DeliverySuppressed ||
				d.Reason != heraldtype.ReasonCancelled {
				t.Fatalf("%s's send after the cancel: %s %s; want SUPPRESSED CANCELLED", r.Recipient, d.State, d.Reason)
			}
		}
		if d := delivery(t, b.bundle, inFlight); d.State != heraldtype.DeliverySending {
			t.Fatalf("the send in flight became %s; a cancel never writes over SENDING", d.State)
		}
		if res := fanOut(t, b, p.ID, 10); !res.Done || res.Recipients != 0 {
			t.Fatalf("fan-out after the cancel = %+v; want done, nothing", res)
		}
		if _, err := b.s.NotificationGet(b.ctx, "t1", recipients(p.ID, 5, 1)[0].NotificationID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("r5 got a notification after the cancel: %v", err)
		}
		again, err := b.c.CampaignCancel(b.ctx, "t1", p.ID)
		if err != nil || !again.Already || again.Cancelled != 0 || again.Campaign.Counts != (store.CampaignCounts{Sent: 1, Suppressed: 2}) {
			t.Fatalf("a second cancel = %+v, %v; want Already, counts 1 sent 2 suppressed", again, err)
		}
		if _, err := b.c.CampaignStart(b.ctx, "t1", p.ID); !errors.Is(err, store.ErrCampaignState) {
			t.Fatalf("starting a cancelled campaign: %v; want ErrCampaignState", err)
		}
	})

	t.Run("RunningCampaignsArePagedEarliestStartedFirst", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		var started []store.CampaignRef
		for i := range 5 {
			p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 1) }, nil)
			startCampaign(t, b, p.ID)
			started = append(started, store.CampaignRef{ID: p.ID, Started: b.clk.Now()})
			if i%2 == 0 {
				b.clk.Advance(time.Second) // the others two by two in one millisecond: their ids order them
			}
		}
		slices.SortFunc(started, func(x, y store.CampaignRef) int {
			return cmp.Or(x.Started.Compare(y.Started), strings.Compare(x.ID, y.ID))
		})
		var want []string
		for _, r := range started {
			want = append(want, r.ID)
		}
		got := walkPages(t, 2, func(last *store.CampaignRef) ([]store.CampaignRef, error) {
			return b.c.CampaignsRunning(b.ctx, last, 2)
		}, func(r store.CampaignRef) string { return r.ID })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("CampaignsRunning in pages of 2 = %v; want every one once, earliest started first: %v", got, want)
		}
	})

	t.Run("ATenantsCampaignsArePagedNewestFirst", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		var made []store.ListPosition
		for i := range 7 {
			p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, i+1) }, nil)
			made = append(made, store.ListPosition{CreatedAt: b.clk.Now(), ID: p.ID})
			if i == 2 {
				startCampaign(t, b, p.ID)
			}
			if i%2 == 0 {
				b.clk.Advance(time.Second) // the others two by two in one instant: their ids order them
			}
		}
		// Another tenant's is never listed.
		newCampaign(t, b, nil, func(p *store.CampaignCreateParams) { p.Tenant = "t2" })
		want := newestFirst(made)
		got := walkPages(t, 3, func(last *store.Campaign) ([]store.Campaign, error) {
			p := store.CampaignListParams{Tenant: "t1", Limit: 3}
			if last != nil {
				pos := last.Position()
				p.Before = &pos
			}
			return b.c.CampaignList(b.ctx, p)
		}, func(c store.Campaign) string {
			if c.Tenant != "t1" || c.Kind != "k" || c.Total == 0 || c.CreatedAt.IsZero() || c.State == "" {
				t.Fatalf("listed %+v; want the campaign as CampaignGet reads it", c)
			}
			if one, err := b.c.CampaignGet(b.ctx, "t1", c.ID); err != nil || fmt.Sprint(one) != fmt.Sprint(c) {
				t.Fatalf("listed %+v; CampaignGet reads %+v (%v)", c, one, err)
			}
			return c.ID
		})
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("CampaignList in pages of 3 = %v; want every one of t1's once, newest first: %v", got, want)
		}
		running, err := b.c.CampaignList(b.ctx, store.CampaignListParams{Tenant: "t1", State: store.CampaignRunning, Limit: 10})
		if err != nil || len(running) != 1 || running[0].State != store.CampaignRunning || running[0].Total != 3 {
			t.Fatalf("RUNNING only = %+v, %v; want the one started", running, err)
		}
		if none, err := b.c.CampaignList(b.ctx, store.CampaignListParams{Tenant: "t3", Limit: 10}); err != nil || len(none) != 0 {
			t.Fatalf("a tenant without campaigns lists %+v, %v", none, err)
		}
	})

	t.Run("CountsAreKeptByEveryWriteThatEndsASend", func(t *testing.T) {
		t.Parallel()
		if h.Query == nil {
			t.Skip("needs the harness's Query")
		}
		b := setupCampaigns(t, h)
		const n = 9
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, n) }, nil)
		startCampaign(t, b, p.ID)
		fanOut(t, b, p.ID, n)
		// counted reads the counts as the sends' rows give them, what GET
		// counted before the counts were kept.
		counted := func() store.CampaignCounts {
			rows := h.Query(t, b.s, `SELECT
    count(CASE WHEN d.state IN ('PROVIDER_ACCEPTED', 'DELIVERED') THEN 1 END),
    count(CASE WHEN d.state = 'SUPPRESSED' OR (d.state IS NULL AND o.state = 'SKIPPED') THEN 1 END),
    count(CASE WHEN d.state IN ('PERMANENT_FAILURE', 'RETRY_EXHAUSTED') OR (d.state IS NULL AND o.state IN ('EXPIRED', 'FAILED')) THEN 1 END),
    count(CASE WHEN d.state = 'UNKNOWN' THEN 1 END)
FROM notifications n JOIN outbox o ON o.notification_id = n.id LEFT JOIN deliveries d ON d.message_id = o.message_id
WHERE n.campaign_id = '`+p.ID+`'`)
			var k store.CampaignCounts
			fmt.Sscan(strings.Join(rows[0], " "), &k.Sent, &k.Suppressed, &k.Failed, &k.Unknown)
			return k
		}
		agree := func(step string, want store.CampaignCounts) {
			t.Helper()
			if got, rows := getCampaign(t, b, p.ID).Counts, counted(); got != want || rows != want {
				t.Fatalf("after %s: kept counts %+v, the sends' rows %+v; want %+v", step, got, rows, want)
			}
		}
		rs := recipients(p.ID, 1, n)
		mid := func(i int) string { return store.MessageID(rs[i].NotificationID, heraldtype.ChannelWebhook) }
		claim := func(i int) {
			t.Helper()
			if res := claimDelivery(t, b.bundle, store.DeliveryClaimParams{MessageID: mid(i), NotificationID: rs[i].NotificationID, Tenant: "t1",
				Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w1"}); !res.Claimed {
				t.Fatalf("DeliveryClaim %s: %+v", mid(i), res)
			}
		}
		record := func(i, attempt int, state heraldtype.DeliveryState) {
			t.Helper()
			if _, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: mid(i), Attempt: attempt, State: state,
				RetryDelay: time.Minute, Owner: "w1", Class: "c", StartedAt: b.clk.Now()}); err != nil {
				t.Fatalf("DeliveryRecord %s %s: %v", mid(i), state, err)
			}
		}
		agree("the fan-out", store.CampaignCounts{})
		claim(0)
		agree("a claim", store.CampaignCounts{})
		record(0, 1, heraldtype.DeliveryProviderAccepted)
		agree("a send accepted", store.CampaignCounts{Sent: 1})
		claim(1)
		record(1, 1, heraldtype.DeliveryPermanentFailure)
		agree("a permanent failure", store.CampaignCounts{Sent: 1, Failed: 1})
		claim(2)
		record(2, 1, heraldtype.DeliveryUnknown)
		agree("an unknown", store.CampaignCounts{Sent: 1, Failed: 1, Unknown: 1})
		if r, ok := b.s.(store.Reports); ok {
			if out, err := r.DeliveryReport(b.ctx, store.ReportParams{Provider: "p", MessageID: mid(2),
				From: []heraldtype.DeliveryState{heraldtype.DeliveryUnknown}, To: heraldtype.DeliveryProviderAccepted}); err != nil || !out.Moved {
				t.Fatalf("DeliveryReport: %+v, %v", out, err)
			}
			agree("a report settling the unknown", store.CampaignCounts{Sent: 2, Failed: 1})
		} else {
			record(2, 1, heraldtype.DeliveryProviderAccepted) // refused: not SENDING
		}
		k := getCampaign(t, b, p.ID).Counts
		claim(3)
		record(3, 1, heraldtype.DeliveryRetryWait)
		agree("a retry scheduled", k)
		b.clk.Advance(2 * time.Minute)
		claim(3)
		record(3, 2, heraldtype.DeliveryProviderAccepted)
		k.Sent++
		agree("the retry accepted", k)
		if ok, err := b.s.DeliveryDecide(b.ctx, store.DeliveryDecideParams{MessageID: mid(4), NotificationID: rs[4].NotificationID, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, State: heraldtype.DeliverySuppressed, Reason: heraldtype.ReasonConsentDenied}); err != nil || !ok {
			t.Fatalf("DeliveryDecide: %v, %v", ok, err)
		}
		k.Suppressed++
		agree("a send suppressed", k)
		claim(5)
		b.clk.Advance(time.Hour)
		if stale, err := b.s.DeliverySweepStale(b.ctx, time.Minute); err != nil || len(stale) != 1 {
			t.Fatalf("DeliverySweepStale: %+v, %v", stale, err)
		}
		k.Unknown++
		agree("a stale claim swept to unknown", k)
		// An outbox row that ends unsent, and then, as a copy of it may
		// still be met, gets its delivery after all.
		claimed, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneMarketing, Owner: "d1", Limit: n, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var fence *store.Fence
		for _, c := range claimed {
			if c.MessageID == mid(6) {
				fence = &c.Fence
			}
		}
		if fence == nil {
			t.Fatalf("OutboxClaim did not take %s: %+v", mid(6), claimed)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, *fence, heraldtype.OutboxFailed, "MAX_ATTEMPTS"); err != nil || !ok {
			t.Fatalf("OutboxComplete FAILED: %v, %v", ok, err)
		}
		k.Failed++
		agree("an outbox row failed unsent", k)
		// Between the copy's claim and its result the send may still count
		// as failed (PostgreSQL moves it when the delivery's own outcome is
		// written, so that a claim runs no trigger); from the result on it
		// counts as that.
		claim(6)
		record(6, 1, heraldtype.DeliveryProviderAccepted)
		k.Failed--
		k.Sent++
		agree("a late copy of the failed row accepted", k)

		// A claim under an event key (its own statement on PostgreSQL).
		if res := claimDelivery(t, b.bundle, store.DeliveryClaimParams{MessageID: mid(7), NotificationID: rs[7].NotificationID, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w1", Event: &store.EventKeyTakeParams{
				Key:   store.EventKey{Tenant: "t1", Recipient: rs[7].Recipient, EventID: p.ID, Kind: "k"},
				Owner: rs[7].NotificationID, Lease: time.Hour}}); !res.Claimed {
			t.Fatalf("DeliveryClaim under an event key: %+v", res)
		}
		record(7, 1, heraldtype.DeliveryProviderAccepted)
		k.Sent++
		agree("a send under an event key accepted", k)

		res, err := b.c.CampaignCancel(b.ctx, "t1", p.ID)
		if err != nil {
			t.Fatalf("CampaignCancel: %v", err)
		}
		if res.Campaign.Counts != k || res.Cancelled != 1 || res.InFlight != 0 {
			t.Fatalf("CampaignCancel = %+v; want counts %+v, 1 cancelled, none in flight", res, k)
		}
		k.Suppressed++
		agree("the cancel", k)
		if c := res.Campaign.Counts; c.Sent+c.Suppressed+c.Failed+c.Unknown+res.Cancelled+res.InFlight != n {
			t.Fatalf("the cancel accounts for %+v; want all %d sends", res, n)
		}
	})

	// One statement that ends many sends of two campaigns (a stale sweep,
	// one UPDATE on PostgreSQL, whose counts move once per statement) moves
	// each campaign's counts by its own sends, and a late copy's send from
	// the count its outbox row had.
	t.Run("CountsAreKeptWhenOneStatementEndsManySends", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		var ps [2]store.CampaignCreateParams
		for i := range ps {
			ps[i] = newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 3) }, nil)
			startCampaign(t, b, ps[i].ID)
			fanOut(t, b, ps[i].ID, 10)
		}
		mid := func(p store.CampaignCreateParams, i int) (string, string) {
			r := recipients(p.ID, 1, 3)[i]
			return store.MessageID(r.NotificationID, heraldtype.ChannelWebhook), r.NotificationID
		}
		// The first campaign's third send fails unsent; a copy of it is
		// claimed below with the others.
		claimed, err := b.s.OutboxClaim(b.ctx, store.OutboxClaimParams{Lane: heraldtype.LaneMarketing, Owner: "d1", Limit: 10, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		late, _ := mid(ps[0], 2)
		i := slices.IndexFunc(claimed, func(c store.Claimed) bool { return c.MessageID == late })
		if i < 0 {
			t.Fatalf("OutboxClaim did not take %s: %+v", late, claimed)
		}
		if ok, err := b.s.OutboxComplete(b.ctx, claimed[i].Fence, heraldtype.OutboxFailed, "MAX_ATTEMPTS"); err != nil || !ok {
			t.Fatalf("OutboxComplete FAILED: %v, %v", ok, err)
		}
		for _, p := range ps {
			for i := range 3 {
				m, n := mid(p, i)
				if res := claimDelivery(t, b.bundle, store.DeliveryClaimParams{MessageID: m, NotificationID: n, Tenant: "t1",
					Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w1"}); !res.Claimed {
					t.Fatalf("DeliveryClaim %s: %+v", m, res)
				}
			}
		}
		first, _ := mid(ps[0], 0)
		if _, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: first, Attempt: 1, State: heraldtype.DeliveryProviderAccepted,
			Owner: "w1", Class: "c", StartedAt: b.clk.Now()}); err != nil {
			t.Fatal(err)
		}
		b.clk.Advance(time.Hour)
		if stale, err := b.s.DeliverySweepStale(b.ctx, time.Minute); err != nil || len(stale) != 5 {
			t.Fatalf("DeliverySweepStale: %d swept, %v; want 5", len(stale), err)
		}
		for i, want := range []store.CampaignCounts{{Sent: 1, Unknown: 2}, {Unknown: 3}} {
			if got := getCampaign(t, b, ps[i].ID).Counts; got != want {
				t.Errorf("campaign %d's counts after the sweep = %+v; want %+v", i+1, got, want)
			}
		}
	})

	t.Run("CancelSkipsWaitingStepsAndSuppressesRetries", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 1) }, func(p *store.CampaignCreateParams) {
			p.Channels, p.Fallback = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS}, true
		})
		startCampaign(t, b, p.ID)
		fanOut(t, b, p.ID, 10)
		r := recipients(p.ID, 1, 1)[0]
		mid := store.MessageID(r.NotificationID, heraldtype.ChannelWebhook)
		claimDelivery(t, b.bundle, store.DeliveryClaimParams{MessageID: mid, NotificationID: r.NotificationID, Tenant: "t1",
			Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: "w1"})
		if _, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1, State: heraldtype.DeliveryRetryWait,
			RetryDelay: time.Hour, Owner: "w1", Class: "not_sent", StartedAt: b.clk.Now()}); err != nil {
			t.Fatal(err)
		}
		res, err := b.c.CampaignCancel(b.ctx, "t1", p.ID)
		if err != nil || res.Cancelled != 2 || res.InFlight != 0 {
			t.Fatalf("CampaignCancel = %+v, %v; want 2 cancelled (the retry and the waiting step)", res, err)
		}
		v, err := b.s.NotificationGet(b.ctx, "t1", r.NotificationID)
		if err != nil {
			t.Fatal(err)
		}
		for _, dv := range v.Deliveries {
			state, reason, _ := v.EntryState(dv)
			want := "SUPPRESSED CANCELLED"
			if dv.Channel == heraldtype.ChannelSMS {
				want = "SKIPPED FALLBACK_NOT_NEEDED"
			}
			if state+" "+reason != want {
				t.Fatalf("%s after the cancel: %s %s; want %s", dv.Channel, state, reason, want)
			}
		}
		if c := getCampaign(t, b, p.ID); c.Counts != (store.CampaignCounts{Suppressed: 2}) {
			t.Fatalf("counts = %+v; want 2 suppressed", c.Counts)
		}
	})

	// A send in flight at the cancel (left alone, counted in flight) whose
	// call then fails for now is not tried again: its retry's claim finds
	// the campaign cancelled and ends it SUPPRESSED(CANCELLED), on either
	// claim path (a new claim of the message, as a redelivered or requeued
	// job makes, and the retry of a row the store holds).
	t.Run("ASendInFlightAtTheCancelIsNotRetried", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		p := newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 2) }, nil)
		startCampaign(t, b, p.ID)
		fanOut(t, b, p.ID, 10)
		claim := func(r store.CampaignRecipient, owner string) (string, store.DeliveryClaimResult) {
			mid := store.MessageID(r.NotificationID, heraldtype.ChannelWebhook)
			return mid, claimDelivery(t, b.bundle, store.DeliveryClaimParams{MessageID: mid, NotificationID: r.NotificationID, Tenant: "t1",
				Channel: heraldtype.ChannelWebhook, Provider: "p", Owner: owner})
		}
		rs := recipients(p.ID, 1, 2)
		var mids []string
		for _, r := range rs {
			mid, res := claim(r, "w1")
			if !res.Claimed {
				t.Fatalf("DeliveryClaim %s: %+v", mid, res)
			}
			mids = append(mids, mid)
		}
		res, err := b.c.CampaignCancel(b.ctx, "t1", p.ID)
		if err != nil || res.Cancelled != 0 || res.InFlight != 2 {
			t.Fatalf("CampaignCancel = %+v, %v; want both sends in flight", res, err)
		}
		for _, mid := range mids {
			rec, err := b.s.DeliveryRecord(b.ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1, State: heraldtype.DeliveryRetryWait,
				Reason: "HTTP_503", RetryDelay: time.Minute, Owner: "w1", Class: "not_sent", StartedAt: b.clk.Now()})
			if err != nil || !rec.Recorded {
				t.Fatalf("DeliveryRecord %s: %+v, %v", mid, rec, err)
			}
		}
		// Not yet due: the first is claimed at once, the second when due.
		for i, r := range rs {
			if i == 1 {
				b.clk.Advance(time.Minute + time.Second)
			}
			mid, got := claim(r, "w2")
			if got.Claimed || !got.Cancelled || got.Current == nil || got.Current.State != heraldtype.DeliverySuppressed || got.Current.Reason != heraldtype.ReasonCancelled {
				t.Fatalf("the retry of %s after the cancel: %+v; want no claim, SUPPRESSED CANCELLED by the claim", mid, got)
			}
			if d := delivery(t, b.bundle, mid); d.State != heraldtype.DeliverySuppressed || d.Attempts != 1 {
				t.Fatalf("%s: %s after %d attempts; want SUPPRESSED after the one", mid, d.State, d.Attempts)
			}
		}
		if c := getCampaign(t, b, p.ID); c.Counts != (store.CampaignCounts{Suppressed: 2}) {
			t.Fatalf("counts = %+v; want the 2 sends in flight at the cancel suppressed", c.Counts)
		}
	})

	t.Run("DraftsPastTheirDeadlineExpireEarliestFirstAndNothingElse", func(t *testing.T) {
		t.Parallel()
		b := setupCampaigns(t, h)
		draft := func(ttl time.Duration) store.CampaignCreateParams {
			return newCampaign(t, b, func(id string) []store.CampaignRecipient { return recipients(id, 1, 2) }, func(p *store.CampaignCreateParams) {
				p.DraftTTL = ttl
			})
		}
		t0 := b.clk.Now()
		hour := draft(time.Hour)
		twoHours := draft(2 * time.Hour)
		running := draft(time.Hour)
		startCampaign(t, b, running.ID)
		cancelled := draft(time.Hour)
		if _, err := b.c.CampaignCancel(b.ctx, "t1", cancelled.ID); err != nil {
			t.Fatal(err)
		}
		young := draft(10 * time.Hour)
		b.clk.Advance(30 * time.Minute)
		late := draft(time.Minute) // created later, due first
		if c := getCampaign(t, b, young.ID); c.DraftExpiresAt == nil || !c.DraftExpiresAt.Equal(t0.Add(10*time.Hour)) {
			t.Fatalf("a draft's deadline = %v; want its creation + its ttl, %v", c.DraftExpiresAt, t0.Add(10*time.Hour))
		}
		if refs, err := b.c.CampaignsExpireDrafts(b.ctx, 10); err != nil || len(refs) != 0 {
			t.Fatalf("CampaignsExpireDrafts before any deadline = %+v, %v; want none", refs, err)
		}
		b.clk.Advance(150 * time.Minute) // t0 + 3h
		// Past its deadline, and before any expiry, a draft is not started
		// nor added to; one not yet due is.
		if _, err := b.c.CampaignStart(b.ctx, "t1", hour.ID); !errors.Is(err, store.ErrCampaignState) {
			t.Fatalf("starting a draft past its deadline: %v; want ErrCampaignState", err)
		}
		if _, err := addPage(b, "t1", twoHours.ID, recipients(twoHours.ID, 3, 1), 0); !errors.Is(err, store.ErrCampaignState) {
			t.Fatalf("a page for a draft past its deadline: %v; want ErrCampaignState", err)
		}
		if c := getCampaign(t, b, hour.ID); c.State != store.CampaignDraft || c.Total != 2 {
			t.Fatalf("a draft refused a start = %s with %d recipients; want DRAFT, its 2 (the runner ends it)", c.State, c.Total)
		}
		if n, err := addPage(b, "t1", young.ID, recipients(young.ID, 3, 1), 0); err != nil || n != 1 {
			t.Fatalf("a page for a draft before its deadline = %d, %v; want 1 added", n, err)
		}

		ids := func(refs []store.CampaignRef) []string {
			var out []string
			for _, r := range refs {
				if r.Tenant != "t1" || r.Lane != heraldtype.LaneMarketing {
					t.Fatalf("expired %+v; want tenant t1, lane marketing", r)
				}
				out = append(out, r.ID)
			}
			return out
		}
		for _, step := range []struct {
			limit int
			want  []string
		}{{1, []string{late.ID}}, {10, []string{hour.ID, twoHours.ID}}, {10, nil}} {
			refs, err := b.c.CampaignsExpireDrafts(b.ctx, step.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(refs); !slices.Equal(got, step.want) {
				t.Fatalf("CampaignsExpireDrafts(limit %d) = %v; want %v (the earliest deadline first; never a RUNNING, CANCELLED or undue one)",
					step.limit, got, step.want)
			}
		}

		for _, p := range []store.CampaignCreateParams{late, hour, twoHours} {
			c := getCampaign(t, b, p.ID)
			if c.State != store.CampaignCancelled || c.Reason != store.CampaignDraftExpired || c.EndedAt == nil ||
				!c.EndedAt.Equal(b.clk.Now().Truncate(time.Millisecond)) || c.Total != 2 || c.Enqueued != 0 {
				t.Fatalf("an expired draft = %+v; want CANCELLED, DRAFT_EXPIRED, ended now (%v), 2 recipients, none enqueued", c, b.clk.Now())
			}
			if _, err := b.c.CampaignStart(b.ctx, "t1", p.ID); !errors.Is(err, store.ErrCampaignState) {
				t.Fatalf("starting an expired draft: %v; want ErrCampaignState", err)
			}
			if _, err := addPage(b, "t1", p.ID, recipients(p.ID, 3, 1), 0); !errors.Is(err, store.ErrCampaignState) {
				t.Fatalf("a page for an expired draft: %v; want ErrCampaignState", err)
			}
			if res, err := b.c.CampaignCancel(b.ctx, "t1", p.ID); err != nil || !res.Already || res.Campaign.Reason != store.CampaignDraftExpired {
				t.Fatalf("cancelling an expired draft = %+v, %v; want Already, the reason kept", res, err)
			}
		}
		for id, want := range map[string]string{running.ID: store.CampaignRunning, cancelled.ID: store.CampaignCancelled, young.ID: store.CampaignDraft} {
			if c := getCampaign(t, b, id); c.State != want || c.Reason != "" {
				t.Fatalf("campaign %s = %s %q; want %s with no reason", id, c.State, c.Reason, want)
			}
		}
	})
}

// check is nil when ok, else an error of format and args.
func check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
