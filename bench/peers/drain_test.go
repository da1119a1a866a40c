package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/heraldhq/herald/config"
)

// drainPage is how many items one batch insert (River) or one page of
// recipients (herald's campaign) carries: the campaign fan-out's batch.
const drainPage = 10_000

// BenchmarkDrainRiver: b.N no-op jobs batch-inserted with River's
// InsertManyFast (COPY), drainPage a call, while the client is not yet
// working; then the client (64 workers, 10 ms fetch cooldown, as in
// BenchmarkGoAPIRiver) starts, timed until the last job is worked. It
// reports inserted/s, worked/s (from the client's start) and jobs/s (from
// the first insert to the last job worked).
func BenchmarkDrainRiver(b *testing.B) {
	ctx := context.Background()
	pool, _ := database(b)
	var worked atomic.Int64
	client := riverClient(b, pool, func(*river.Job[noopArgs]) { worked.Add(1) })
	b.ResetTimer()
	began := time.Now()
	for from := 0; from < b.N; from += drainPage {
		page := make([]river.InsertManyParams, 0, min(drainPage, b.N-from))
		for i := from; i < min(b.N, from+drainPage); i++ {
			page = append(page, river.InsertManyParams{Args: noopArgs{N: i}})
		}
		if _, err := client.InsertManyFast(ctx, page); err != nil {
			b.Fatal(err)
		}
	}
	inserted := time.Now()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer stopRiver(client)
	wait(b, &worked)
	end := time.Now()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/inserted.Sub(began).Seconds(), "inserted/s")
	b.ReportMetric(float64(b.N)/end.Sub(inserted).Seconds(), "worked/s")
	b.ReportMetric(float64(b.N)/end.Sub(began).Seconds(), "jobs/s")
}

// BenchmarkDrainHerald: a campaign of b.N recipients of a transactional
// kind (a webhook to a 0 ms provider, 64 sends in flight, the db transport
// on PostgreSQL), its recipients added through the HTTP API in pages of
// drainPage, then started; timed from the start until the last send is
// recorded PROVIDER_ACCEPTED. The leader's fan-out (batches of 10,000,
// looked for every second) and the sends overlap. It reports sent/s and
// how long the fan-out took (the campaign row's started_at to ended_at).
func BenchmarkDrainHerald(b *testing.B) {
	ctx := context.Background()
	h := startHerald(b, nil)
	base := h.base
	var created struct{ ID string }
	if err := call(http.MethodPost, base+"/v1/campaigns", fmt.Sprintf("drain-%d", time.Now().UnixNano()), map[string]any{"kind": "bench", "params": map[string]any{"amount": 1000}}, &created); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < b.N; from += drainPage {
		page := make([]map[string]string, 0, drainPage)
		for i := from; i < min(b.N, from+drainPage); i++ {
			page = append(page, map[string]string{"recipient": fmt.Sprintf("member-%d", i)})
		}
		if err := call(http.MethodPost, base+"/v1/campaigns/"+created.ID+"/recipients", "", map[string]any{"recipients": page}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	began := time.Now()
	if err := call(http.MethodPost, base+"/v1/campaigns/"+created.ID+"/start", "", map[string]any{}, nil); err != nil {
		b.Fatal(err)
	}
	wait(b, &h.recorded)
	end := time.Now()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/end.Sub(began).Seconds(), "sent/s")
	// The fan-out's own time, from the campaign's row: started by the
	// start request, ended by the fan-out's last batch.
	var fanout float64
	if err := h.pool.QueryRow(ctx, `SELECT extract(epoch FROM ended_at - started_at) FROM campaigns WHERE id = $1`, created.ID).Scan(&fanout); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(fanout, "fanout-s")
}

// call sends body as JSON with the development key (and key as the
// Idempotency-Key when set) and decodes the answer into out.
func call(method, url, key string, body, out any) error {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+config.DevAPIKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
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
