package store

import (
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/heraldtype"
)

// The inbox send has no outbox or delivery row.
//
// Intake writes the inbox item in the notification's transaction, so the
// inbox send ends STORED the moment it begins: there is nothing to claim,
// send, retry or settle. The notification row records it instead (DESIGN
// §4: the notification row is the inbox entry), in inbox_at, the inbox's
// place among the kind's channels (InboxAt; 0 for none), and a driver
// shows it as the send the read API, receipts and reconciliation have
// always seen: outbox DONE (reason STORED), delivery STORED, at the
// notification's creation time, in its channel's place among the planned
// sends. Two rows fewer per create (issue 9's intake aim); inbox_at
// outlives the item, which retention and erasure delete, as the rows did.
//
// Databases migrated from before had those rows; the migration that added
// inbox_at (0025 on both drivers) turned them into it.

// InboxAt is the inbox's place among p's channels, 1-based: its send's
// place among the notification's planned sends. 0 when p writes no inbox
// item.
func (p NotificationCreateParams) InboxAt() int {
	return slices.Index(p.Channels, heraldtype.ChannelInbox) + 1
}

// InboxNotificationID returns the notification id of messageID when it is
// an inbox send's (MessageID(id, ChannelInbox)).
func InboxNotificationID(messageID string) (string, bool) {
	return strings.CutSuffix(messageID, "."+string(heraldtype.ChannelInbox))
}

// InboxDelivery is the delivery of the inbox send of notification id of
// tenant, created at created.
func InboxDelivery(id, tenant string, created time.Time) Delivery {
	return Delivery{
		MessageID: MessageID(id, heraldtype.ChannelInbox), NotificationID: id, Tenant: tenant,
		Channel: heraldtype.ChannelInbox, State: heraldtype.DeliveryStored, Reason: heraldtype.ReasonStored,
		CreatedAt: created, UpdatedAt: created,
	}
}

// WithInboxSend puts v's inbox send among its planned sends when the
// notification wrote an inbox item, at (InboxAt) its place: after the
// sends of the at-1 channels before it (a push's sends, one per device,
// are one channel's). A driver calls it on the sends its rows hold, before
// WithPlannedSteps adds a lazy chain's later steps, which have no rows yet
// and came after the inbox's row when it had one.
func WithInboxSend(v NotificationView, at int) []DeliveryView {
	if at <= 0 {
		return v.Deliveries
	}
	d := InboxDelivery(v.ID, v.Tenant, v.CreatedAt)
	send := DeliveryView{
		MessageID: d.MessageID, Channel: d.Channel, OutboxState: heraldtype.OutboxDone, OutboxReason: heraldtype.ReasonStored,
		AvailableAt: v.CreatedAt, OutboxUpdated: v.CreatedAt, Delivery: &d,
	}
	i, before, last := 0, 0, heraldtype.Channel("")
	for ; i < len(v.Deliveries); i++ {
		ch := v.Deliveries[i].Channel.Base()
		if ch == last {
			continue
		}
		if before == at-1 {
			break
		}
		before, last = before+1, ch
	}
	return slices.Insert(v.Deliveries, i, send)
}
