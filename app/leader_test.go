package app_test

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testpg"
)

// leaderGauge reads herald_leader from base's /metrics ("" when absent).
func leaderGauge(t *testing.T, base string) string {
	t.Helper()
	code, body := get(t, base, "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "herald_leader "); ok {
			return v
		}
	}
	return ""
}

// herald_leader is 1 on the process that runs the leader's work and 0 on
// the others, and follows the lead when it passes; herald's one SQLite
// process always leads.
func TestTheLeaderGaugeFollowsTheLead(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		base, _ := startHerald(t, testConfig(t, "", nil))
		if got := leaderGauge(t, base); got != "1" {
			t.Fatalf("herald_leader = %q on SQLite; want 1", got)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		database := testpg.Schema(t)
		baseA, stopA := startHerald(t, testConfig(t, database, nil))
		testenv.WaitFor(t, "the first process to lead", testenv.Patience, func() bool { return leaderGauge(t, baseA) == "1" })
		baseB, _ := startHerald(t, testConfig(t, database, nil))
		testenv.WaitFor(t, "the second process to be ready", testenv.Patience, func() bool {
			code, _ := get(t, baseB, "/readyz", "")
			return code == http.StatusOK
		})
		for range 5 {
			if a, b := leaderGauge(t, baseA), leaderGauge(t, baseB); a != "1" || b != "0" {
				t.Fatalf("herald_leader = %q and %q while the first leads; want 1 and 0", a, b)
			}
		}
		stopA()
		testenv.WaitFor(t, "the second process to take the lead", testenv.Patience, func() bool { return leaderGauge(t, baseB) == "1" })
	})
}
