package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/bench/chart"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
)

// BenchmarkIsolation is issue 12's isolation run (seed 003 §1: a
// 5-million-recipient campaign in one FIFO made a payment wait 62
// minutes): a marketing campaign of HERALD_BENCH_ISOLATION_RECIPIENTS
// (default 1,000,000) is created, filled and started through the HTTP API,
// and while the leader fans it out and the marketing lane drains it to a
// 100 ms provider, 100 transactional notifications a second are posted for
// HERALD_BENCH_ISOLATION_SECONDS (default 60), on a fixed schedule
// (postOnSchedule). It reports the transactional latency from the time
// each was due to its provider call (p50, p99, max; the aim
// is p99 ≤ 250 ms) and how far the campaign got. Use PostgreSQL
// (HERALD_BENCH_DATABASE) for the million; run it once: -benchtime 1x.
// With HERALD_BENCH_CHART_DIR it draws each transactional send and the
// campaign's recipients not yet sent (on PostgreSQL) over time in
// isolation-<store>.svg there.
func BenchmarkIsolation(b *testing.B) { isolation(b, false) }

// BenchmarkIsolationRabbitMQ is BenchmarkIsolation on the rabbitmq
// transport (PostgreSQL and the machine's RabbitMQ, a fresh vhost): the
// marketing lane's sends go through the broker while the transactional
// lane's do too, and the relays' marks meet the campaign's delivery
// writes (the postgres pipeline's later part). Its chart is
// isolation-<store>-rabbitmq.svg.
func BenchmarkIsolationRabbitMQ(b *testing.B) { isolation(b, true) }

func isolation(b *testing.B, rabbit bool) {
	n := envInt("HERALD_BENCH_ISOLATION_RECIPIENTS", 1_000_000)
	seconds := envInt("HERALD_BENCH_ISOLATION_SECONDS", 60)
	lat := &fairLatencies{begun: map[string]time.Time{}, ended: map[string]time.Time{}}
	var marketing atomic.Int64
	s := sim.New(sim.Config{Latency: providerLatency})
	s.OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
		if m.Kind == "coupon" {
			marketing.Add(1)
		} else {
			lat.end(strings.TrimSuffix(m.MessageID, ".webhook"))
		}
		return provider.Outcome{}
	})
	e := startWithProvider(b, "sim-webhook", s, func(cfg *config.Config) {
		off := false
		cfg.QuietHours.Enabled = &off // the run must not depend on the hour in Seoul
		cfg.Kinds = append(cfg.Kinds, config.Kind{Name: "coupon", Category: "marketing", Channels: []string{"webhook"},
			Templates: map[string]config.Template{"webhook": {Title: "Coupon", Body: "{{.coupon}} is yours"}}})
		cfg.Lanes = map[string]config.Lane{"transactional": {Concurrency: 64}, "marketing": {Concurrency: 64}}
		if rabbit {
			cfg.Transport, cfg.RabbitMQURL = "rabbitmq", testmq.VHost(b)
		}
	})
	store := storeName()
	if rabbit {
		store += " + RabbitMQ"
	}
	base := e.bases[0]
	// Marketing goes only with consent: on PostgreSQL every member of the
	// campaign gets a profile consenting to webhook, written in one
	// statement (on SQLite the campaign's sends end
	// SUPPRESSED(CONSENT_DENIED) without a provider call).
	db := os.Getenv("HERALD_BENCH_DATABASE")
	consent := strings.HasPrefix(db, "postgres")
	if consent {
		conn, err := pgx.Connect(context.Background(), db)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(context.Background(), `INSERT INTO profiles (tenant, recipient, data, updated_at)
SELECT $1::text, 'member-' || g, '{"consent":{"webhook":true}}', now() FROM generate_series(0, $2::integer - 1) g
ON CONFLICT DO NOTHING`, config.DevTenant, n); err != nil {
			b.Fatal(err)
		}
		conn.Close(context.Background())
	}
	// The first sends on a new herald pay for its start (statements
	// prepared on each connection at first use, plans made): a fifth of a
	// second of transactional sends goes first, unmeasured, so the run's
	// latencies are the campaign's doing (see BenchmarkFairness).
	warm, err := postOnSchedule(20, 10*time.Millisecond, lat, func(i int) (string, error) {
		return postEvent(base, config.DevAPIKey, fmt.Sprintf("warm-%d-%d", time.Now().UnixNano(), i), "user-1", 1)
	})
	if err != nil {
		b.Fatal(err)
	}
	lat.await(b, warm, time.Minute, "the warm-up's notifications")
	for range b.N {
		began := time.Now()
		var created struct{ ID string }
		if err := isoCall(http.MethodPost, base+"/v1/campaigns", fmt.Sprintf("iso-%d", began.UnixNano()),
			map[string]any{"kind": "coupon", "params": map[string]any{"coupon": "C10"}}, &created); err != nil {
			b.Fatal(err)
		}
		for from := 0; from < n; from += 10_000 {
			page := make([]map[string]string, 0, 10_000)
			for i := from; i < min(n, from+10_000); i++ {
				page = append(page, map[string]string{"recipient": fmt.Sprintf("member-%d", i)})
			}
			if err := isoCall(http.MethodPost, base+"/v1/campaigns/"+created.ID+"/recipients", "", map[string]any{"recipients": page}, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("campaign of %d filled in %s; %s", n, time.Since(began).Round(time.Millisecond), writeBack())
		if err := isoCall(http.MethodPost, base+"/v1/campaigns/"+created.ID+"/start", "", map[string]any{}, nil); err != nil {
			b.Fatal(err)
		}
		started := time.Now()
		// The chart's backlog is the campaign's recipients not yet sent
		// (fanned out or not): a counter, read four times a second. On
		// SQLite, with no consent, they end suppressed, uncounted.
		calledBefore := marketing.Load()
		var backlogs *backlogSampler
		var note string
		if chartDir() != "" {
			note = machineNote()
			if consent {
				backlogs = sampleBacklog(started, func() int64 { return int64(n) - (marketing.Load() - calledBefore) })
			}
		}
		ids, err := postOnSchedule(seconds*100, 10*time.Millisecond, lat, func(i int) (string, error) {
			return postEvent(base, config.DevAPIKey, fmt.Sprintf("pay-%d-%d", started.UnixNano(), i), "user-1", 1)
		})
		if err != nil {
			b.Fatal(err)
		}
		postingEnded := time.Now()
		d := lat.await(b, ids, 5*time.Minute, "transactional notifications")
		var progress map[string]any
		if err := isoCall(http.MethodGet, base+"/v1/campaigns/"+created.ID, "", nil, &progress); err != nil {
			b.Fatal(err)
		}
		b.Logf("after %s: campaign %v; %d marketing provider calls", time.Since(started).Round(time.Second), progress, marketing.Load())
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "tx-p50-ms")
		b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "tx-p99-ms")
		b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, "tx-max-ms")
		b.ReportMetric(float64(marketing.Load()), "marketing-calls")
		if chartDir() != "" {
			c := &chart.Chart{
				Title: fmt.Sprintf("Isolation: 100 transactional/s beside a %s-recipient marketing campaign — %s, %s",
					chart.Thousands(int64(n)), store, started.UTC().Format("2006-01-02")),
				Subtitle: fmt.Sprintf("100 ms provider, 64 in flight per lane. %s transactional posted in %s: p50 %s, p99 %s, max %s. %s marketing calls by the end",
					chart.Thousands(int64(len(ids))), msText(postingEnded.Sub(started)), msText(d[len(d)/2]), msText(d[len(d)*99/100]), msText(d[len(d)-1]),
					chart.Thousands(marketing.Load()-calledBefore)),
				Sends: lat.sends(started), SendsLabel: "transactional: due → provider call",
				Aim: 250 * time.Millisecond,
				Marks: []chart.Mark{
					{At: 0, Label: "campaign started; 100 transactional/s"},
					{At: postingEnded.Sub(started), Label: "posting ends"},
				},
				Note: note,
			}
			if backlogs != nil {
				c.Backlog, c.BacklogLabel = backlogs.Stop(), "campaign recipients not yet sent"
			}
			name := "isolation-" + strings.ToLower(storeName())
			if rabbit {
				name += "-rabbitmq"
			}
			writeChart(b, name, c)
		}
	}
}

// isoCall sends body as JSON with the dev key (and key as the
// Idempotency-Key when set) and decodes the answer into out.
func isoCall(method, url, key string, body, out any) error {
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}
