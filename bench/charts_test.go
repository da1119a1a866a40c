package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/bench/chart"
)

// chartDir is where the isolation and fairness runs write their charts
// (HERALD_BENCH_CHART_DIR); empty, the default, draws none, so a plain
// go test -bench writes nothing into the tree.
func chartDir() string { return os.Getenv("HERALD_BENCH_CHART_DIR") }

// writeChart writes c to chartDir as name.svg, or as
// HERALD_BENCH_CHART_NAME.svg when that is set (benchrun names each run's
// file).
func writeChart(b *testing.B, name string, c *chart.Chart) {
	b.Helper()
	if n := os.Getenv("HERALD_BENCH_CHART_NAME"); n != "" {
		name = n
	}
	path := filepath.Join(chartDir(), name+".svg")
	if err := c.WriteFile(path); err != nil {
		b.Fatal(err)
	}
	b.Logf("chart written to %s", path)
}

// storeName names the store HERALD_BENCH_DATABASE selects, for a chart's
// title and file.
func storeName() string {
	if strings.HasPrefix(os.Getenv("HERALD_BENCH_DATABASE"), "postgres") {
		return "PostgreSQL"
	}
	return "SQLite"
}

// machineNote is a chart's small print: the load average as the run
// began and the CPUs it shared, since a loaded machine moves every figure.
func machineNote() string {
	load := "unknown"
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			load = strings.Join(f[:3], " ")
		}
	}
	return fmt.Sprintf("Load average %s as the run began, %d CPUs (herald, its store and the load generator on them); %s",
		load, runtime.NumCPU(), writeBack())
}

// writeBack describes the kernel's dirty-page write-back limits: left at
// their defaults (a share of RAM), PostgreSQL's checkpoints stall every
// commit while a campaign's fan-out writes (README, Running on
// PostgreSQL), so a PostgreSQL run's latencies depend on them.
func writeBack() string {
	read := func(name string) string {
		raw, err := os.ReadFile("/proc/sys/vm/" + name)
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(raw))
	}
	limit := func(bytes, ratio string) string {
		if bytes != "0" && bytes != "?" {
			return bytes + " bytes"
		}
		return ratio + "% of RAM"
	}
	return fmt.Sprintf("kernel write-back from %s, writers held at %s",
		limit(read("dirty_background_bytes"), read("dirty_background_ratio")), limit(read("dirty_bytes"), read("dirty_ratio")))
}

// backlogSampler reads a backlog every 250 ms from began until stopped.
type backlogSampler struct {
	stop   chan struct{}
	done   chan struct{}
	counts []chart.Count
}

// sampleBacklog starts reading read every 250 ms; what it read is the
// sampler's once stopped. read must be cheap (atomic counters): it runs
// beside the run it measures.
func sampleBacklog(began time.Time, read func() int64) *backlogSampler {
	s := &backlogSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			s.counts = append(s.counts, chart.Count{At: time.Since(began), N: max(read(), 0)})
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling, once the last sample is read, and returns the
// samples.
func (s *backlogSampler) Stop() []chart.Count {
	close(s.stop)
	<-s.done
	return s.counts
}

// sends returns the sends begun since began that have a provider call, for
// a chart: when each was posted and how long it took.
func (l *fairLatencies) sends(began time.Time) []chart.Send {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []chart.Send
	for id, at := range l.begun {
		if end, ok := l.ended[id]; ok && !at.Before(began) {
			out = append(out, chart.Send{At: at.Sub(began), Latency: end.Sub(at)})
		}
	}
	slices.SortFunc(out, func(a, b chart.Send) int { return int(a.At - b.At) })
	return out
}

// msText writes a latency for a chart's subtitle to three figures:
// 8.42 ms, 56 ms, 14.3 s.
func msText(d time.Duration) string {
	if d >= time.Second {
		return strconv.FormatFloat(d.Seconds(), 'g', 3, 64) + " s"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'g', 3, 64) + " ms"
}
