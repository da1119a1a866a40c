package rabbitmq

import (
	"fmt"
	"math"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Prefetch follows the bundles.
//
// A consumer's Prefetch counts jobs, but the broker's prefetch (basic.qos)
// counts messages, and a relay's message carries up to relay_bundle jobs
// (bundle.go). With the broker's window set to Prefetch messages a consumer
// behind a backlog held sixteen times the jobs it could send at once: 30
// bundles, 480 jobs, for 30 slots. Those jobs are outside the relays'
// publish window (the broker counts only ready messages) and out of every
// other process's reach until this one has sent them, and a crash hands
// them all back at once.
//
// So each of a consumer's two queues has a follower, which keeps a running
// mean of the jobs its messages carry and sets the queue's prefetch to the
// messages that hold Prefetch jobs at that mean, and two messages more: the
// jobs in a consumer's slots straddle one bundle more than they fill (a
// bundle is acked only once its last job ends), and the next is at hand
// when a slot frees. With 16-job bundles, 30 jobs are 4 messages (64
// jobs), not 30 (480). A consumer starts from the bundle size the relays use
// (ConsumerConfig.Bundle), the case where holding too much costs most;
// messages of one job (a lightly loaded lane, rows handed over at intake,
// retries, a split bundle's copies) bring the mean down and the prefetch
// back up to Prefetch within a few messages.
//
// RabbitMQ applies a consumer's prefetch when the consumer starts, so a
// new prefetch means a new consumer: the follower's subscription cancels
// the queue's consumer and starts another on the same channel. What the
// broker had already sent the cancelled consumer still arrives, on its own
// Go channel, which the consumer reads to its end before it may re-subscribe
// again; those messages stay unacked on the channel and are acked on it as
// any other (delivery tags are the channel's). Until they are, they count
// beside the new consumer's prefetch: a consumer that shrinks its prefetch
// after messages of one job briefly holds those and the new bundles. The prefetch changes only
// when the wanted one is half as much again as the one in force, or a third
// less (or the whole of Prefetch), so a lane that mixes bundles and single
// jobs does not re-subscribe on every message. Under single active consumer
// (Topology.SingleActiveConsumer) a cancel would hand the queue to another
// process's consumer while this one still sends what it holds, so there the
// prefetch stays at Prefetch messages.

// followerWeight is the weight of a message's jobs in the running mean:
// four messages of one job after bundles of sixteen bring the mean under 6.
const followerWeight = 0.25

// follower turns the jobs a queue's messages carry into its prefetch in
// messages.
type follower struct {
	jobs  int     // the jobs the queue's consumer may hold (its Prefetch)
	mean  float64 // the running mean of jobs a message
	cur   int     // the prefetch in messages of the queue's consumer
	fixed bool    // never changes (single active consumer)
}

// newFollower returns a follower for a consumer that may hold jobs jobs,
// whose messages are assumed at first to carry bundle jobs each.
func newFollower(jobs, bundle int, fixed bool) *follower {
	f := &follower{jobs: max(jobs, 1), mean: float64(max(bundle, 1)), fixed: fixed}
	f.cur = f.jobs
	if !fixed {
		f.cur = f.want()
	}
	return f
}

// want is the prefetch in messages that holds f.jobs jobs in messages of
// the mean's size, and two messages more; never more than f.jobs.
func (f *follower) want() int {
	return min(f.jobs, int(math.Ceil(float64(f.jobs)/f.mean))+2)
}

// observe counts a message of jobs jobs and reports whether the prefetch
// should change (to want).
func (f *follower) observe(jobs int) bool {
	f.mean += (float64(max(jobs, 1)) - f.mean) * followerWeight
	if f.fixed {
		return false
	}
	w := f.want()
	switch {
	case w > f.cur:
		return 2*w >= 3*f.cur || w == f.jobs
	case w < f.cur:
		return 3*w <= 2*f.cur
	}
	return false
}

// subscription is one queue's consumer on the consumer's channel, started
// again with another prefetch when its follower asks.
type subscription struct {
	ch    *amqp.Channel
	name  string // "lane" or "express": its metrics label
	queue string
	base  string // the consumer tag; a re-subscription's gets a suffix
	n     int    // re-subscriptions so far
	tag   string
	f     *follower
	// d is the current consumer's deliveries; old, a cancelled one's until
	// they end (nil: none).
	d, old <-chan amqp.Delivery
	// between, when set, runs after a re-subscription's cancel and before
	// its new consumer starts (ConsumerHooks.Resubscribe).
	between func(queue string, prefetch int)
}

// start starts the queue's consumer with the follower's prefetch (a
// non-global basic.qos applies to the consumers started after it).
func (s *subscription) start() error {
	if err := s.ch.Qos(s.f.cur, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	s.tag = s.base
	if s.n > 0 {
		s.tag = fmt.Sprintf("%s.%d", s.base, s.n)
	}
	d, err := s.ch.Consume(s.queue, s.tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", s.queue, err)
	}
	s.d = d
	return nil
}

// observe counts a message of jobs jobs read from the queue and, if the
// follower asks for another prefetch and no cancelled consumer's messages
// are still arriving, re-subscribes with it; resized reports whether it
// did. An error leaves the channel in doubt: the consumer's session ends
// and connects again.
func (s *subscription) observe(jobs int) (resized bool, err error) {
	if !s.f.observe(jobs) || s.old != nil {
		return false, nil
	}
	// With noWait false, Cancel returns once the broker confirmed it: no
	// message comes for the old tag after what is already on its way.
	if err := s.ch.Cancel(s.tag, false); err != nil {
		return false, fmt.Errorf("cancel %s to change its prefetch: %w", s.queue, err)
	}
	s.old, s.d = s.d, nil
	s.f.cur = s.f.want()
	s.n++
	if s.between != nil {
		s.between(s.queue, s.f.cur)
	}
	return true, s.start()
}

// drained is called when the cancelled consumer's deliveries ended.
func (s *subscription) drained() { s.old = nil }
