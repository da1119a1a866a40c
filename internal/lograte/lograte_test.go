package lograte_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/lograte"
)

func TestOneLineAnIntervalAndTheCountHeldBack(t *testing.T) {
	var l lograte.Limiter
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if ok, held := l.Allow(t0); !ok || held != 0 {
		t.Fatalf("first line: %v %d", ok, held)
	}
	for i := range 5 {
		if ok, _ := l.Allow(t0.Add(time.Duration(i+1) * 100 * time.Millisecond)); ok {
			t.Fatalf("line %d within the second passed", i+2)
		}
	}
	if ok, held := l.Allow(t0.Add(time.Second)); !ok || held != 5 {
		t.Fatalf("a second later: %v, held %d; want passed, 5 held back", ok, held)
	}
	// A clock that went back passes the line rather than hold lines for good.
	if ok, held := l.Allow(t0); !ok || held != 0 {
		t.Fatalf("after the clock went back: %v %d", ok, held)
	}
}
