// Command benchrun runs herald's benchmark scenarios with one command each,
// prints a table and writes the figures as JSON:
//
//	go run ./bench/cmd/benchrun e2e            # end to end: SQLite, PostgreSQL, PostgreSQL+RabbitMQ, at 0 and 100 ms
//	go run ./bench/cmd/benchrun goapi          # Client.Enqueue beside River's Insert (bench/peers)
//	go run ./bench/cmd/benchrun outbox         # PostgreSQL+RabbitMQ end to end beside Watermill's outbox (bench/peers)
//	go run ./bench/cmd/benchrun providers      # 100 ms providers: webhook, APNs
//	go run ./bench/cmd/benchrun fairness       # two tenants in one lane, SQLite, PostgreSQL and PostgreSQL+RabbitMQ
//	go run ./bench/cmd/benchrun isolation      # 100 transactional/s beside a million-recipient campaign
//	go run ./bench/cmd/benchrun campaign relay # fan-out, a campaign's drain beside River's; the relay's drain beside a bare publisher
//	go run ./bench/cmd/benchrun all
//
// Each benchmark runs in its own test binary, built once per package and
// started directly, and reports its own peak RSS (bench/peakrss), which the
// table shows: that benchmark's process alone, not the rabbitmqctl it ran.
// A run that fails or skips (a server it needs is down) is shown as failed
// in the table and the JSON, the others go on, and benchrun exits 1 at the
// end. Each run starts from benchrun's environment less the settings
// benchrun makes per run (runEnviron), and every run, herald's and its
// peers', uses the PostgreSQL server of HERALD_BENCH_POSTGRES_URL. PostgreSQL runs get a fresh database on
// HERALD_BENCH_POSTGRES_URL's server (default the machine's, user postgres),
// dropped after. -json names the JSON file (default
// bench-<scenarios>-<time>.json); -count repeats each benchmark, in turn, so
// paired runs alternate; a run measured against a peer (herald beside River,
// beside Watermill) shows its ratio to the peer's run of the same round.
// -cpuprofile DIR writes each run's CPU profile there; -charts DIR has the
// fairness and isolation runs draw their latency and backlog over time
// there as SVG (fairness-sqlite.svg, …; -2, -3… for later rounds). Figures
// are what the machine gave: read the load printed beside each.
//
// A figure issue 12 set an aim for (a ratio to a peer, a rate, a p99, a
// time) is summed up last: its median, lowest and highest over the rounds,
// the aim, and in how many rounds it was met. One round says little on a
// shared machine whose speed moves by a third within minutes; the median
// of alternated rounds is what the docs report.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/bench/peakrss"
	"github.com/heraldhq/herald/internal/testpg"
)

// run is one benchmark of a scenario.
type run struct {
	Scenario  string
	Name      string // shown in the table
	Dir       string // package folder, from the module root
	Bench     string // -test.bench pattern
	Benchtime string
	Postgres  bool // a fresh database in HERALD_BENCH_DATABASE
	Env       []string
	// Chart names the SVG the run draws with -charts (without .svg); ""
	// for a run that draws none.
	Chart string
	// Versus are the ratios of this run's figures to a peer run's of the
	// same scenario and round (or to its own, versus.Peer "").
	Versus []*versus
	// Aims are the targets for this run's own metrics, by metric name.
	Aims map[string]aim
}

// versus names the figures a ratio divides: Metric of the run it is set
// on over PeerMetric of the run named Peer, or of the run itself when Peer
// is "" (a run's figure beside its own baseline). Aim, when set, is the
// ratio's target.
type versus struct {
	Metric, Peer, PeerMetric string
	Aim                      *aim
}

// aim is a figure's target: at least Min, or at most Max when Max is set.
type aim struct {
	Min, Max float64
}

func (a aim) met(v float64) bool {
	if a.Max > 0 {
		return v <= a.Max
	}
	return v >= a.Min
}

func (a aim) String() string {
	if a.Max > 0 {
		return "≤ " + strconv.FormatFloat(a.Max, 'f', -1, 64)
	}
	return "≥ " + strconv.FormatFloat(a.Min, 'f', -1, 64)
}

var scenarios = map[string][]run{
	// Each 0 ms run's figure over River's, measured in the same round on
	// the same PostgreSQL (one Insert a transaction from 8 goroutines).
	"e2e": {
		{Name: "end to end, SQLite", Dir: "bench", Bench: "^BenchmarkEndToEnd$", Benchtime: "10000x", Versus: []*versus{versusRiverInsert(nil)}},
		{Name: "end to end, PostgreSQL", Dir: "bench", Bench: "^BenchmarkEndToEnd$", Benchtime: "10000x", Postgres: true,
			Versus: []*versus{versusRiverInsert(&aim{Min: 1.25})}},
		{Name: "end to end, PostgreSQL+RabbitMQ", Dir: "bench", Bench: "^BenchmarkEndToEndRabbitMQ$", Benchtime: "10000x", Versus: []*versus{versusRiverInsert(nil)}},
		{Name: riverInsert, Dir: "bench/peers", Bench: "^BenchmarkGoAPIRiver$", Benchtime: "20000x"},
		{Name: "end to end, SQLite, 100 ms provider", Dir: "bench", Bench: "^BenchmarkEndToEnd$", Benchtime: "10000x", Env: []string{"HERALD_BENCH_PROVIDER_MS=100"}},
		// Each notification is one send: the issue's ≥ 2,000 sends/s
		// from one process with a 100 ms provider, end to end.
		{Name: "end to end, PostgreSQL, 100 ms provider", Dir: "bench", Bench: "^BenchmarkEndToEnd$", Benchtime: "10000x", Postgres: true, Env: []string{"HERALD_BENCH_PROVIDER_MS=100"},
			Aims: map[string]aim{"notifications/s": {Min: 2000}}},
		{Name: "end to end, PostgreSQL+RabbitMQ, 100 ms provider", Dir: "bench", Bench: "^BenchmarkEndToEndRabbitMQ$", Benchtime: "10000x", Env: []string{"HERALD_BENCH_PROVIDER_MS=100"}},
	},
	"goapi": {
		{Name: "Go API, herald Client.Enqueue", Dir: "bench/peers", Bench: "^BenchmarkGoAPIHerald$", Benchtime: "20000x",
			Versus: []*versus{versusRiverInsert(&aim{Min: 1})}},
		{Name: riverInsert, Dir: "bench/peers", Bench: "^BenchmarkGoAPIRiver$", Benchtime: "20000x"},
	},
	// herald's PostgreSQL+RabbitMQ path against Watermill's outbox (SQL
	// publisher, forwarder, quorum queue with confirms, consumer), each
	// from the first write to the last message handled; and the broker's
	// CPU a notification on that path over what a bare client's messages
	// cost it at about the same pace (publish, confirm, deliver, ack).
	"outbox": {
		{Name: "end to end, PostgreSQL+RabbitMQ", Dir: "bench", Bench: "^BenchmarkEndToEndRabbitMQ$", Benchtime: "20000x",
			Versus: []*versus{
				{Metric: "notifications/s", Peer: "Watermill outbox, PostgreSQL+RabbitMQ", PeerMetric: "messages/s", Aim: &aim{Min: 3}},
				{Metric: "rabbitmq-µs/notification", Peer: bareRoundTrip, PeerMetric: "rabbitmq-µs/msg"},
			}},
		{Name: "Watermill outbox, PostgreSQL+RabbitMQ", Dir: "bench/peers", Bench: "^BenchmarkWatermillOutbox$", Benchtime: "20000x"},
		{Name: bareRoundTrip, Dir: "bench", Bench: "^BenchmarkBrokerRoundTrip$", Benchtime: "20000x"},
	},
	"providers": {
		{Name: "webhook, 100 ms", Dir: "bench", Bench: "^BenchmarkSendsWebhook100ms$", Benchtime: "20000x", Aims: map[string]aim{"sends/s": {Min: 2000}}},
		{Name: "APNs, 100 ms", Dir: "bench", Bench: "^BenchmarkSendsAPNs100ms$", Benchtime: "20000x", Aims: map[string]aim{"sends/s": {Min: 2000}}},
	},
	"fairness": {
		{Name: "fairness, SQLite", Dir: "bench", Bench: "^BenchmarkFairness$", Benchtime: "1x", Chart: "fairness-sqlite", Versus: []*versus{busyOverIdle}, Aims: fairAims},
		{Name: "fairness, PostgreSQL", Dir: "bench", Bench: "^BenchmarkFairness$", Benchtime: "1x", Postgres: true, Chart: "fairness-postgresql", Versus: []*versus{busyOverIdle}, Aims: fairAims},
		{Name: "fairness, PostgreSQL+RabbitMQ", Dir: "bench", Bench: "^BenchmarkFairnessRabbitMQ$", Benchtime: "1x", Postgres: true, Chart: "fairness-rabbitmq", Versus: []*versus{busyOverIdle}, Aims: fairAims},
		{Name: "fairness of scopes, SQLite", Dir: "bench", Bench: "^BenchmarkFairnessScopes$", Benchtime: "1x", Chart: "fairness-scopes-sqlite", Versus: []*versus{busyOverIdle}, Aims: fairAims},
		{Name: "fairness of scopes, PostgreSQL", Dir: "bench", Bench: "^BenchmarkFairnessScopes$", Benchtime: "1x", Postgres: true, Chart: "fairness-scopes-postgresql", Versus: []*versus{busyOverIdle}, Aims: fairAims},
		{Name: "fairness of scopes, PostgreSQL+RabbitMQ", Dir: "bench", Bench: "^BenchmarkFairnessScopesRabbitMQ$", Benchtime: "1x", Postgres: true, Chart: "fairness-scopes-rabbitmq", Versus: []*versus{busyOverIdle}, Aims: fairAims},
	},
	"isolation": {
		{Name: "isolation, campaign of HERALD_BENCH_ISOLATION_RECIPIENTS (1,000,000), PostgreSQL", Dir: "bench", Bench: "^BenchmarkIsolation$", Benchtime: "1x", Postgres: true, Chart: "isolation-postgresql",
			Aims: map[string]aim{"tx-p99-ms": {Max: 250}}},
		{Name: "isolation, campaign of HERALD_BENCH_ISOLATION_RECIPIENTS (1,000,000), PostgreSQL+RabbitMQ", Dir: "bench", Bench: "^BenchmarkIsolationRabbitMQ$", Benchtime: "1x", Postgres: true, Chart: "isolation-postgresql-rabbitmq",
			Aims: map[string]aim{"tx-p99-ms": {Max: 250}}},
	},
	// The fan-out of a million alone; then a campaign's drain (fan-out and
	// sends, db transport, 0 ms provider) against River working as many
	// batch-inserted no-op jobs.
	"campaign": {
		{Name: "campaign fan-out, 1,000,000 recipients, PostgreSQL", Dir: "bench", Bench: "^BenchmarkCampaignFanOut$", Benchtime: "1x",
			Env: []string{"HERALD_BENCH_CAMPAIGN_RECIPIENTS=1000000"}, Aims: map[string]aim{"fanout-s": {Max: 10}},
			// Beside River's batch insert of as many jobs (the drain's
			// River run inserts them first): the fan-out's headline
			// figure as a ratio too.
			Versus: []*versus{{Metric: "recipients/s", Peer: "batch-inserted jobs, River", PeerMetric: "inserted/s"}}},
		{Name: "campaign drain, herald, PostgreSQL", Dir: "bench/peers", Bench: "^BenchmarkDrainHerald$", Benchtime: "100000x",
			Versus: []*versus{{Metric: "sent/s", Peer: "batch-inserted jobs, River", PeerMetric: "worked/s", Aim: &aim{Min: 1}}}},
		{Name: "batch-inserted jobs, River", Dir: "bench/peers", Bench: "^BenchmarkDrainRiver$", Benchtime: "100000x"},
	},
	// The relay's drain of a filled outbox, over what the broker takes
	// from a bare client publishing the same messages the same way (its
	// ceiling on this machine), measured in the same round.
	"relay": {
		{Name: "relay drain, PostgreSQL+RabbitMQ", Dir: "bench", Bench: "^BenchmarkRelayDrain$", Benchtime: "50000x",
			Versus: []*versus{{Metric: "rows/s", Peer: "bare publisher, RabbitMQ", PeerMetric: "msgs/s"}}, Aims: map[string]aim{"rows/s": {Min: 30000}}},
		{Name: "bare publisher, RabbitMQ", Dir: "bench", Bench: "^BenchmarkBrokerCeiling$", Benchtime: "50000x"},
	},
}

// riverInsert is the name of River's Insert run, the peer of herald's end
// to end and Go API runs.
const riverInsert = "Go API, River Insert"

// bareRoundTrip is the name of the bare client's broker round trip, the
// floor of the PostgreSQL+RabbitMQ path's broker CPU.
const bareRoundTrip = "bare round trip, RabbitMQ, 2,000 msgs/s"

// versusRiverInsert divides a herald run's notifications/s by River's
// Insert run of the same round, with aim a (nil for none).
func versusRiverInsert(a *aim) *versus {
	return &versus{Metric: "notifications/s", Peer: riverInsert, PeerMetric: "jobs/s", Aim: a}
}

// busyOverIdle is a fairness run's small tenant's p99 beside the big
// tenant's backlog over its own p99 alone; fairAims bounds the p99 beside
// the backlog.
var (
	busyOverIdle = &versus{Metric: "B-busy-p99-ms", PeerMetric: "B-idle-p99-ms", Aim: &aim{Max: 2}}
	fairAims     = map[string]aim{"B-busy-p99-ms": {Max: 250}}
)

// result is one benchmark's figures.
type result struct {
	Scenario string             `json:"scenario"`
	Round    int                `json:"round"`
	Name     string             `json:"name"`
	Bench    string             `json:"benchmark"`
	N        int64              `json:"n"`
	Metrics  map[string]float64 `json:"metrics"`
	PeakRSS  int64              `json:"peak_rss_bytes"`
	Load     string             `json:"load_before"`
	Took     string             `json:"took"`
	Chart    string             `json:"chart,omitempty"` // the SVG it drew, with -charts
	// Error is why the run gave no figures (it failed, or skipped for want
	// of a server); the rounds go on without it.
	Error  string `json:"error,omitempty"`
	versus []*versus
	aims   map[string]aim
}

// ratio is one run's figure over its peer's in the same round.
type ratio struct {
	Scenario string  `json:"scenario"`
	Round    int     `json:"round"`
	Of       string  `json:"of"`
	Over     string  `json:"over"`
	Value    float64 `json:"value"`
	aim      *aim
}

// verdict sums up one figure that has an aim over the rounds that measured
// it: a ratio (Ratio) or a run's own metric.
type verdict struct {
	Scenario string  `json:"scenario"`
	Figure   string  `json:"figure"`
	Ratio    bool    `json:"ratio"`
	Aim      string  `json:"aim"`
	Rounds   int     `json:"rounds"`
	Met      int     `json:"met"`
	Median   float64 `json:"median"`
	Lowest   float64 `json:"lowest"`
	Highest  float64 `json:"highest"`
	Missing  int     `json:"missing"` // rounds that ran it but reported no figure
	values   []float64
}

func main() {
	jsonPath := flag.String("json", "", "write the figures to this file (default bench-<scenarios>-<time>.json)")
	count := flag.Int("count", 1, "run each benchmark this many times, in turn")
	profiles := flag.String("cpuprofile", "", "write each run's CPU profile into this folder")
	charts := flag.String("charts", "", "have the fairness and isolation runs draw their charts (SVG) in this folder")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: benchrun [-json FILE] [-count N] [-cpuprofile DIR] [-charts DIR] SCENARIO...\nscenarios: %s, all\n", strings.Join(names(), ", "))
	}
	flag.Parse()
	var runs []run
	for _, s := range flag.Args() {
		if s == "all" {
			for _, n := range names() {
				runs = append(runs, tagged(n)...)
			}
			continue
		}
		if _, ok := scenarios[s]; !ok {
			fmt.Fprintf(os.Stderr, "benchrun: no scenario %q (have %s, all)\n", s, strings.Join(names(), ", "))
			os.Exit(2)
		}
		runs = append(runs, tagged(s)...)
	}
	if len(runs) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	root, err := moduleRoot()
	if err != nil {
		fail(err)
	}
	bins, err := os.MkdirTemp("", "benchrun-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(bins)
	for _, dir := range []*string{profiles, charts} {
		if *dir == "" {
			continue
		}
		if *dir, err = filepath.Abs(*dir); err == nil {
			err = os.MkdirAll(*dir, 0o755)
		}
		if err != nil {
			fail(err)
		}
	}
	var results []result
	failed := 0
	for round := 1; round <= *count; round++ {
		for _, r := range runs {
			profile := ""
			if *profiles != "" {
				profile = filepath.Join(*profiles, fmt.Sprintf("%s-%d.pprof", strings.TrimPrefix(strings.Trim(r.Bench, "^$"), "Benchmark"), round))
			}
			chart := chartFile(*charts, r, round)
			if chart != "" {
				r.Env = append(slices.Clone(r.Env), "HERALD_BENCH_CHART_DIR="+filepath.Dir(chart),
					"HERALD_BENCH_CHART_NAME="+strings.TrimSuffix(filepath.Base(chart), ".svg"))
			}
			res, err := execute(root, bins, r, profile)
			if err == nil && chart != "" {
				if _, err = os.Stat(chart); err != nil {
					err = fmt.Errorf("drew no chart: %w", err)
				} else {
					res.Chart = chart
				}
			}
			if err != nil {
				// The other runs go on, and the table and the JSON say
				// which failed: one failure in a long -count run costs
				// its own figures, not every round's.
				fmt.Fprintf(os.Stderr, "benchrun: %s: failed: %v\n", r.Name, err)
				res = result{Scenario: r.Scenario, Name: r.Name, Error: firstLine(err.Error()), versus: r.Versus, aims: r.Aims}
				failed++
			} else {
				fmt.Fprintf(os.Stderr, "benchrun: %s: done in %s\n", r.Name, res.Took)
			}
			res.Round = round
			results = append(results, res)
		}
	}
	results = finite(results) // before the ratios and medians are made of them
	ratios := ratiosOf(results)
	verdicts := verdictsOf(results, ratios)
	table(results, ratios, verdicts)
	if *jsonPath == "" {
		*jsonPath = fmt.Sprintf("bench-%s-%s.json", strings.Join(flag.Args(), "-"), time.Now().UTC().Format("20060102T150405Z"))
	}
	out, err := json.MarshalIndent(map[string]any{
		"machine": map[string]any{"cpus": runtime.NumCPU(), "goos": runtime.GOOS, "goarch": runtime.GOARCH, "go": runtime.Version()},
		"results": results,
		"ratios":  ratios,
		"aims":    verdicts,
	}, "", "  ")
	if err != nil {
		fail(fmt.Errorf("encode the results: %w", err))
	}
	if err := os.WriteFile(*jsonPath, append(out, '\n'), 0o644); err != nil {
		fail(err)
	}
	fmt.Printf("\nwrote %s\n", *jsonPath)
	if failed > 0 {
		fail(fmt.Errorf("%d of %d runs failed (their rows say why)", failed, len(results)))
	}
}

// finite drops the figures JSON cannot hold (a benchmark may print +Inf
// or NaN), so the file is always written whole.
func finite(results []result) []result {
	for _, r := range results {
		maps.DeleteFunc(r.Metrics, func(_ string, v float64) bool { return math.IsInf(v, 0) || math.IsNaN(v) })
	}
	return results
}

// why is what a test binary's verbose output says of a benchmark that
// gave no figures: its "--- SKIP" or "--- FAIL" with the first line the
// benchmark logged (a benchmark's log comes before that line), else the
// output's last line.
func why(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, l := range lines {
		verdict, ok := strings.CutPrefix(l, "--- ")
		if !ok || !(strings.HasPrefix(verdict, "SKIP") || strings.HasPrefix(verdict, "FAIL")) {
			continue
		}
		verdict, _, _ = strings.Cut(verdict, " ") // "SKIP:"
		// The log: the indented lines after the benchmark's name, before
		// this line (or after it, as a test's is).
		for j := i - 1; j >= 0 && strings.HasPrefix(lines[j], "    "); j-- {
			if j == 0 || !strings.HasPrefix(lines[j-1], "    ") {
				return verdict + " " + strings.TrimSpace(lines[j])
			}
		}
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    ") {
			return verdict + " " + strings.TrimSpace(lines[i+1])
		}
		return verdict
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func names() []string {
	var out []string
	for n := range scenarios {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func tagged(s string) []run {
	out := append([]run(nil), scenarios[s]...)
	for i := range out {
		out[i].Scenario = s
	}
	return out
}

// chartFile is the SVG r draws in round with -charts dir: r.Chart.svg in
// the first round, r.Chart-2.svg in the second and so on; "" when there
// is no dir or r draws no chart.
func chartFile(dir string, r run, round int) string {
	if dir == "" || r.Chart == "" {
		return ""
	}
	if round > 1 {
		return filepath.Join(dir, fmt.Sprintf("%s-%d.svg", r.Chart, round))
	}
	return filepath.Join(dir, r.Chart+".svg")
}

// execute builds r's package tests once and runs r's benchmark, with its
// CPU profile written to profile unless that is empty.
func execute(root, bins string, r run, profile string) (result, error) {
	bin := filepath.Join(bins, strings.ReplaceAll(r.Dir, "/", "_")+".test")
	if _, err := os.Stat(bin); err != nil {
		build := exec.Command("go", "test", "-c", "-o", bin, ".")
		build.Dir = filepath.Join(root, r.Dir)
		if out, err := build.CombinedOutput(); err != nil {
			return result{}, fmt.Errorf("build %s: %v\n%s", r.Dir, err, out)
		}
	}
	rss := filepath.Join(bins, "peak-rss")
	_ = os.Remove(rss)
	env := append(runEnviron(), r.Env...)
	env = append(env, peakrss.EnvFile+"="+rss, testpg.EnvURL+"="+benchPostgresURL())
	if r.Postgres {
		dbURL, drop, err := freshDatabase()
		if err != nil {
			return result{}, err
		}
		defer drop()
		env = append(env, "HERALD_BENCH_DATABASE="+dbURL)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	// -test.v: a benchmark that skips itself says why only in verbose
	// output.
	args := []string{"-test.run=^$", "-test.bench=" + r.Bench, "-test.benchtime=" + r.Benchtime, "-test.count=1", "-test.v"}
	if profile != "" {
		args = append(args, "-test.cpuprofile="+profile)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join(root, r.Dir)
	cmd.Env = env
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began).Round(time.Second)
	if err != nil {
		os.Stderr.Write(stdout.Bytes())
		return result{}, fmt.Errorf("%v: %s", err, why(stdout.String()))
	}
	res := result{Scenario: r.Scenario, Name: r.Name, Load: strings.Join(strings.Fields(string(load))[:3], " "), Took: took.String(),
		versus: r.Versus, aims: r.Aims}
	// The process's own peak, as it reported it (peakrss): wait4's is
	// also that of every child it ran (rabbitmqctl's, say).
	if raw, err := os.ReadFile(rss); err == nil {
		res.PeakRSS, _ = strconv.ParseInt(string(raw), 10, 64)
	} else if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.PeakRSS = ru.Maxrss * 1024 // kilobytes on Linux
	}
	out := stdout.String()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		res.Bench = f[0]
		res.N, _ = strconv.ParseInt(f[1], 10, 64)
		res.Metrics = map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				res.Metrics[f[i+1]] = v
			}
		}
	}
	if res.Bench == "" {
		os.Stderr.WriteString(out)
		return result{}, fmt.Errorf("no benchmark line: %s", why(out))
	}
	return res, nil
}

// runEnviron is the environment a run starts from: benchrun's own, less
// what benchrun sets for each run (a run's database, its provider's
// latency, its instances, its chart, the server tests find PostgreSQL
// on), so an exported value cannot quietly change what a scenario
// measures. Other HERALD_BENCH_ settings pass (the isolation run's
// recipients, say).
func runEnviron() []string {
	set := []string{"HERALD_BENCH_DATABASE", "HERALD_BENCH_PROVIDER_MS", "HERALD_BENCH_INSTANCES", "HERALD_BENCH_CHART_DIR",
		"HERALD_BENCH_CHART_NAME", peakrss.EnvFile, testpg.EnvURL}
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(set, k)
	})
}

// benchPostgresURL is the server every run uses: HERALD_BENCH_POSTGRES_URL,
// by default the machine's. Runs that make their own schema or database
// (through testpg) get it as HERALD_TEST_POSTGRES_URL, so every figure of
// a round, herald's and its peers', comes from the same server.
func benchPostgresURL() string {
	if base := os.Getenv("HERALD_BENCH_POSTGRES_URL"); base != "" {
		return base
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// freshDatabase creates a database for one run and returns its URL and
// what drops it.
func freshDatabase() (string, func(), error) {
	base := benchPostgresURL()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("PostgreSQL at %s: %w", redact(base), err)
	}
	name := fmt.Sprintf("herald_bench_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return "", nil, err
	}
	u, _ := url.Parse(base)
	u.Path = "/" + name
	return u.String(), func() {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(ctx)
	}, nil
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// ratiosOf divides each result that has a peer by that peer's result of
// the same scenario and round (by itself when its versus names no peer).
func ratiosOf(results []result) []ratio {
	var out []ratio
	for _, r := range results {
		for _, v := range r.versus {
			peer := v.Peer
			if peer == "" {
				peer = r.Name
			}
			for _, p := range results {
				if p.Scenario != r.Scenario || p.Round != r.Round || p.Name != peer {
					continue
				}
				of, ok := r.Metrics[v.Metric]
				if over := p.Metrics[v.PeerMetric]; ok && over > 0 {
					ofName, overName := ratioNames(r, v)
					out = append(out, ratio{Scenario: r.Scenario, Round: r.Round,
						Of: ofName, Over: overName, Value: of / over, aim: v.Aim})
				}
			}
		}
	}
	return out
}

// ratioNames are the names of what v divides for r: r's figure, over its
// peer's (over r's other figure when v names no peer).
func ratioNames(r result, v *versus) (of, over string) {
	of = r.Name + " " + v.Metric
	if v.Peer == "" {
		return of, v.PeerMetric
	}
	return of, v.Peer + " " + v.PeerMetric
}

// verdictsOf gathers every figure that has an aim, ratios first, each
// over the rounds that measured it, in the order they first appear. A run
// that did not report an aimed figure (a metric misnamed, a peer missing)
// counts as Missing, so the summary shows it rather than leave it out.
func verdictsOf(results []result, ratios []ratio) []verdict {
	var out []verdict
	at := func(scenario, fig string, isRatio bool, a aim) *verdict {
		i := slices.IndexFunc(out, func(d verdict) bool { return d.Scenario == scenario && d.Figure == fig })
		if i < 0 {
			out = append(out, verdict{Scenario: scenario, Figure: fig, Ratio: isRatio, Aim: a.String()})
			i = len(out) - 1
		}
		return &out[i]
	}
	add := func(d *verdict, a aim, v float64) {
		d.values = append(d.values, v)
		d.Rounds++
		if a.met(v) {
			d.Met++
		}
	}
	for _, q := range ratios {
		if q.aim != nil {
			add(at(q.Scenario, q.Of+" over "+q.Over, true, *q.aim), *q.aim, q.Value)
		}
	}
	for _, r := range results {
		for _, v := range r.versus {
			if v.Aim == nil {
				continue
			}
			of, over := ratioNames(r, v)
			if !slices.ContainsFunc(ratios, func(q ratio) bool { return q.Scenario == r.Scenario && q.Round == r.Round && q.Of == of }) {
				at(r.Scenario, of+" over "+over, true, *v.Aim).Missing++
			}
		}
		for _, m := range slices.Sorted(maps.Keys(r.aims)) {
			d := at(r.Scenario, r.Name+" "+m, false, r.aims[m])
			if v, ok := r.Metrics[m]; ok {
				add(d, r.aims[m], v)
			} else {
				d.Missing++
			}
		}
	}
	for i := range out {
		d := &out[i]
		if len(d.values) == 0 {
			continue
		}
		v := slices.Sorted(slices.Values(d.values))
		d.Lowest, d.Highest = v[0], v[len(v)-1]
		d.Median = (v[(len(v)-1)/2] + v[len(v)/2]) / 2
	}
	return out
}

// figure prints a measured value: whole above 100, else to two places.
func figure(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// table prints one row per result with its metrics, then the ratios, then
// the figures that have aims.
func table(results []result, ratios []ratio, verdicts []verdict) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "scenario\tbenchmark\tn\tfigures\tpeak RSS\tload before\ttook")
	for _, r := range results {
		var keys []string
		for k := range r.Metrics {
			if k != "ns/op" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var figs []string
		for _, k := range keys {
			figs = append(figs, fmt.Sprintf("%s %s", strconv.FormatFloat(r.Metrics[k], 'f', -1, 64), k))
		}
		if r.Error != "" {
			fmt.Fprintf(w, "%s\t%s\t—\tfailed: %s\t—\t%s\t%s\n", r.Scenario, r.Name, r.Error, r.Load, r.Took)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d MiB\t%s\t%s\n", r.Scenario, r.Name, r.N, strings.Join(figs, ", "), r.PeakRSS>>20, r.Load, r.Took)
	}
	w.Flush()
	if len(ratios) > 0 {
		fmt.Println()
		w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "scenario\tround\tratio\tof\tover")
		for _, q := range ratios {
			fmt.Fprintf(w, "%s\t%d\t%.2f×\t%s\t%s\n", q.Scenario, q.Round, q.Value, q.Of, q.Over)
		}
		w.Flush()
	}
	if len(verdicts) == 0 {
		return
	}
	fmt.Println()
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "scenario\tfigure\tmedian\trange\taim\tmet")
	for _, d := range verdicts {
		unit := ""
		if d.Ratio {
			unit = "×"
		}
		median, span, met := "—", "—", fmt.Sprintf("%d of %d rounds", d.Met, d.Rounds)
		if d.Rounds > 0 {
			median, span = figure(d.Median)+unit, figure(d.Lowest)+"–"+figure(d.Highest)+unit
		}
		if d.Missing > 0 {
			met += fmt.Sprintf("; not reported in %d", d.Missing)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s%s\t%s\n", d.Scenario, d.Figure, median, span, d.Aim, unit, met)
	}
	w.Flush()
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run benchrun inside herald's module")
	}
	// bench/peers is a module of its own: its root's root is herald's.
	dir := filepath.Dir(mod)
	if filepath.Base(dir) == "peers" {
		dir = filepath.Dir(filepath.Dir(dir))
	}
	return dir, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchrun:", err)
	os.Exit(1)
}
