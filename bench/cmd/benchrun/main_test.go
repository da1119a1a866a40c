package main

import (
	"reflect"
	"testing"
)

// A ratio divides a run's figure by its peer's of the same scenario and
// round only: the rounds alternate, so each pair ran a moment apart.
func TestRatiosPairTheSameRound(t *testing.T) {
	vs := &versus{Metric: "notifications/s", Peer: "peer", PeerMetric: "messages/s"}
	results := []result{
		{Scenario: "outbox", Round: 1, Name: "herald", Metrics: map[string]float64{"notifications/s": 3000}, versus: vs},
		{Scenario: "outbox", Round: 1, Name: "peer", Metrics: map[string]float64{"messages/s": 1000}},
		{Scenario: "outbox", Round: 2, Name: "herald", Metrics: map[string]float64{"notifications/s": 2000}, versus: vs},
		{Scenario: "outbox", Round: 2, Name: "peer", Metrics: map[string]float64{"messages/s": 500}},
		{Scenario: "other", Round: 3, Name: "herald", Metrics: map[string]float64{"notifications/s": 1}, versus: vs}, // no peer ran
		{Scenario: "outbox", Round: 3, Name: "peer", Metrics: map[string]float64{"messages/s": 0}},                   // its peer failed to report
		{Scenario: "outbox", Round: 3, Name: "herald", Metrics: map[string]float64{"notifications/s": 1}, versus: vs},
	}
	want := []ratio{
		{Scenario: "outbox", Round: 1, Of: "herald notifications/s", Over: "peer messages/s", Value: 3},
		{Scenario: "outbox", Round: 2, Of: "herald notifications/s", Over: "peer messages/s", Value: 4},
	}
	if got := ratiosOf(results); !reflect.DeepEqual(got, want) {
		t.Fatalf("ratios:\n got %+v\nwant %+v", got, want)
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
