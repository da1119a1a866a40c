package main

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// A ratio divides a run's figure by its peer's of the same scenario and
// round only: the rounds alternate, so each pair ran a moment apart.
func TestRatiosPairTheSameRound(t *testing.T) {
	vs := &versus{Metric: "notifications/s", Peer: "peer", PeerMetric: "messages/s"}
	results := []result{
		{Scenario: "outbox", Round: 1, Name: "herald", Metrics: map[string]float64{"notifications/s": 3000}, versus: []*versus{vs}},
		{Scenario: "outbox", Round: 1, Name: "peer", Metrics: map[string]float64{"messages/s": 1000}},
		{Scenario: "outbox", Round: 2, Name: "herald", Metrics: map[string]float64{"notifications/s": 2000}, versus: []*versus{vs}},
		{Scenario: "outbox", Round: 2, Name: "peer", Metrics: map[string]float64{"messages/s": 500}},
		{Scenario: "other", Round: 3, Name: "herald", Metrics: map[string]float64{"notifications/s": 1}, versus: []*versus{vs}}, // no peer ran
		{Scenario: "outbox", Round: 3, Name: "peer", Metrics: map[string]float64{"messages/s": 0}},                              // its peer failed to report
		{Scenario: "outbox", Round: 3, Name: "herald", Metrics: map[string]float64{"notifications/s": 1}, versus: []*versus{vs}},
	}
	want := []ratio{
		{Scenario: "outbox", Round: 1, Of: "herald notifications/s", Over: "peer messages/s", Value: 3},
		{Scenario: "outbox", Round: 2, Of: "herald notifications/s", Over: "peer messages/s", Value: 4},
	}
	if got := ratiosOf(results); !reflect.DeepEqual(got, want) {
		t.Fatalf("ratios:\n got %+v\nwant %+v", got, want)
	}
}

// A run with several ratios gets each, each over its own peer's figure:
// the outbox run's notifications/s over Watermill's, its broker CPU over a
// bare client's.
func TestRatiosOfARunWithTwoPeers(t *testing.T) {
	results := []result{
		{Scenario: "outbox", Round: 1, Name: "herald", Metrics: map[string]float64{"notifications/s": 3000, "rabbitmq-µs/notification": 220}, versus: []*versus{
			{Metric: "notifications/s", Peer: "watermill", PeerMetric: "messages/s", Aim: &aim{Min: 3}},
			{Metric: "rabbitmq-µs/notification", Peer: "bare", PeerMetric: "rabbitmq-µs/msg"},
		}},
		{Scenario: "outbox", Round: 1, Name: "watermill", Metrics: map[string]float64{"messages/s": 1200}},
		{Scenario: "outbox", Round: 1, Name: "bare", Metrics: map[string]float64{"rabbitmq-µs/msg": 200}},
	}
	got := ratiosOf(results)
	want := []ratio{
		{Scenario: "outbox", Round: 1, Of: "herald notifications/s", Over: "watermill messages/s", Value: 2.5, aim: &aim{Min: 3}},
		{Scenario: "outbox", Round: 1, Of: "herald rabbitmq-µs/notification", Over: "bare rabbitmq-µs/msg", Value: 1.1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ratios:\n got %+v\nwant %+v", got, want)
	}
	if v := verdictsOf(results, got); len(v) != 1 || v[0].Figure != "herald notifications/s over watermill messages/s" {
		t.Fatalf("verdicts: got %+v, want the one aimed ratio", v)
	}
}

// With -charts a run that draws a chart gets its own file per round; the
// others, and every run without -charts, get none.
func TestChartFileNamesOneFilePerRunAndRound(t *testing.T) {
	fair := run{Name: "fairness, SQLite", Chart: "fairness-sqlite"}
	for _, c := range []struct {
		name, dir string
		r         run
		round     int
		want      string
	}{
		{"FirstRound", "/c", fair, 1, "/c/fairness-sqlite.svg"},
		{"LaterRound", "/c", fair, 3, "/c/fairness-sqlite-3.svg"},
		{"NoFolder", "", fair, 1, ""},
		{"RunWithoutChart", "/c", run{Name: "end to end, SQLite"}, 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := chartFile(c.dir, c.r, c.round); got != c.want {
				t.Errorf("chartFile(%q, %s, %d) = %q, want %q", c.dir, c.r.Name, c.round, got, c.want)
			}
		})
	}
}

// A fairness run's ratio is its own busy p99 over its own idle p99: a
// versus without a peer divides within the run, round by round.
func TestARatioWithoutAPeerDividesWithinTheRun(t *testing.T) {
	results := []result{
		{Scenario: "fairness", Round: 1, Name: "fair", Metrics: map[string]float64{"busy": 30, "idle": 10}, versus: []*versus{{Metric: "busy", PeerMetric: "idle"}}},
		{Scenario: "fairness", Round: 2, Name: "fair", Metrics: map[string]float64{"busy": 12, "idle": 8}, versus: []*versus{{Metric: "busy", PeerMetric: "idle"}}},
		{Scenario: "fairness", Round: 3, Name: "fair", Metrics: map[string]float64{"idle": 8}, versus: []*versus{{Metric: "busy", PeerMetric: "idle"}}}, // no busy figure
	}
	got := ratiosOf(results)
	if len(got) != 2 || got[0].Value != 3 || got[1].Value != 1.5 || got[0].Over != "idle" {
		t.Fatalf("ratios: %+v", got)
	}
}

// Each figure with an aim is summed up over its rounds: the median (of the
// middle two for an even count), the range, and how many rounds met it,
// whether the aim is a floor (a rate, a ratio) or a ceiling (a p99); and
// what no round reported is shown as missing, not left out.
func TestVerdictsSumUpEachAimedFigureOverItsRounds(t *testing.T) {
	outbox := &versus{Metric: "notifications/s", Peer: "peer", PeerMetric: "messages/s", Aim: &aim{Min: 3}}
	p99 := map[string]aim{"p99-ms": {Max: 250}}
	var results []result
	for i, f := range []struct{ herald, peer, p99 float64 }{{3100, 1000, 90}, {2500, 1000, 260}, {3300, 1000, 70}, {2000, 1000, 250}} {
		results = append(results,
			result{Scenario: "outbox", Round: i + 1, Name: "herald", Metrics: map[string]float64{"notifications/s": f.herald}, versus: []*versus{outbox}},
			result{Scenario: "outbox", Round: i + 1, Name: "peer", Metrics: map[string]float64{"messages/s": f.peer}},
			result{Scenario: "isolation", Round: i + 1, Name: "iso", Metrics: map[string]float64{"p99-ms": f.p99}, aims: p99})
	}
	// A round that did not report the figure is not a round of it, but is
	// counted as missing; so is a ratio whose peer never ran, and a figure
	// no round reported (a misnamed metric) still has its line.
	results = append(results,
		result{Scenario: "isolation", Round: 5, Name: "iso", Metrics: map[string]float64{}, aims: p99},
		result{Scenario: "e2e", Round: 1, Name: "pg", Metrics: map[string]float64{"notifications/s": 4000},
			versus: []*versus{{Metric: "notifications/s", Peer: "river", PeerMetric: "jobs/s", Aim: &aim{Min: 1.25}}},
			aims:   map[string]aim{"notification/s": {Min: 2000}}})
	got := verdictsOf(results, ratiosOf(results))
	for i := range got {
		got[i].values = nil
	}
	want := []verdict{
		{Scenario: "outbox", Figure: "herald notifications/s over peer messages/s", Ratio: true, Aim: "≥ 3", Rounds: 4, Met: 2,
			Median: 2.8, Lowest: 2, Highest: 3.3},
		{Scenario: "isolation", Figure: "iso p99-ms", Aim: "≤ 250", Rounds: 4, Met: 3, Median: 170, Lowest: 70, Highest: 260, Missing: 1},
		{Scenario: "e2e", Figure: "pg notifications/s over river jobs/s", Ratio: true, Aim: "≥ 1.25", Missing: 1},
		{Scenario: "e2e", Figure: "pg notification/s", Aim: "≥ 2000", Missing: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("verdicts:\n got %+v\nwant %+v", got, want)
	}
}

// A run that failed has no figures: its peer's ratio is missing for that
// round and its aims are counted as not reported, while the other rounds
// still count; and the JSON is written whole even when a benchmark printed
// a figure JSON cannot hold.
func TestAFailedRunLeavesTheOthersCounted(t *testing.T) {
	vs := &versus{Metric: "notifications/s", Peer: "peer", PeerMetric: "jobs/s", Aim: &aim{Min: 1}}
	results := []result{
		{Scenario: "e2e", Round: 1, Name: "herald", Metrics: map[string]float64{"notifications/s": 3000}, versus: []*versus{vs}},
		{Scenario: "e2e", Round: 1, Name: "peer", Metrics: map[string]float64{"jobs/s": 1000, "odd": math.Inf(1)}},
		{Scenario: "e2e", Round: 2, Name: "herald", Error: "SKIP the broker is down", versus: []*versus{vs}},
		{Scenario: "e2e", Round: 2, Name: "peer", Metrics: map[string]float64{"jobs/s": 1000}},
		// A figure a ratio uses, printed as +Inf: no ratio, not an infinite one.
		{Scenario: "e2e", Round: 3, Name: "herald", Metrics: map[string]float64{"notifications/s": math.Inf(1)}, versus: []*versus{vs}},
		{Scenario: "e2e", Round: 3, Name: "peer", Metrics: map[string]float64{"jobs/s": 1000}},
	}
	results = finite(results)
	ratios := ratiosOf(results)
	v := verdictsOf(results, ratios)
	if len(ratios) != 1 || len(v) != 1 || v[0].Rounds != 1 || v[0].Met != 1 || v[0].Missing != 2 {
		t.Fatalf("ratios %+v, verdicts %+v; want round 1's ratio, met once, missing twice", ratios, v)
	}
	if _, err := json.Marshal(map[string]any{"results": results, "ratios": ratios, "aims": v}); err != nil {
		t.Fatalf("the results cannot be written: %v", err)
	}
}

// why finds a benchmark's own reason for giving no figures.
func TestWhyABenchmarkGaveNoFigures(t *testing.T) {
	for out, want := range map[string]string{
		"goos: linux\nBenchmarkGoAPIRiver\n    goapi_test.go:55: no PostgreSQL at x: failed to connect\n        \tdial error\n--- SKIP: BenchmarkGoAPIRiver\nPASS\n": "SKIP: goapi_test.go:55: no PostgreSQL at x: failed to connect",
		"BenchmarkDrainHerald\n    drain_test.go:90: recorded 5 of 10\n--- FAIL: BenchmarkDrainHerald\nFAIL\n":                                                       "FAIL: drain_test.go:90: recorded 5 of 10",
		"panic: boom\n": "panic: boom",
	} {
		if got := why(out); got != want {
			t.Errorf("why(%q) = %q, want %q", out, got, want)
		}
	}
}

// A run starts without the settings benchrun makes per run, so an
// exported one cannot change what a scenario measures, and with the
// others (the isolation run's recipients) as they are.
func TestARunStartsFromBenchrunsEnvironmentLessItsOwnSettings(t *testing.T) {
	t.Setenv("HERALD_BENCH_PROVIDER_MS", "100")
	t.Setenv("HERALD_BENCH_DATABASE", "postgres://elsewhere/db")
	t.Setenv("HERALD_BENCH_ISOLATION_RECIPIENTS", "1000")
	env := runEnviron()
	for _, kv := range env {
		if strings.HasPrefix(kv, "HERALD_BENCH_PROVIDER_MS=") || strings.HasPrefix(kv, "HERALD_BENCH_DATABASE=") {
			t.Fatalf("%s passed to a run", kv)
		}
	}
	if !slices.Contains(env, "HERALD_BENCH_ISOLATION_RECIPIENTS=1000") {
		t.Fatal("HERALD_BENCH_ISOLATION_RECIPIENTS was not passed")
	}
}
