package app

import (
	"log/slog"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testsqlite"
)

// A provider's answer is written for half of stale_claim_after, at least
// 30 s, and the sender is built with it.
func TestRecordTimeoutIsHalfTheStaleClaimAfter(t *testing.T) {
	for stale, want := range map[time.Duration]time.Duration{
		10 * time.Minute: 5 * time.Minute,
		time.Minute:      30 * time.Second,
		20 * time.Second: 30 * time.Second,
	} {
		cfg := &config.Config{StaleClaimAfter: config.Duration(stale)}
		if got := RecordTimeout(cfg); got != want {
			t.Errorf("stale_claim_after %s: %s, want %s", stale, got, want)
		}
	}
}

func TestTheSenderWritesAnswersForRecordTimeout(t *testing.T) {
	cfg := config.Dev()
	cfg.Database = "sqlite:" + testsqlite.Path(t)
	cfg.StaleClaimAfter = config.Duration(8 * time.Minute)
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := New(t.Context(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.sender.RecordTimeout != 4*time.Minute {
		t.Fatalf("the sender writes an answer for %s, want 4m (half of stale_claim_after)", a.sender.RecordTimeout)
	}
}
