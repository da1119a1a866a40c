package store

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

func TestPromotionsAreDueEveryIntervalAndAgainAfterAFullBatch(t *testing.T) {
	t.Parallel()
	var p Promotions
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	lane, other := heraldtype.LaneMarketing, heraldtype.LaneTransactional
	steps := []struct {
		what string
		at   time.Time
		lane heraldtype.Lane
		want bool
	}{
		{"just promoted", t0.Add(PromoteEvery - time.Millisecond), lane, false},
		{"another lane, never promoted", t0, other, true},
		{"an interval on", t0.Add(PromoteEvery), lane, true},
		{"the clock went back", t0.Add(-time.Second), lane, true},
	}
	p.Done(lane, t0, PromoteBatch-1)
	for _, s := range steps {
		if got := p.Due(s.lane, s.at); got != s.want {
			t.Errorf("%s: due %v, want %v", s.what, got, s.want)
		}
	}
	var fresh Promotions
	if !fresh.Due(lane, t0) {
		t.Error("never promoted: not due")
	}
	p.Done(lane, t0, PromoteBatch)
	if !p.Due(lane, t0) {
		t.Error("a promotion that filled its batch: the next claim does not promote again")
	}
}
