package rabbitmq

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
)

// Why a publish was not confirmed. A message that got one of these may
// still have reached its queue (a timeout, a lost connection); the caller
// offers it again and the deliveries claim stops a second send.
var (
	ErrNacked         = errors.New("rabbitmq: broker nacked the message")
	ErrReturned       = errors.New("rabbitmq: message was unroutable (returned)")
	ErrConfirmTimeout = errors.New("rabbitmq: no publisher confirm in time")
)

// maxInFlight bounds the unconfirmed messages on one channel; the confirm
// and return buffers are sized to it so the library's reader never blocks
// on them.
const maxInFlight = 8192

// ConfirmHooks are test seams on a confirming channel. Each may be nil.
type ConfirmHooks struct {
	// OnConfirm runs for every confirm the broker sends, with the
	// message's id (a bundle's: once with each of its jobs' ids); returning
	// false drops it, as if it never arrived (a lost confirm: the publish
	// then times out although the broker has the message).
	OnConfirm func(messageID string, ack bool) bool
}

// confirmer publishes on one channel in confirm mode and matches each
// confirm (by delivery tag) and each return (by the publish's sequence
// number, carried as its correlation id — copies of one message share a
// message id, so that cannot tell them apart) to the batch that published
// it. One goroutine reads both: the broker sends a
// basic.return before the basic.ack of the same message and the library
// hands them over in that order, so on each confirm the confirmer first
// drains the returns, then settles, and never mistakes a returned message
// for a delivered one.
type confirmer struct {
	ch *amqp.Channel
	// out is the socket of ch's connection when a batch may hold it
	// (coalescer); nil otherwise.
	out      *coalescer
	hooks    ConfirmHooks
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
	slots    chan struct{}
	done     chan struct{}

	mu      sync.Mutex
	closed  bool
	pending map[uint64]*entry
}

// entry is one published message awaiting its confirm: entry i of b, or
// for a bundle entries i to i+len(jobs)-1, jobs being what it carries.
type entry struct {
	b        *Batch
	i        int
	id       string
	jobs     []heraldtype.Job
	returned bool
}

// kept reports whether the OnConfirm hook lets e's confirm through: for a
// bundle, only if it lets every job's through.
func (e *entry) kept(h func(messageID string, ack bool) bool, ack bool) bool {
	if h == nil {
		return true
	}
	if e.jobs == nil {
		return h(e.id, ack)
	}
	keep := true
	for _, j := range e.jobs {
		keep = h(j.MessageID, ack) && keep
	}
	return keep
}

// set settles e's entries in its batch.
func (e *entry) set(err error) {
	e.b.set(e.i, err)
	for k := 1; k < len(e.jobs); k++ {
		e.b.set(e.i+k, err)
	}
}

func newConfirmer(ch *amqp.Channel, out *coalescer, hooks ConfirmHooks) (*confirmer, error) {
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	c := &confirmer{
		ch: ch, out: out, hooks: hooks,
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, maxInFlight+16)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, maxInFlight+16)),
		slots:    make(chan struct{}, maxInFlight),
		done:     make(chan struct{}),
		pending:  map[uint64]*entry{},
	}
	go c.loop()
	return c, nil
}

func (c *confirmer) loop() {
	defer close(c.done)
	for {
		select {
		case r, ok := <-c.returns:
			if !ok {
				c.returns = nil // closed: stop selecting on it
				continue
			}
			c.returned(r)
		case conf, ok := <-c.confirms:
			if !ok {
				c.fail()
				return
			}
			c.drainReturns()
			c.resolve(conf)
		}
	}
}

func (c *confirmer) drainReturns() {
	for c.returns != nil {
		select {
		case r, ok := <-c.returns:
			if !ok {
				c.returns = nil
				return
			}
			c.returned(r)
		default:
			return
		}
	}
}

func (c *confirmer) returned(r amqp.Return) {
	seq, err := strconv.ParseUint(r.CorrelationId, 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	if e := c.pending[seq]; e != nil {
		e.returned = true
	}
	c.mu.Unlock()
}

func (c *confirmer) resolve(conf amqp.Confirmation) {
	c.mu.Lock()
	e := c.pending[conf.DeliveryTag]
	if e == nil {
		c.mu.Unlock()
		return
	}
	if !e.kept(c.hooks.OnConfirm, conf.Ack) {
		c.mu.Unlock()
		return
	}
	delete(c.pending, conf.DeliveryTag)
	c.mu.Unlock()
	<-c.slots
	var err error
	switch {
	case !conf.Ack:
		err = ErrNacked
	case e.returned:
		err = ErrReturned
	}
	e.set(err)
}

// fail settles everything still pending once the channel is gone.
func (c *confirmer) fail() {
	c.mu.Lock()
	c.closed = true
	pending := c.pending
	c.pending = map[uint64]*entry{}
	c.mu.Unlock()
	for range pending {
		<-c.slots
	}
	for _, e := range pending {
		e.set(dispatch.ErrConnectionLost)
	}
}

// publish sends one message (mandatory, so an unroutable one comes back)
// and registers it as entry i of b. An error means it was not sent. With
// every slot taken it waits for confirms, and lets go of the caller's hold
// on the socket (out, held by Publisher.Publish) while it waits: what the
// hold gathered may be the very messages the confirms are for, and the
// connection's heartbeats must go out meanwhile.
func (c *confirmer) publish(ctx context.Context, b *Batch, i int, exchange, key string, msg amqp.Publishing) error {
	return c.publishJobs(ctx, b, i, nil, exchange, key, msg)
}

// publishJobs is publish for a message that carries jobs (a bundle; nil
// for a message of one), entries i onwards of b, settled together.
func (c *confirmer) publishJobs(ctx context.Context, b *Batch, i int, jobs []heraldtype.Job, exchange, key string, msg amqp.Publishing) error {
	select {
	case c.slots <- struct{}{}:
	default:
		c.out.release()
		err := c.slot(ctx)
		c.out.hold()
		if err != nil {
			return err
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.slots
		return dispatch.ErrConnectionLost
	}
	seq := c.ch.GetNextPublishSeqNo()
	c.pending[seq] = &entry{b: b, i: i, id: msg.MessageId, jobs: jobs}
	msg.CorrelationId = strconv.FormatUint(seq, 10)
	err := c.ch.PublishWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		delete(c.pending, seq)
		c.mu.Unlock()
		<-c.slots
		if errors.Is(err, amqp.ErrClosed) {
			return dispatch.ErrConnectionLost
		}
		return err
	}
	c.mu.Unlock()
	return nil
}

// slot waits for a free slot.
func (c *confirmer) slot(ctx context.Context) error {
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-c.done:
		return dispatch.ErrConnectionLost
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Batch is a set of publishes awaiting their confirms.
type Batch struct {
	mu       sync.Mutex
	errs     []error
	settled  []bool
	left     int
	finished bool
	done     chan struct{}
	deadline time.Time
}

func newBatch(n int, timeout time.Duration) *Batch {
	b := &Batch{errs: make([]error, n), settled: make([]bool, n), left: n, done: make(chan struct{}), deadline: time.Now().Add(timeout)}
	if n == 0 {
		b.finished = true
		close(b.done)
	}
	return b
}

func (b *Batch) set(i int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished || b.settled[i] {
		return
	}
	b.errs[i], b.settled[i] = err, true
	b.left--
	if b.left == 0 {
		b.finished = true
		close(b.done)
	}
}

var _ dispatch.Confirms = (*Batch)(nil)

// Wait blocks until every message is confirmed or failed, or the confirm
// timeout passes; it returns one error per message, nil for a confirmed one.
// A message without a confirm by then gets ErrConfirmTimeout.
func (b *Batch) Wait() []error {
	t := time.NewTimer(time.Until(b.deadline))
	defer t.Stop()
	select {
	case <-b.done:
	case <-t.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.finished {
		b.finished = true
		for i, ok := range b.settled {
			if !ok {
				b.errs[i] = ErrConfirmTimeout
			}
		}
		close(b.done)
	}
	return b.errs
}
