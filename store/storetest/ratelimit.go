package storetest

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// take runs BucketTake; an error fails the test.
func take(t *testing.T, b bundle, p store.BucketTakeParams) store.BucketGrant {
	t.Helper()
	g, err := b.s.BucketTake(b.ctx, p)
	if err != nil {
		t.Fatalf("BucketTake %+v: %v", p, err)
	}
	if g.Granted < 0 || g.Granted > p.Want || g.Free < 0 || g.Free > g.Granted || g.Wait < 0 {
		t.Fatalf("BucketTake %+v = %+v: out of its bounds", p, g)
	}
	return g
}

// slow runs BucketSlow; an error fails the test.
func slow(t *testing.T, b bundle, p store.BucketSlowParams) {
	t.Helper()
	if err := b.s.BucketSlow(b.ctx, p); err != nil {
		t.Fatalf("BucketSlow %+v: %v", p, err)
	}
}

// wantGrant fails the test unless g granted granted (free of them) and
// asks to wait wait, to the millisecond (SQLite keeps milliseconds).
func wantGrant(t *testing.T, what string, g store.BucketGrant, granted, free int, wait time.Duration) {
	t.Helper()
	if g.Granted != granted || g.Free != free || (g.Wait-wait).Abs() > time.Millisecond {
		t.Fatalf("%s: granted %d (free %d), wait %s; want %d (free %d), wait %s", what, g.Granted, g.Free, g.Wait, granted, free, wait)
	}
}

func testRateBuckets(t *testing.T, h Harness) {
	t.Run("FirstTakeFindsItFullThenItRefillsByTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := store.BucketTakeParams{Provider: "p", Rate: 10, Burst: 20, Want: 50, Reserve: 5, Priority: true}
		wantGrant(t, "first take", take(t, b, p), 20, 15, 2*time.Second)
		wantGrant(t, "empty", take(t, b, p), 0, 0, 2*time.Second)
		b.clk.Advance(time.Second)
		wantGrant(t, "a second later", take(t, b, p), 10, 5, 2*time.Second)
		b.clk.Advance(300 * time.Millisecond)
		p.Want = 2
		wantGrant(t, "0.3 s later", take(t, b, p), 2, 0, 100*time.Millisecond)
		b.clk.Advance(time.Hour)
		p.Want = 50
		wantGrant(t, "an hour later: no more than the burst", take(t, b, p), 20, 15, 2*time.Second)
	})
	t.Run("GrantsNeverExceedBurstPlusRateTimesElapsed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const rate, burst = 7.0, 5.0
		rnd := rand.New(rand.NewPCG(1, 2))
		granted, elapsed := 0, time.Duration(0)
		for i := range 150 {
			step := time.Duration(rnd.IntN(400)) * time.Millisecond
			b.clk.Advance(step)
			elapsed += step
			g := take(t, b, store.BucketTakeParams{Provider: "p", Rate: rate, Burst: burst, Want: 1 + rnd.IntN(6), Reserve: 2, Priority: rnd.IntN(2) == 0})
			granted += g.Granted
			if limit := burst + rate*elapsed.Seconds(); float64(granted) > limit+1e-9 {
				t.Fatalf("take %d: %d granted in %s, more than burst + rate × elapsed = %.3f", i, granted, elapsed, limit)
			}
		}
		// Takes that keep up (never a full bucket, each taking all there
		// is) get everything the bucket earns, less a last fraction.
		b.clk.Advance(time.Hour)
		take(t, b, store.BucketTakeParams{Provider: "p", Rate: rate, Burst: burst, Want: 100, Priority: true})
		granted = 0
		for range 50 {
			b.clk.Advance(100 * time.Millisecond)
			granted += take(t, b, store.BucketTakeParams{Provider: "p", Rate: rate, Burst: burst, Want: 100, Priority: true}).Granted
		}
		if earned := rate * 5; float64(granted) < earned-1 || float64(granted) > earned {
			t.Fatalf("takes every 0.1 s for 5 s got %d tokens, want %.0f less a fraction", granted, earned)
		}
	})
	t.Run("ConcurrentTakersNeverShareAToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := store.BucketTakeParams{Provider: "p", Rate: 1, Burst: 30, Want: 1, Priority: true}
		const takers, takes = 8, 10
		var ready, done sync.WaitGroup
		ready.Add(takers)
		start := make(chan struct{})
		got := make([]int, takers)
		errs := make(chan error, takers*takes)
		for i := range takers {
			done.Go(func() {
				ready.Done()
				<-start
				for range takes {
					g, err := b.s.BucketTake(b.ctx, p)
					if err != nil {
						errs <- err
						return
					}
					got[i] += g.Granted
				}
			})
		}
		ready.Wait()
		close(start)
		wait(t, &done, "the takers")
		close(errs)
		for err := range errs {
			t.Fatalf("BucketTake: %v", err)
		}
		total, takersGranted := 0, 0
		for _, n := range got {
			total += n
			if n > 0 {
				takersGranted++
			}
		}
		if total != 30 {
			t.Fatalf("%d takers of one token each were granted %d of a bucket of 30 (per taker %v)", takers, total, got)
		}
		// The clock did not move: nothing refilled.
		wantGrant(t, "after them", take(t, b, p), 0, 0, time.Second)
		t.Logf("granted per taker: %v", got)
	})
	t.Run("WithoutPriorityATakeLeavesTheReserve", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		bulk := store.BucketTakeParams{Provider: "p", Rate: 1, Burst: 10, Want: 10, Reserve: 4}
		wantGrant(t, "bulk", take(t, b, bulk), 6, 6, 6*time.Second)
		wantGrant(t, "bulk again", take(t, b, bulk), 0, 0, 6*time.Second)
		first := bulk
		first.Priority = true
		wantGrant(t, "priority", take(t, b, first), 4, 0, 10*time.Second)
		b.clk.Advance(3 * time.Second)
		wantGrant(t, "bulk below the reserve", take(t, b, bulk), 0, 0, 7*time.Second)
		wantGrant(t, "priority below the reserve", take(t, b, first), 3, 0, 10*time.Second)
		b.clk.Advance(6 * time.Second)
		wantGrant(t, "bulk above the reserve", take(t, b, bulk), 2, 2, 6*time.Second)
	})
	t.Run("SlowPausesEveryTakeThenTheRateClimbsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := store.BucketTakeParams{Provider: "p", Rate: 10, Burst: 100, Want: 10, Reserve: 20, Priority: true}
		wantGrant(t, "before", take(t, b, p), 10, 10, 0)
		slow(t, b, store.BucketSlowParams{Provider: "p", For: 5 * time.Second, Recover: 10 * time.Second})
		// Emptied and paused: 5 s, then 10 tokens at half the rate.
		wantGrant(t, "paused", take(t, b, p), 0, 0, 7*time.Second)
		bulk := p
		bulk.Priority = false
		wantGrant(t, "paused, without priority", take(t, b, bulk), 0, 0, 5*time.Second+6*time.Second)
		b.clk.Advance(5 * time.Second)
		wantGrant(t, "at the pause's end", take(t, b, p), 0, 0, 2*time.Second)
		b.clk.Advance(2 * time.Second)
		// The factor climbed from 0.5 to 0.6 in those 2 s: 10 × 2 × 0.55.
		p.Want = 100
		if g := take(t, b, p); g.Granted < 10 || g.Granted > 11 {
			t.Fatalf("2 s into the climb: granted %d, want 10..11 (10/s at 0.5 to 0.6 of the rate)", g.Granted)
		}
		b.clk.Advance(8 * time.Second)
		take(t, b, p)
		b.clk.Advance(time.Second)
		if g := take(t, b, p); g.Granted != 10 || g.Free != 0 {
			t.Fatalf("a second after the climb: granted %d (free %d), want the full rate's 10 (none above the reserve)", g.Granted, g.Free)
		}
	})
	t.Run("ASlowWhilePausedOnlyExtendsAndOneDuringTheClimbHalvesIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		p := store.BucketTakeParams{Provider: "p", Rate: 10, Burst: 100, Want: 10, Priority: true}
		slow(t, b, store.BucketSlowParams{Provider: "p", For: 5 * time.Second, Recover: 10 * time.Second})
		b.clk.Advance(2 * time.Second)
		// The same episode: the pause ends at the later time, still at half.
		slow(t, b, store.BucketSlowParams{Provider: "p", For: 2 * time.Second, Recover: 10 * time.Second})
		wantGrant(t, "still paused until 5 s", take(t, b, p), 0, 0, 3*time.Second+2*time.Second)
		slow(t, b, store.BucketSlowParams{Provider: "p", For: 4 * time.Second, Recover: 10 * time.Second})
		wantGrant(t, "paused until 6 s", take(t, b, p), 0, 0, 4*time.Second+2*time.Second)
		// 5 s into the climb (6 s to 16 s) the factor is 0.75; a 429 then
		// restarts it at 0.375 after a pause of 1 s.
		b.clk.Advance(4*time.Second + 5*time.Second)
		take(t, b, p)
		slow(t, b, store.BucketSlowParams{Provider: "p", For: time.Second, Recover: 10 * time.Second})
		wantGrant(t, "paused again", take(t, b, p), 0, 0, time.Second+2666666667*time.Nanosecond) // 10 tokens at 10/s × 0.375
	})
	t.Run("ProvidersHaveBucketsOfTheirOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		a := store.BucketTakeParams{Provider: "a", Rate: 1, Burst: 3, Want: 3, Priority: true}
		other := a
		other.Provider = "b"
		wantGrant(t, "a", take(t, b, a), 3, 3, 3*time.Second)
		slow(t, b, store.BucketSlowParams{Provider: "a", For: time.Minute, Recover: time.Minute})
		wantGrant(t, "b, with a empty and paused", take(t, b, other), 3, 3, 3*time.Second)
	})
}
