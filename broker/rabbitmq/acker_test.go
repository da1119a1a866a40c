package rabbitmq

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeBroker is a channel's side of acks as RabbitMQ keeps it: every
// delivery it sent stays unacked until an ack or nack settles it; an ack
// with multiple set settles every unacked one up to its tag. It fails the
// test when an ack settles a delivery the consumer had not finished, or
// names a tag that is not unacked (RabbitMQ closes the channel then).
type fakeBroker struct {
	t *testing.T

	mu      sync.Mutex
	unacked map[uint64]bool // tag → the consumer has finished it
	acked   map[uint64]bool
	nacked  map[uint64]bool
	frames  []string
}

func newFakeBroker(t *testing.T, delivered int) *fakeBroker {
	b := &fakeBroker{t: t, unacked: map[uint64]bool{}, acked: map[uint64]bool{}, nacked: map[uint64]bool{}}
	for tag := 1; tag <= delivered; tag++ {
		b.unacked[uint64(tag)] = false
	}
	return b
}

// finished records that the consumer is done with tag, before it asks for
// the ack.
func (b *fakeBroker) finished(tag uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unacked[tag] = true
}

func (b *fakeBroker) Ack(tag uint64, multiple bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames = append(b.frames, fmt.Sprintf("ack %d %v", tag, multiple))
	if _, ok := b.unacked[tag]; !ok {
		b.t.Errorf("ack %d (multiple %v): not an unacked delivery", tag, multiple)
		return nil
	}
	for t, done := range b.unacked {
		if t == tag || (multiple && t < tag) {
			if !done {
				b.t.Errorf("ack %d (multiple %v) settled delivery %d, not finished", tag, multiple, t)
			}
			delete(b.unacked, t)
			b.acked[t] = true
		}
	}
	return nil
}

func (b *fakeBroker) Nack(tag uint64, multiple, requeue bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames = append(b.frames, fmt.Sprintf("nack %d", tag))
	if _, ok := b.unacked[tag]; !ok || multiple {
		b.t.Errorf("nack %d (multiple %v): not an unacked delivery", tag, multiple)
	}
	delete(b.unacked, tag)
	b.nacked[tag] = true
	return nil
}

func (b *fakeBroker) sent() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.frames...)
}

// acked hands out ack callbacks that fail the test on an error; wg waits
// for every one handed out to have run.
type acked struct {
	t  *testing.T
	wg sync.WaitGroup
}

func (c *acked) then() func(error) {
	c.wg.Add(1)
	return func(err error) {
		defer c.wg.Done()
		if err != nil {
			c.t.Errorf("ack: %v", err)
		}
	}
}

// Acks gathered share one frame, multiple set.
func TestGatheredAcksShareOneFrame(t *testing.T) {
	b := newFakeBroker(t, 10)
	a := newGatheringAcker(b, 10, time.Minute)
	c := &acked{t: t}
	for tag := uint64(1); tag <= 10; tag++ {
		a.seen(tag)
	}
	for _, tag := range []uint64{3, 1, 10, 2, 5, 4, 9, 6, 8, 7} {
		b.finished(tag)
		a.ack(tag, c.then())
	}
	c.wg.Wait()
	a.stop()
	if got, want := fmt.Sprint(b.sent()), "[ack 10 true]"; got != want {
		t.Fatalf("frames %s, want %s", got, want)
	}
}

// An ack waits for others at most the gather wait.
func TestALoneAckIsWrittenAfterTheGatherWait(t *testing.T) {
	b := newFakeBroker(t, 1)
	a := newGatheringAcker(b, 10, time.Millisecond)
	defer a.stop()
	a.seen(1)
	b.finished(1)
	written := make(chan error, 1)
	a.ack(1, func(err error) { written <- err })
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lone ack was not written")
	}
}

// A delivery not yet read (a lane message waiting while express ones after
// it are done) keeps the multiple ack below it; what is done above it is
// acked on its own, not held.
func TestAnUnreadDeliveryHoldsTheMultipleAckBelowIt(t *testing.T) {
	b := newFakeBroker(t, 4)
	a := newGatheringAcker(b, 3, time.Minute)
	c := &acked{t: t}
	for _, tag := range []uint64{1, 3, 4} { // 2 unread
		a.seen(tag)
	}
	for _, tag := range []uint64{4, 1, 3} {
		b.finished(tag)
		a.ack(tag, c.then())
	}
	c.wg.Wait()
	a.stop()
	frames := b.sent()
	slices.Sort(frames[1:])
	if fmt.Sprint(frames) != "[ack 1 false ack 3 false ack 4 false]" {
		t.Fatalf("frames %v, want ack 1, then 3 and 4 each alone", frames)
	}
}

// A delivery still being sent keeps the multiple ack below it, and so does
// one nacked until its nack is written.
func TestAnOpenDeliveryHoldsTheMultipleAckBelowIt(t *testing.T) {
	b := newFakeBroker(t, 9)
	a := newGatheringAcker(b, 5, time.Minute)
	c := &acked{t: t}
	for _, tag := range []uint64{1, 2, 3, 5, 6, 8, 9} { // 4 and 7 unread
		a.seen(tag)
	}
	for _, tag := range []uint64{1, 2, 5, 6, 8} { // 3 and 9 still being sent
		b.finished(tag)
		a.ack(tag, c.then())
	}
	c.wg.Wait()
	frames := b.sent()
	slices.Sort(frames[1:])
	if fmt.Sprint(frames) != "[ack 2 true ack 5 false ack 6 false ack 8 false]" {
		t.Fatalf("frames %v: want ack 2 multiple (3 still open), then 5, 6 and 8 alone", frames)
	}
	a.seen(4)
	a.seen(7)
	if err := a.nack(3, true); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []uint64{4, 7, 9} {
		b.finished(tag)
		a.ack(tag, c.then())
	}
	a.stop() // writes what it gathered
	c.wg.Wait()
	if got := b.sent()[5:]; fmt.Sprint(got) != "[ack 9 true]" {
		t.Fatalf("frames after the nack %v, want ack 9 multiple", got)
	}
	if len(b.unacked) != 0 || !b.nacked[3] || b.acked[3] {
		t.Fatalf("unacked %v, nacked %v, acked %v: want all settled, 3 nacked", b.unacked, b.nacked, b.acked)
	}
}

// Deliveries read in any order two queues allow, finished in any order by
// many workers, some nacked: no ack ever settles one not finished (the
// fake broker fails the test), and each ends acked or nacked once.
func TestAcksNeverSettleADeliveryNotFinished(t *testing.T) {
	const n = 5000
	for seed := range uint64(5) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			b := newFakeBroker(t, n)
			a := newAcker(b, 32)
			// Two queues share the channel's tags; each is read in its
			// order, the two interleaved at random.
			var lane, express []uint64
			for tag := uint64(1); tag <= n; tag++ {
				if r.IntN(3) == 0 {
					express = append(express, tag)
				} else {
					lane = append(lane, tag)
				}
			}
			work := make(chan uint64, 64)
			var wg sync.WaitGroup
			acks := &acked{t: t}
			nacks := map[uint64]bool{}
			for tag := uint64(1); tag <= n; tag++ {
				if r.IntN(10) == 0 {
					nacks[tag] = true
				}
			}
			// Now and then the reader waits for an express delivery to be
			// settled before it reads on: lane deliveries below it stay
			// unread meanwhile, as when the lane's slots are all taken.
			settled := map[uint64]chan struct{}{}
			for _, tag := range express {
				if r.IntN(8) == 0 {
					settled[tag] = make(chan struct{})
				}
			}
			for w := range 16 {
				wg.Go(func() {
					wr := rand.New(rand.NewPCG(seed, uint64(w)+2))
					for tag := range work {
						if wr.IntN(4) == 0 {
							time.Sleep(time.Duration(wr.IntN(200)) * time.Microsecond)
						}
						c, wait := settled[tag]
						if nacks[tag] {
							if err := a.nack(tag, true); err != nil {
								t.Error(err)
							}
							if wait {
								close(c)
							}
							continue
						}
						b.finished(tag)
						then := acks.then()
						a.ack(tag, func(err error) {
							then(err)
							if wait {
								close(c)
							}
						})
					}
				})
			}
			for len(lane)+len(express) > 0 {
				var tag uint64
				if len(express) > 0 && (len(lane) == 0 || r.IntN(2) == 0) {
					tag, express = express[0], express[1:]
				} else {
					tag, lane = lane[0], lane[1:]
				}
				a.seen(tag)
				work <- tag
				if c, ok := settled[tag]; ok {
					<-c
				}
			}
			close(work)
			wg.Wait()
			a.stop()
			acks.wg.Wait()
			if len(b.unacked) != 0 {
				t.Fatalf("%d deliveries never settled", len(b.unacked))
			}
			for tag := range nacks {
				if !b.nacked[tag] || b.acked[tag] {
					t.Fatalf("delivery %d: nacked %v, acked %v; want nacked only", tag, b.nacked[tag], b.acked[tag])
				}
			}
			t.Logf("%d deliveries, %d frames", n, len(b.frames))
		})
	}
}

// A consumer gathers at most half its lane's prefetch, so the done
// deliveries waiting for their ack never fill the window the broker
// delivers into; never fewer than one, never more than ackGather.
func TestGatherIsAtMostHalfThePrefetch(t *testing.T) {
	for _, c := range []struct{ prefetch, want int }{
		{1, 1}, {2, 1}, {3, 1}, {8, 4}, {15, 7}, {31, 15}, {32, 16}, {64, 16}, {512, 16},
	} {
		if got := gatherFor(c.prefetch); got != c.want {
			t.Errorf("gatherFor(%d) = %d, want %d", c.prefetch, got, c.want)
		}
	}
}
