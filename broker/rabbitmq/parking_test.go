package rabbitmq_test

import (
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/parked"
)

// A requeue publishes the parked message to its lane and waits for the
// broker's confirm before it removes the parked copy: while the lane queue
// refuses the copy (nack), the parked copy stays; once the lane takes it,
// the parked copy is gone and the lane holds the message, same id and body.
func TestRequeueRemovesTheParkedCopyOnlyAfterTheLaneConfirmedIt(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	parking := &rabbitmq.Parking{URL: e.url, Topology: e.topo, ConfirmTimeout: patience, Logger: quiet}
	job := heraldtype.Job{MessageID: "m-parked.webhook", NotificationID: "m-parked", Tenant: "t1", Kind: "gone",
		Lane: lane, Channel: heraldtype.ChannelWebhook}
	msg, err := rabbitmq.JobMessage(job, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers[rabbitmq.HeaderFailureReason] = heraldtype.ReasonUnknownKind
	if !e.publish(t, e.topo.ParkingExchange(), rabbitmq.ParkedKey, msg) {
		t.Fatal("park: nacked")
	}
	parkedIDs := func() []string {
		t.Helper()
		list, err := parking.List(e.ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range list {
			ids = append(ids, p.MessageID)
		}
		return ids
	}

	// The lane queue refuses new messages: a policy caps it at none, and
	// with x-overflow reject-publish the broker nacks every publish once
	// the cap is in force.
	vhost, policy := testmq.VHostOf(e.url), "lane-full"
	testmq.Ctl(t, "set_policy", "-p", vhost, "--apply-to", "queues", policy,
		"^"+regexp.QuoteMeta(e.topo.Queue(lane))+"$", `{"max-length": 0}`)
	e.waitFor(t, "the lane queue to refuse publishes", func() bool {
		return !e.publish(t, e.topo.Exchange(), string(lane), amqp.Publishing{MessageId: "filler", Body: []byte("filler")})
	})
	if _, err := parking.Requeue(e.ctx, "t1", job.MessageID); !errors.Is(err, rabbitmq.ErrNacked) {
		t.Fatalf("requeue into a full lane: %v, want %v", err, rabbitmq.ErrNacked)
	}
	if ids := parkedIDs(); !slices.Equal(ids, []string{job.MessageID}) {
		t.Fatalf("parked after a refused requeue: %v, want [%s]", ids, job.MessageID)
	}

	testmq.Ctl(t, "clear_policy", "-p", vhost, policy)
	var n int
	e.waitFor(t, "a requeue once the lane takes messages again", func() bool {
		n, err = parking.Requeue(e.ctx, "t1", job.MessageID)
		if err != nil && !errors.Is(err, rabbitmq.ErrNacked) {
			t.Fatalf("requeue: %v", err)
		}
		return err == nil
	})
	if n != 1 {
		t.Fatalf("requeued %d, want 1", n)
	}
	if ids := parkedIDs(); len(ids) != 0 {
		t.Fatalf("still parked after the requeue: %v", ids)
	}
	if _, err := parking.Requeue(e.ctx, "t1", job.MessageID); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("second requeue: %v, want not found", err)
	}
	ch := e.channel(t)
	for {
		d, ok, err := ch.Get(e.topo.Queue(lane), false)
		if err != nil || !ok {
			t.Fatalf("the requeued message is not in the lane queue (%v)", err)
		}
		if d.MessageId != job.MessageID {
			continue // a filler that got in before the cap
		}
		if string(d.Body) != string(msg.Body) || d.Headers["x-herald-requeued-from"] != heraldtype.ReasonUnknownKind ||
			d.Headers[rabbitmq.HeaderFailureReason] != nil {
			t.Fatalf("requeued copy: body %s, headers %v", d.Body, d.Headers)
		}
		break
	}
}
