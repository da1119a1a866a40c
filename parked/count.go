package parked

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// Counted returns st with the delivery states its parked-message writes
// enter counted in m's herald_deliveries_total, like every other delivery
// state entry: each delivery a requeue turns RETRY_WAIT (ParkedRequeue), a
// refused rabbitmq requeue parks again (ParkedRestore) or a discard ends
// SUPPRESSED (ParkedDiscard) adds one to that state, and only when the
// store reports that its guarded write took, so a requeue or discard that
// found nothing, or lost to a claim, counts nothing. Every other method is
// st's own. With m nil, Counted returns st.
//
// Both transports' services write through their store (DB.Store,
// rabbitmq.Parking.Store), so the server gives them this one. The CLI does
// not: it runs in a process of its own, whose counts no scrape of the
// server sees.
//
// The lane and channel a count is labelled with come from the write's
// answer (a requeue) or are read back after it (a restore, a discard). A
// read-back that fails leaves that one entry uncounted and is logged at
// error level.
func Counted(st store.Store, m *metrics.Metrics, logger *slog.Logger) store.Store {
	if m == nil {
		return st
	}
	if logger == nil {
		logger = slog.Default()
	}
	return counted{Store: st, m: m, logger: logger}
}

type counted struct {
	store.Store
	m      *metrics.Metrics
	logger *slog.Logger
}

func (c counted) ParkedRequeue(ctx context.Context, p store.ParkedRequeueParams) ([]store.ParkedEntry, error) {
	rows, err := c.Store.ParkedRequeue(ctx, p)
	for _, e := range rows {
		if e.Lane == "" { // no outbox row to say it
			c.count(ctx, e.MessageID, heraldtype.DeliveryRetryWait, e.Tenant, e.NotificationID, e.Channel)
			continue
		}
		c.m.Delivery(e.Lane, e.Channel, heraldtype.DeliveryRetryWait)
	}
	return rows, err
}

func (c counted) ParkedRestore(ctx context.Context, p store.ParkedRestoreParams) (bool, error) {
	ok, err := c.Store.ParkedRestore(ctx, p)
	if ok {
		c.count(ctx, p.MessageID, heraldtype.DeliveryParked, "", "", "")
	}
	return ok, err
}

func (c counted) ParkedDiscard(ctx context.Context, p store.ParkedDiscardParams) (store.ParkedDiscarded, error) {
	d, err := c.Store.ParkedDiscard(ctx, p)
	if d.Discarded {
		c.count(ctx, p.MessageID, heraldtype.DeliverySuppressed, d.Tenant, p.NotificationID, p.Channel)
	}
	return d, err
}

// count counts messageID's delivery entering state. The delivery's tenant,
// notification and channel are read back when not given, and its lane from
// its notification.
func (c counted) count(ctx context.Context, messageID string, state heraldtype.DeliveryState, tenant, notificationID string, ch heraldtype.Channel) {
	lane, ch, err := c.labels(context.WithoutCancel(ctx), messageID, tenant, notificationID, ch)
	if err != nil {
		c.logger.LogAttrs(ctx, slog.LevelError, "parked: delivery state entry not counted",
			slog.String("message_id", messageID), slog.String("state", string(state)), slog.Any("error", err))
		return
	}
	c.m.Delivery(lane, ch, state)
}

func (c counted) labels(ctx context.Context, messageID, tenant, notificationID string, ch heraldtype.Channel) (heraldtype.Lane, heraldtype.Channel, error) {
	if notificationID == "" || tenant == "" || ch == "" {
		d, err := c.DeliveryGet(ctx, messageID)
		if err != nil {
			return "", "", fmt.Errorf("read delivery: %w", err)
		}
		tenant, notificationID, ch = d.Tenant, d.NotificationID, d.Channel
	}
	v, err := c.NotificationGet(ctx, tenant, notificationID)
	if err != nil {
		return "", "", fmt.Errorf("read notification %s: %w", notificationID, err)
	}
	return v.Lane, ch, nil
}
