package rabbitmq

import (
	"context"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// ActionDeferred counts a copy acked because its outbox row waits for the
// deferral (herald_dispatch_total{result="deferred"}; the relay counts
// the rows its gate held back under the same result).
const ActionDeferred = "deferred"

// retryCopy acts on a Retry verdict before the ack: it returns the action
// counted and, when the copy is to be kept, how long it waits in the
// retry queue and the headers it gets.
func (c *Consumer) retryCopy(ctx context.Context, d amqp.Delivery, job heraldtype.Job, res sender.Result) (action string, keep bool, delay time.Duration, set amqp.Table) {
	tiers := c.cfg.Topology.RetryDelays
	token := int64(headerInt(d.Headers, HeaderOutboxToken))
	if c.cfg.Outbox == nil || res.State != "" || res.Delay <= tiers[len(tiers)-1] || token <= 0 {
		return ActionRetryQueued, true, res.Delay, nil
	}
	f := store.Fence{ID: job.OutboxID, NotificationID: job.NotificationID, Channel: job.Channel, Token: token}
	out, err := c.cfg.Outbox.OutboxDefer(ctx, store.OutboxDeferParams{Fence: f, Delay: res.Delay, Reason: res.Reason})
	switch {
	case err != nil:
		n := headerInt(d.Headers, HeaderBackoffs) + 1
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "rabbitmq: could not put a deferred send back into the outbox; backing off",
			slog.String("message_id", job.MessageID), slog.Int("attempt", n), slog.Any("error", err))
		return ActionBackoff, true, dispatch.Backoff(n), amqp.Table{HeaderBackoffs: int64(n)}
	case out.Deferred:
		c.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "rabbitmq: deferred send waits in the outbox",
			slog.String("message_id", job.MessageID), slog.String("reason", res.Reason), slog.Duration("delay", res.Delay))
		return ActionDeferred, false, 0, nil
	case out.Superseded(f):
		c.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "rabbitmq: deferred copy of an outbox row another owner holds; dropped",
			slog.String("message_id", job.MessageID), slog.String("outbox_state", string(out.State)))
		return ActionAcked, false, 0, nil
	case out.Publishing(f):
		age := time.Duration(0)
		if !d.Timestamp.IsZero() {
			age = time.Since(d.Timestamp)
		}
		return ActionRetryQueued, true, min(max(age, sender.MinRecheck), sender.MaxRecheck), nil
	}
	return ActionRetryQueued, true, res.Delay, nil
}
