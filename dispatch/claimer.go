// Package dispatch moves outbox rows to the sender. With the db transport a
// Claimer per lane leases due rows straight from the outbox and hands each to
// the sender; with the rabbitmq transport the relay publishes them instead.
//
// Each lane has its own Claimer and its own slots (sender concurrency), so a
// marketing backlog never occupies a slot a payment notification needs.
//
// A Claimer writes only the outbox, and every write after the claim is fenced
// by the row's token and live lease: if this process stalled past its lease
// and another took the row, its late write changes nothing. In the common
// case it writes nothing after the claim at all: it hands the sender the
// row's fence with the job, and the sender's result write settles the row
// in the same statement; the Claimer settles only what that did not.
package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// Backoff is the dispatcher's wait before the n-th retry of a row (1-based):
// 1, 2, 4, 8, 16, then 30 minutes.
func Backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 5 {
		return 30 * time.Minute
	}
	return time.Duration(1<<(n-1)) * time.Minute
}

// AlertAfterAttempts is the failed dispatch attempt that raises an alert.
const AlertAfterAttempts = 5

// Sender is the one sender algorithm, as the claimer uses it.
type Sender interface {
	Send(ctx context.Context, job heraldtype.Job) sender.Result
}

// ClaimerConfig configures one lane's claimer.
type ClaimerConfig struct {
	Lane  heraldtype.Lane
	Store store.Outbox
	// Wake carries "rows became due" signals for this lane.
	Wake   <-chan struct{}
	Sender Sender
	// Owner names this process in claims.
	Owner string
	// Concurrency is the number of sends in flight on this lane.
	Concurrency int
	Lease       time.Duration
	// PollInterval is how often an idle claimer looks for due rows unbidden.
	PollInterval time.Duration
	// MaxAttempts is the failed dispatch attempts after which a row is FAILED.
	MaxAttempts int
	Logger      *slog.Logger
	Alerts      alert.Sink
	Metrics     *metrics.Metrics
	// SettleTimeout bounds the fenced write after a send. Defaults to 10 seconds.
	SettleTimeout time.Duration
}

// Claimer leases a lane's due rows and runs the sender on each.
type Claimer struct {
	ClaimerConfig
	settler settler
	slots   chan struct{}
	freed   chan struct{}
}

// NewClaimer returns a claimer.
func NewClaimer(cfg ClaimerConfig) *Claimer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Alerts == nil {
		cfg.Alerts = alert.Log{Logger: cfg.Logger}
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 10 * time.Second
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.MaxAttempts < 1 {
		cfg.MaxAttempts = 20
	}
	return &Claimer{
		ClaimerConfig: cfg, slots: make(chan struct{}, cfg.Concurrency), freed: make(chan struct{}, 1),
		settler: settler{who: "dispatch", lane: cfg.Lane, store: cfg.Store, maxAttempts: cfg.MaxAttempts,
			logger: cfg.Logger, alerts: cfg.Alerts, metrics: cfg.Metrics},
	}
}

// Run claims and sends until ctx is cancelled, then stops claiming and waits
// for the sends in flight. Rows claimed but not yet started go back to PENDING
// at once.
func (c *Claimer) Run(ctx context.Context) {
	// Concurrency long-lived workers run the sends: a goroutine per row
	// would grow a fresh stack for every send. A row takes a slot before it
	// is handed over, so work never holds more rows than there are workers.
	work := make(chan store.Claimed, c.Concurrency)
	var workers sync.WaitGroup
	for range c.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for row := range work {
				c.process(ctx, row)
			}
		}()
	}
	defer func() { close(work); workers.Wait() }()
	poll := time.NewTicker(c.PollInterval)
	defer poll.Stop()
	var pause claimPause
	for {
		if ctx.Err() != nil {
			return
		}
		free := cap(c.slots) - len(c.slots)
		full := false
		if free > 0 {
			rows, err := c.Store.OutboxClaim(ctx, store.OutboxClaimParams{
				Lane: c.Lane, Owner: c.Owner, Limit: free, Lease: c.Lease,
			})
			if err != nil {
				if !pause.after(ctx, c.Logger, "dispatch", c.Lane, err) {
					return
				}
				continue
			}
			pause.reset()
			for _, row := range rows {
				c.slots <- struct{}{}
				work <- row
			}
			full = len(rows) == free
		}
		if full {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return
		case <-c.Wake:
		case <-poll.C:
		case <-c.freed:
		}
	}
}

func (c *Claimer) process(ctx context.Context, row store.Claimed) {
	defer func() {
		<-c.slots
		select {
		case c.freed <- struct{}{}:
		default:
		}
	}()
	// The sender's result write settles the row too, fenced by this claim.
	job := row.Job
	fence := row.Fence
	job.Outbox = &fence
	res := c.Sender.Send(ctx, job)
	c.settle(ctx, row, res)
}

// settle records the sender's verdict on the outbox row, fenced.
func (c *Claimer) settle(ctx context.Context, row store.Claimed, res sender.Result) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.SettleTimeout)
	defer cancel()
	var (
		ok     bool
		err    error
		result string
	)
	switch {
	case res.OutboxSettled:
		result, ok = ResultDone, true
		if res.Verdict == sender.Retry {
			result = ResultRetry
		}
	case res.Verdict == sender.Done || res.Verdict == sender.Park:
		result = ResultDone
		ok, err = c.Store.OutboxComplete(wctx, row.Fence, heraldtype.OutboxDone, res.Reason)
	case res.Verdict == sender.Retry:
		result = ResultRetry
		ok, err = c.Store.OutboxRetry(wctx, store.OutboxRetryParams{Fence: row.Fence, Delay: res.Delay, Reason: res.Reason})
	default: // Backoff
		if ctx.Err() != nil && errors.Is(res.Err, ctx.Err()) {
			// Shutting down before the claim: give the row back at once.
			result = ResultReleased
			ok, err = c.Store.OutboxRetry(wctx, store.OutboxRetryParams{Fence: row.Fence, Reason: "SHUTDOWN"})
			break
		}
		result, ok, err = c.settler.backOff(wctx, row, res.Reason, res.Err)
	}
	c.settler.report(ctx, row, result, ok, err)
}
