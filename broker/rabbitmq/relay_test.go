package rabbitmq_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/dispatch"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/store"
)

// The relay publishes a row as a persistent message whose message id is the
// row's message_id, its body the job as JSON (application/json), and marks
// the row PUBLISHED once the broker confirmed it. Read by a plain AMQP
// consumer on the lane queue.
func TestRelayPublishesPersistentJSONWithTheRowsMessageID(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	pub, _ := e.startRelay(t, relayOpts{})
	waitConnected(t, pub)
	deliveries, err := e.channel(t).Consume(e.topo.Queue(lane), "probe", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := e.notify(t, "pay")
	d := testenv.Recv(t, deliveries, "the relay's message on the lane queue")
	if d.DeliveryMode != amqp.Persistent || d.ContentType != "application/json" || d.MessageId != id ||
		d.Exchange != e.topo.Exchange() || d.RoutingKey != string(lane) || d.Headers[rabbitmq.HeaderTenant] != "t1" {
		t.Fatalf("message: delivery mode %d, content type %q, message id %q (want %q), via %q/%q, headers %v",
			d.DeliveryMode, d.ContentType, d.MessageId, id, d.Exchange, d.RoutingKey, d.Headers)
	}
	var job heraldtype.Job
	if err := json.Unmarshal(d.Body, &job); err != nil {
		t.Fatalf("body is not a job: %v\n%s", err, d.Body)
	}
	if job.MessageID != id || store.MessageID(job.NotificationID, job.Channel) != id || job.Tenant != "t1" ||
		job.Lane != lane || job.Kind != "pay" {
		t.Fatalf("job %+v, want message %s of tenant t1, lane %s, kind pay", job, id, lane)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "PUBLISHED", func() bool { return e.outboxState(t, id) == heraldtype.OutboxPublished })
}

// A message nothing routes comes back from the real broker as a return (it
// is published mandatory), and its row goes back to PENDING with the
// dispatcher's backoff; the fifth failure raises DISPATCH_RETRYING and the
// row is FAILED (alerted) at the relay's MaxAttempts, each alert with its
// tenant.
func TestUnroutableMessageReturnsAndItsRowBacksOffUntilFailed(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now().Truncate(time.Millisecond)) // as precise as the store's times
	e := setup(t, options{clk: clk})
	alerts := &alert.Recorder{}
	const maxAttempts = dispatch.AlertAfterAttempts + 1
	waits := make(chan []error, maxAttempts+1)
	settled := make(chan int, maxAttempts+1)
	pub, _ := e.startRelay(t, relayOpts{maxAttempts: maxAttempts, alerts: alerts, waits: waits,
		hooks: dispatch.RelayHooks{AfterSettle: func(_, failed int) { settled <- failed }}})
	waitConnected(t, pub)
	// Nothing routes the lane's key any more.
	if err := e.channel(t).QueueUnbind(e.topo.Queue(lane), string(lane), e.topo.Exchange(), nil); err != nil {
		t.Fatal(err)
	}
	id := e.notify(t, "pay")
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		errs := testenv.Recv(t, waits, fmt.Sprintf("the confirm of publish %d", attempt))
		if len(errs) != 1 || !errors.Is(errs[0], rabbitmq.ErrReturned) {
			t.Fatalf("publish %d: %v, want [%v]", attempt, errs, rabbitmq.ErrReturned)
		}
		if n := testenv.Recv(t, settled, fmt.Sprintf("publish %d settled", attempt)); n != 1 {
			t.Fatalf("publish %d: %d rows settled as failed, want 1", attempt, n)
		}
		v := e.view(t, id)
		if attempt == maxAttempts {
			if v.OutboxState != heraldtype.OutboxFailed {
				t.Fatalf("outbox %s after %d failed publishes, want FAILED", v.OutboxState, attempt)
			}
			break
		}
		if want := clk.Now().Add(dispatch.Backoff(attempt)); v.OutboxState != heraldtype.OutboxPending || !v.AvailableAt.Equal(want) {
			t.Fatalf("after publish %d: outbox %s due %s, want PENDING due %s", attempt, v.OutboxState, v.AvailableAt, want)
		}
		clk.Advance(dispatch.Backoff(attempt))
	}
	want := []alert.Alert{
		{Kind: alert.DispatchSlow, MessageID: id, Tenant: "t1", Reason: "PUBLISH_FAILED"},
		{Kind: alert.OutboxFailed, MessageID: id, Tenant: "t1", Reason: "PUBLISH_FAILED"},
	}
	if got := alerts.Alerts(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("alerts %+v, want %+v", got, want)
	}
	if n := e.sim.Total(); n != 0 {
		t.Fatalf("%d provider calls", n)
	}
}
