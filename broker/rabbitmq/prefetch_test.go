package rabbitmq

import "testing"

// The prefetch in messages holds the consumer's jobs at the jobs its
// messages carry, and two messages more; it changes only by half as much
// again or a third less (or to the whole), and never under single active
// consumer.
func TestFollowerSetsThePrefetchFromTheJobsAMessage(t *testing.T) {
	t.Parallel()
	t.Run("StartsFromTheRelaysBundles", func(t *testing.T) {
		for _, c := range []struct{ jobs, bundle, want int }{
			{30, 16, 4}, {60, 16, 6}, {8, 16, 3}, {2, 16, 2}, {1, 16, 1}, {30, 1, 30}, {30, 0, 30}, {30, 4, 10},
		} {
			if got := newFollower(c.jobs, c.bundle, false).cur; got != c.want {
				t.Errorf("%d jobs in bundles of %d: prefetch %d messages, want %d", c.jobs, c.bundle, got, c.want)
			}
		}
	})
	t.Run("GrowsBackForMessagesOfOneJob", func(t *testing.T) {
		f := newFollower(30, 16, false)
		var steps []int
		for range 40 {
			if f.observe(1) {
				f.cur = f.want()
				steps = append(steps, f.cur)
			}
		}
		if f.cur != 30 {
			t.Fatalf("after 40 messages of one job: prefetch %d, want 30 (steps %v)", f.cur, steps)
		}
		if len(steps) > 8 {
			t.Errorf("changed %d times on the way (%v), want at most 8", len(steps), steps)
		}
	})
	t.Run("ShrinksForBundles", func(t *testing.T) {
		f := newFollower(30, 1, false)
		for i := 1; i <= 12; i++ {
			if f.observe(16) {
				f.cur = f.want()
			}
			if i == 3 && f.cur > 6 {
				t.Fatalf("after 3 bundles of 16: prefetch %d messages, want at most 6", f.cur)
			}
		}
		if f.cur != 4 {
			t.Fatalf("after 12 bundles of 16: prefetch %d messages, want 4 (30 jobs and two messages)", f.cur)
		}
	})
	t.Run("KeepsItsPrefetchForAMixOfBundlesAndSingleJobs", func(t *testing.T) {
		f := newFollower(30, 16, false)
		for range 8 { // settle on the mix first
			if f.observe(16) {
				f.cur = f.want()
			}
			if f.observe(1) {
				f.cur = f.want()
			}
		}
		changes := 0
		for range 100 {
			for _, jobs := range []int{16, 1} {
				if f.observe(jobs) {
					f.cur = f.want()
					changes++
				}
			}
		}
		if changes > 0 {
			t.Fatalf("%d changes over 100 alternations of a bundle and a single job, want none (prefetch %d)", changes, f.cur)
		}
	})
	t.Run("NeverChangesUnderSingleActiveConsumer", func(t *testing.T) {
		f := newFollower(30, 16, true)
		if f.cur != 30 {
			t.Fatalf("prefetch %d, want 30", f.cur)
		}
		for range 20 {
			if f.observe(16) {
				t.Fatal("asked to change")
			}
		}
	})
}
