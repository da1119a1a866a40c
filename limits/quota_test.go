package limits_test

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/limits"
)

const (
	marketing     = heraldtype.LaneMarketing
	transactional = heraldtype.LaneTransactional
)

func TestLaneQuotas(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	quotas := []limits.Quota{
		{Lane: marketing, Rate: 2, Burst: 2},
		{Tenant: "big", Lane: marketing, Rate: 10, Burst: 10},
		{Tenant: "free", Lane: marketing},
		{Tenant: "small", Lane: transactional, Rate: 1},
	}
	// spend takes sends of tenant's into lane until one is refused and
	// returns how many went and the refusal's wait.
	spend := func(t *testing.T, l *limits.Limiter, tenant string, lane heraldtype.Lane) (int, time.Duration) {
		t.Helper()
		for n := 0; n < 100; n++ {
			if _, wait := l.LaneSend(tenant, lane); wait > 0 {
				return n, wait
			}
		}
		return 100, 0
	}
	t.Run("EachTenantItsOwnBucketAndItsOwnEntry", func(t *testing.T) {
		t.Parallel()
		l := limits.New(limits.Config{Quotas: quotas, Clock: clock.NewFake(start)})
		for _, tc := range []struct {
			tenant string
			lane   heraldtype.Lane
			sent   int
			wait   time.Duration
		}{
			{"a", marketing, 2, 500 * time.Millisecond}, // the lane's quota
			{"b", marketing, 2, 500 * time.Millisecond}, // the same, in a bucket of b's
			{"big", marketing, 10, 100 * time.Millisecond},
			{"free", marketing, 100, 0},              // rate 0: exempt
			{"a", transactional, 100, 0},             // no quota in that lane
			{"small", transactional, 2, time.Second}, // burst defaults to twice the rate
			{"small", marketing, 2, 500 * time.Millisecond},
		} {
			if sent, wait := spend(t, l, tc.tenant, tc.lane); sent != tc.sent || wait != tc.wait {
				t.Errorf("%s in %s: %d sent, then wait %s; want %d, then %s", tc.tenant, tc.lane, sent, wait, tc.sent, tc.wait)
			}
		}
	})
	t.Run("ARefusalSpendsNothingAndUndoGivesTheTokenBack", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(start)
		l := limits.New(limits.Config{Quotas: quotas, Clock: clk})
		undo, wait := l.LaneSend("a", marketing)
		if wait != 0 {
			t.Fatal("the first send was refused")
		}
		undo() // a replay: nothing new was written
		if sent, _ := spend(t, l, "a", marketing); sent != 2 {
			t.Fatalf("after an undo %d sends went; want the whole burst, 2", sent)
		}
		for range 3 {
			if _, wait := l.LaneSend("a", marketing); wait != 500*time.Millisecond {
				t.Fatalf("refused again: wait %s; want 500ms every time", wait)
			}
		}
		clk.Advance(500 * time.Millisecond)
		if _, wait := l.LaneSend("a", marketing); wait != 0 {
			t.Fatalf("after the wait: %s, want 0", wait)
		}
	})
	t.Run("TakeTakesWhatTheBucketHolds", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(start)
		l := limits.New(limits.Config{Quotas: quotas, Clock: clk})
		for _, step := range []struct {
			advance time.Duration
			ask     int
			want    int
		}{
			{0, 10_000, 10},                     // the burst
			{0, 10_000, 0},                      // empty
			{250 * time.Millisecond, 10_000, 2}, // 2.5 tokens: whole ones only
			{250 * time.Millisecond, 10_000, 3}, // 0.5 + 2.5
			{10 * time.Second, 4, 4},            // never more than asked
			{0, 10_000, 6},                      // the rest of the burst
		} {
			clk.Advance(step.advance)
			if got, _ := l.LaneTake("big", marketing, step.ask); got != step.want { // all used: not settled
				t.Fatalf("after %s, take %d: got %d; want %d", step.advance, step.ask, got, step.want)
			}
		}
		if got, _ := l.LaneTake("a", transactional, 10_000); got != 10_000 {
			t.Errorf("no quota: took %d of 10,000", got)
		}
		if _, wait := l.LaneSend("big", marketing); wait == 0 {
			t.Error("intake got a token the fan-out had taken: they share the bucket")
		}
	})
	// A campaign's fan-out takes a round's tokens before its batches and
	// settles after their transactions, some time later, with what they
	// fanned out: the rest go back to the bucket, so the tenant's single
	// sends are not refused for tokens nobody used.
	t.Run("SettleGivesBackWhatTheTakerDidNotUse", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name       string
			used, sent int
		}{
			{"AShortLastBatch", 3, 7},
			{"AFailedBatch", 0, 10},
			{"AllUsed", 10, 0},
			{"NeverMoreThanGranted", 12, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				clk := clock.NewFake(start)
				l := limits.New(limits.Config{Quotas: quotas, Clock: clk})
				granted, settle := l.LaneTake("big", marketing, 10_000)
				if granted != 10 {
					t.Fatalf("granted %d; want the burst, 10", granted)
				}
				clk.Advance(50 * time.Millisecond) // the batches' transactions: half a token refills
				settle(tc.used)
				settle(0) // a second settle changes nothing
				if sent, _ := spend(t, l, "big", marketing); sent != tc.sent {
					t.Fatalf("%d of 10 used: then %d single sends went; want %d", tc.used, sent, tc.sent)
				}
			})
		}
	})
	// Intake's undo comes after its store call, when the clock has moved
	// on: the token still goes back (a rate.Reservation's CancelAt did
	// nothing once its time was past).
	t.Run("UndoGivesTheTokenBackAfterTimeHasPassed", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(start)
		l := limits.New(limits.Config{Quotas: quotas, Clock: clk})
		undo, wait := l.LaneSend("a", marketing)
		if wait != 0 {
			t.Fatal("the first send was refused")
		}
		clk.Advance(10 * time.Millisecond) // the store call
		undo()
		undo() // once only
		if sent, _ := spend(t, l, "a", marketing); sent != 2 {
			t.Fatalf("after an undo %d sends went; want the whole burst, 2", sent)
		}
	})
	t.Run("QuotasAloneMakeALimiter", func(t *testing.T) {
		t.Parallel()
		l := limits.New(limits.Config{Quotas: quotas[:1]})
		if l == nil || l.Key("k") != 0 || l.Send("t") != 0 {
			t.Fatal("quotas alone: no limiter, or one that limits keys or sends")
		}
		var none *limits.Limiter
		if undo, wait := none.LaneSend("a", marketing); undo == nil || wait != 0 {
			t.Fatal("a nil limiter limits")
		}
		if got, settle := none.LaneTake("a", marketing, 7); got != 7 {
			t.Fatal("a nil limiter limits")
		} else {
			settle(3)
		}
	})
}

// BenchmarkLaneSend is what a lane quota adds to a send.
func BenchmarkLaneSend(b *testing.B) {
	l := limits.New(limits.Config{Quotas: []limits.Quota{{Lane: marketing, Rate: 1e9}}})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			undo, _ := l.LaneSend("tenant", marketing)
			_ = undo
		}
	})
}

// A rate so small that the wait for its next token would overflow a
// Duration (and read as no wait at all) still refuses, with a wait of at
// most an hour; so does the send rate, which shares the buckets.
func TestATinyRateStillRefuses(t *testing.T) {
	t.Parallel()
	l := limits.New(limits.Config{SendRate: 1e-11, SendBurst: 1, KeyRate: 1e-11, KeyBurst: 1,
		Quotas: []limits.Quota{{Lane: marketing, Rate: 1e-11, Burst: 1}}, Clock: clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))})
	if _, wait := l.LaneSend("t", marketing); wait != 0 {
		t.Fatalf("the first send waits %s; want the burst's token", wait)
	}
	for range 3 {
		if undo, wait := l.LaneSend("t", marketing); wait <= 0 || wait > time.Hour || undo != nil {
			t.Fatalf("past the burst: wait %s; want a refusal of at most an hour", wait)
		}
	}
	if l.Send("t") != 0 {
		t.Fatal("the first send of the tenant was refused")
	}
	if wait := l.Send("t"); wait <= 0 || wait > time.Hour {
		t.Fatalf("the send rate past its burst: wait %s; want a refusal of at most an hour", wait)
	}
	if l.Key("k") != 0 {
		t.Fatal("the key's first request was refused")
	}
	if wait := l.Key("k"); wait <= 0 || wait > time.Hour {
		t.Fatalf("the key rate past its burst: wait %s; want a refusal of at most an hour", wait)
	}
}
