package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
)

// BenchmarkCampaignFanOut is issue 12's fan-out run: a campaign of
// HERALD_BENCH_CAMPAIGN_RECIPIENTS recipients (default 100,000; the aim is
// 1,000,000 in ≤ 10 s) on PostgreSQL (HERALD_TEST_POSTGRES_URL, a fresh
// schema), one channel (HERALD_BENCH_CAMPAIGN_CHANNELS, up to 3: webhook,
// sms, email), fanned out by the leader's runner in batches of
// HERALD_BENCH_CAMPAIGN_BATCH (default 10,000). It times the fan-out only
// (the recipients are added first, in pages of 10,000) and reports
// recipients/s and rows/s (notifications and outbox rows committed). Run
// it once: -benchtime 1x. It also times one read of the campaign's counts
// (GET /v1/campaigns/{id}), which are computed when read.
//
// The recipients are user-0 … user-(n-1), added in that order, so a batch
// of them falls into the notifications' recipient index nearly in order.
// With HERALD_BENCH_CAMPAIGN_SCATTERED=1 they are scattered instead, as a
// real list's phone numbers or user ids are: each a distinct 8-hex-digit
// name (a multiplicative permutation of its number), so a batch touches
// pages all over that index.
func BenchmarkCampaignFanOut(b *testing.B) {
	n := envInt("HERALD_BENCH_CAMPAIGN_RECIPIENTS", 100_000)
	batch := envInt("HERALD_BENCH_CAMPAIGN_BATCH", 10_000)
	scattered := os.Getenv("HERALD_BENCH_CAMPAIGN_SCATTERED") == "1"
	channels := []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelSMS, heraldtype.ChannelEmail}[:min(3, max(1, envInt("HERALD_BENCH_CAMPAIGN_CHANNELS", 1)))]
	ctx := context.Background()
	st, err := postgres.Open(ctx, testpg.Schema(b), postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		id := ids.New("cmp", time.Now())
		if _, err := st.CampaignCreate(ctx, store.CampaignCreateParams{ID: id, Tenant: "bench", IdempotencyKey: id, RequestHash: "h",
			Kind: "coupon", Lane: heraldtype.LaneMarketing, Channels: channels, Params: []byte(`{"coupon":"C10"}`)}); err != nil {
			b.Fatal(err)
		}
		added := time.Now()
		for from := 0; from < n; from += campaign.MaxPage {
			page := make([]store.CampaignRecipient, min(campaign.MaxPage, n-from))
			nids := ids.Ordered("ntf", time.Now(), len(page))
			for j := range page {
				page[j] = store.CampaignRecipient{Recipient: recipientName(from+j, scattered), NotificationID: nids[j]}
			}
			if _, err := st.CampaignAddRecipients(ctx, store.CampaignAddParams{Tenant: "bench", ID: id, Recipients: page}); err != nil {
				b.Fatal(err)
			}
		}
		addTook := time.Since(added)
		if _, err := st.CampaignStart(ctx, "bench", id); err != nil {
			b.Fatal(err)
		}
		r := campaign.NewRunner(campaign.RunnerConfig{Store: st, Batch: batch, Parallel: envInt("HERALD_BENCH_CAMPAIGN_PARALLEL", 2)})
		b.StartTimer()
		began := time.Now()
		got, err := r.FanOut(ctx, store.CampaignRef{Tenant: "bench", ID: id, Lane: heraldtype.LaneMarketing})
		took := time.Since(began)
		b.StopTimer()
		if err != nil || got != n {
			b.Fatalf("fan-out = %d, %v; want %d", got, err, n)
		}
		read := time.Now()
		if _, err := st.CampaignGet(ctx, "bench", id); err != nil {
			b.Fatal(err)
		}
		getTook := time.Since(read)
		rows := n * (1 + len(channels))
		b.ReportMetric(float64(n)/took.Seconds(), "recipients/s")
		b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
		b.ReportMetric(took.Seconds(), "fanout-s")
		b.ReportMetric(float64(n)/addTook.Seconds(), "added/s")
		b.ReportMetric(getTook.Seconds(), "get-s")
		fmt.Fprintf(os.Stderr, "campaign fan-out run %d: %d recipients (scattered: %v), %d channel(s), batch %d: %.2f s (%.0f recipients/s, %.0f rows/s); pages added at %.0f/s; GET's counts read in %.2f s\n",
			i+1, n, scattered, len(channels), batch, took.Seconds(), float64(n)/took.Seconds(), float64(rows)/took.Seconds(), float64(n)/addTook.Seconds(), getTook.Seconds())
		b.StartTimer()
	}
}

// recipientName is the i-th recipient's name: user-i, or, scattered, the
// image of i under multiplication by an odd constant modulo 2^32 (a
// permutation, so distinct for every i) in hex.
func recipientName(i int, scattered bool) string {
	if !scattered {
		return "user-" + strconv.Itoa(i)
	}
	return fmt.Sprintf("user-%08x", uint32(i)*2654435761)
}

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
