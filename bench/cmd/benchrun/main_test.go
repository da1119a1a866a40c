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
