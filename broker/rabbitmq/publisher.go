package rabbitmq

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
)

// PublisherConfig configures a relay's publisher.
type PublisherConfig struct {
	URL string
	// Name labels the connection in the broker and in logs.
	Name     string
	Topology Topology
	// ConfirmTimeout bounds the wait for a publisher confirm. Defaults to 5 seconds.
	ConfirmTimeout time.Duration
	// Bundle is the most jobs one message carries (bundle.go). Defaults
	// to DefaultBundle; 1 publishes every job as a message of its own.
	Bundle int
	Logger *slog.Logger
	Hooks  ConfirmHooks
}

// Publisher is the relay's side of the broker: one connection and one
// confirm-mode channel that it keeps up by itself (Run), publishing whole
// batches without waiting for each confirm.
type Publisher struct {
	cfg PublisherConfig

	mu    sync.Mutex
	cur   *confirmer
	ready chan struct{} // closed while cur is usable
	link  link
	// inspect is a channel of the same connection for reading queue
	// depths (Backlog); nil while disconnected.
	inspect *amqp.Channel
	// conn is the connection cur and inspect are on, for a new inspect
	// channel when a depth read closed the last (Backlog).
	conn *amqp.Connection
	// reading orders the depth reads: a relay's claim loops and its hand
	// loop read at once, and amqp091 does not pair a channel's replies
	// with its concurrent requests.
	reading sync.Mutex
	// jobs and messages count what was published, so Backlog can count a
	// queue's ready messages in jobs.
	jobs, messages atomic.Int64
}

var _ dispatch.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher; Run connects it.
func NewPublisher(cfg PublisherConfig) *Publisher {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 5 * time.Second
	}
	if cfg.Name == "" {
		cfg.Name = "herald-relay"
	}
	if cfg.Bundle < 1 {
		cfg.Bundle = DefaultBundle
	}
	cfg.Topology = cfg.Topology.WithDefaults()
	return &Publisher{cfg: cfg, ready: make(chan struct{})}
}

// Run keeps the publisher connected until ctx is done, redialling with
// backoff after a broker restart or a lost connection. It declares the
// topology on every connect (idempotent).
func (p *Publisher) Run(ctx context.Context) {
	session(ctx, p.cfg.Logger, p.cfg.URL, p.cfg.Name, &p.link, func(ctx context.Context, conn *amqp.Connection, out *coalescer) error {
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		if err := p.cfg.Topology.Declare(ch); err != nil {
			return err
		}
		c, err := newConfirmer(ch, out, p.cfg.Hooks)
		if err != nil {
			return fmt.Errorf("enable publisher confirms: %w", err)
		}
		inspect, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("open inspect channel: %w", err)
		}
		p.mu.Lock()
		p.cur, p.inspect, p.conn = c, inspect, conn
		close(p.ready)
		p.mu.Unlock()
		p.link.up()
		p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "rabbitmq: publisher connected", slog.String("component", p.cfg.Name))

		var cause error
		select {
		case <-ctx.Done():
		case e := <-closed:
			cause = errClosed(e)
		case <-c.done:
			cause = fmt.Errorf("rabbitmq: publishing channel closed")
		}
		p.mu.Lock()
		p.cur, p.inspect, p.conn = nil, nil, nil
		p.ready = make(chan struct{})
		p.mu.Unlock()
		return cause
	})
}

// Status reports whether the publisher is connected, and if not, why.
func (p *Publisher) Status() Status { return p.link.get() }

// Ready blocks until the publisher is connected.
func (p *Publisher) Ready(ctx context.Context) error {
	p.mu.Lock()
	ready := p.ready
	p.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backlog is about how many jobs wait ready in lane's queue and its
// express queue (not counting those consumers hold unacknowledged): the
// relay's publish window (dispatch.RelayConfig.Backlog). It reads the
// queues with passive declares on the publisher's connection. The broker
// counts messages and a bundle carries several jobs, so the count is
// scaled by the jobs a message this publisher has published (inJobs).
func (p *Publisher) Backlog(ctx context.Context, lane heraldtype.Lane) (int, error) {
	p.reading.Lock()
	defer p.reading.Unlock()
	p.mu.Lock()
	ch := p.inspect
	p.mu.Unlock()
	if ch == nil {
		return 0, dispatch.ErrConnectionLost
	}
	n := 0
	for _, name := range []string{p.cfg.Topology.Queue(lane), p.cfg.Topology.ExpressQueue(lane)} {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			// A passive declare of a missing queue (an operator deleted it;
			// its consumer declares it again) closes the channel: open
			// another, or every later read would fail and the relay would
			// publish without its window until the connection dropped.
			p.reopenInspect(ch)
			return 0, fmt.Errorf("rabbitmq: read the depth of %s: %w", name, err)
		}
		n += q.Messages
	}
	return p.inJobs(n), nil
}

// inJobs is about how many jobs n ready messages carry: n times the jobs
// a message this publisher has published so far, rounded up.
func (p *Publisher) inJobs(n int) int {
	msgs := p.messages.Load()
	if n == 0 || msgs == 0 {
		return n
	}
	return int((int64(n)*p.jobs.Load() + msgs - 1) / msgs)
}

// reopenInspect replaces the inspect channel old, after a read on it
// failed, with a new channel of the same connection (one already replaced
// is left).
func (p *Publisher) reopenInspect(old *amqp.Channel) {
	p.mu.Lock()
	conn := p.conn
	current := p.inspect == old
	p.mu.Unlock()
	if !current || conn == nil {
		return
	}
	// Opened outside the lock: a round trip to the broker, which Publish
	// and the session must not wait behind.
	ch, err := conn.Channel()
	if err != nil {
		return // the connection is going: the session opens a new one
	}
	p.mu.Lock()
	swap := p.inspect == old && p.conn == conn
	if swap {
		p.inspect = ch
	}
	p.mu.Unlock()
	if !swap {
		_ = ch.Close() // another caller, or a new session, was first
		return
	}
	_ = old.Close() // closed by the broker already, as a rule
}

// Publish sends the jobs to one of the lane's queues (q) as persistent,
// mandatory messages, up to PublisherConfig.Bundle jobs a message (a
// bundle, bundle.go; a message of one job has the job's message id), and
// returns at once; Wait on the result gives each job's confirm, a
// bundle's for each of its jobs. The batch goes out in a few writes, not
// one a message (coalescer).
func (p *Publisher) Publish(ctx context.Context, lane heraldtype.Lane, q dispatch.Queue, jobs []heraldtype.Job) dispatch.Confirms {
	b := newBatch(len(jobs), p.cfg.ConfirmTimeout)
	p.mu.Lock()
	c := p.cur
	p.mu.Unlock()
	if c != nil {
		c.out.hold()
		defer c.out.release()
	}
	cut := bundler{max: p.cfg.Bundle, now: time.Now()}
	for i := 0; i < len(jobs); {
		if c == nil {
			b.set(i, dispatch.ErrConnectionLost)
			i++
			continue
		}
		msg, n, err := cut.next(jobs[i:])
		if err == nil {
			var carried []heraldtype.Job // a bundle's jobs; nil for a message of one
			if n > 1 {
				carried = jobs[i : i+n]
			}
			err = c.publishJobs(ctx, b, i, carried, p.cfg.Topology.Exchange(), p.cfg.Topology.Key(lane, q), msg)
		}
		if err != nil {
			for k := range n {
				b.set(i+k, err)
			}
		} else {
			p.jobs.Add(int64(n))
			p.messages.Add(1)
		}
		i += n
	}
	return b
}

// JobMessage is the message for a job: its JSON as the body, its message id,
// persistent, with the tenant in a header, and for a job that comes with
// the relay's claim of its row (Job.Outbox) the claim's token
// (HeaderOutboxToken).
func JobMessage(job heraldtype.Job, now time.Time) (amqp.Publishing, error) {
	body, err := json.Marshal(job)
	return jobMessage(job, body, err, now)
}

// jobMessage is JobMessage with the job's JSON (body) and its encoding's
// error given.
func jobMessage(job heraldtype.Job, body []byte, err error, now time.Time) (amqp.Publishing, error) {
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("encode job %s: %w", job.MessageID, err)
	}
	headers := amqp.Table{HeaderTenant: job.Tenant}
	if job.Outbox != nil {
		headers[HeaderOutboxToken] = job.Outbox.Token
	}
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    job.MessageID,
		Timestamp:    now,
		Type:         TypeJob,
		Body:         body,
	}, nil
}
