package rabbitmq_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
)

// parking is the env's parking service over store st (nil for none).
func (e *env) parking(st store.Parked) *rabbitmq.Parking {
	return &rabbitmq.Parking{URL: e.url, Topology: e.topo, Store: st, ConfirmTimeout: testenv.Patience, Logger: quiet}
}

// parkCopy puts a copy of msg in the parking queue with reason, as a
// consumer parks a message.
func (e *env) parkCopy(t *testing.T, msg amqp.Publishing, reason string) {
	t.Helper()
	c := msg
	c.Headers = amqp.Table{}
	for k, v := range msg.Headers {
		c.Headers[k] = v
	}
	c.Headers[rabbitmq.HeaderFailureReason] = reason
	if !e.publish(t, e.topo.ParkingExchange(), rabbitmq.ParkedKey, c) {
		t.Fatalf("park %s: nacked", msg.MessageId)
	}
}

// parkedJob parks a notification of tenant t1 of kind the way the sender
// and consumer do: its delivery PARKED with reason, a copy of its job in
// the parking queue. It returns the job and its message.
func (e *env) parkedJob(t *testing.T, kind, reason string) (heraldtype.Job, amqp.Publishing) {
	t.Helper()
	id := e.notify(t, kind)
	job := heraldtype.Job{MessageID: id, NotificationID: strings.TrimSuffix(id, ".webhook"), Tenant: "t1", Kind: kind,
		Lane: lane, Channel: heraldtype.ChannelWebhook}
	ok, err := e.store.DeliveryDecide(e.ctx, store.DeliveryDecideParams{
		MessageID: id, NotificationID: job.NotificationID, Tenant: "t1", Channel: job.Channel,
		State: heraldtype.DeliveryParked, Reason: reason,
	})
	if err != nil || !ok {
		t.Fatalf("park the delivery: %v %v", ok, err)
	}
	msg, err := rabbitmq.JobMessage(job, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.parkCopy(t, msg, reason)
	return job, msg
}

// parkedIDs lists the message ids in the parking queue as scope s sees
// them, in queue order.
func (e *env) parkedIDs(t *testing.T, s parked.Scope) []string {
	t.Helper()
	list, err := e.parking(nil).List(e.ctx, s, 50)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range list {
		ids = append(ids, p.MessageID)
	}
	return ids
}

// refuseLane makes the lane queue refuse new messages — a policy caps it
// at none, and with x-overflow reject-publish the broker nacks every
// publish once the cap is in force — until allow is called.
func (e *env) refuseLane(t *testing.T) (allow func()) {
	t.Helper()
	vhost, policy := testmq.VHostOf(e.url), "lane-full"
	testmq.Ctl(t, "set_policy", "-p", vhost, "--apply-to", "queues", policy,
		"^"+regexp.QuoteMeta(e.topo.Queue(lane))+"$", `{"max-length": 0}`)
	e.waitFor(t, "the lane queue to refuse publishes", func() bool {
		return !e.publish(t, e.topo.Exchange(), string(lane), amqp.Publishing{MessageId: "filler", Body: []byte("filler")})
	})
	return func() { testmq.Ctl(t, "clear_policy", "-p", vhost, policy) }
}

// requeueOnceTheLaneTakesIt requeues messageID until the lane stops
// refusing the copy (the policy's removal takes a moment) and returns how
// many were requeued.
func (e *env) requeueOnceTheLaneTakesIt(t *testing.T, p *rabbitmq.Parking, messageID string) int {
	t.Helper()
	var n int
	e.waitFor(t, "a requeue once the lane takes messages again", func() bool {
		done, err := p.Requeue(e.ctx, parked.Tenant("t1"), messageID)
		n = done.Total()
		if err != nil && !errors.Is(err, rabbitmq.ErrNacked) {
			t.Fatalf("requeue: %v", err)
		}
		return err == nil
	})
	return n
}

// A requeue publishes the parked message to its lane and waits for the
// broker's confirm before it removes the parked copy: while the lane queue
// refuses the copy (nack), the parked copy stays; once the lane takes it,
// the parked copy is gone and the lane holds the message, same id and body.
func TestRequeueRemovesTheParkedCopyOnlyAfterTheLaneConfirmedIt(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	parking := e.parking(nil)
	job := heraldtype.Job{MessageID: "m-parked.webhook", NotificationID: "m-parked", Tenant: "t1", Kind: "gone",
		Lane: lane, Channel: heraldtype.ChannelWebhook}
	msg, err := rabbitmq.JobMessage(job, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.parkCopy(t, msg, heraldtype.ReasonUnknownKind)

	allow := e.refuseLane(t)
	if _, err := parking.Requeue(e.ctx, parked.Tenant("t1"), job.MessageID); !errors.Is(err, rabbitmq.ErrNacked) {
		t.Fatalf("requeue into a full lane: %v, want %v", err, rabbitmq.ErrNacked)
	}
	if ids := e.parkedIDs(t, parked.Operator("")); !slices.Equal(ids, []string{job.MessageID}) {
		t.Fatalf("parked after a refused requeue: %v, want [%s]", ids, job.MessageID)
	}

	allow()
	if n := e.requeueOnceTheLaneTakesIt(t, parking, job.MessageID); n != 1 {
		t.Fatalf("requeued %d, want 1", n)
	}
	if ids := e.parkedIDs(t, parked.Operator("")); len(ids) != 0 {
		t.Fatalf("still parked after the requeue: %v", ids)
	}
	if _, err := parking.Requeue(e.ctx, parked.Tenant("t1"), job.MessageID); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("second requeue: %v, want not found", err)
	}
	e.wantInLane(t, job.MessageID, msg.Body, heraldtype.ReasonUnknownKind)
}

// wantInLane finds the requeued copy of messageID in the lane queue: same
// body, the parked reason as x-herald-requeued-from, no failure reason.
func (e *env) wantInLane(t *testing.T, messageID string, body []byte, reason string) {
	t.Helper()
	ch := e.channel(t)
	for {
		d, ok, err := ch.Get(e.topo.Queue(lane), false)
		if err != nil || !ok {
			t.Fatalf("the requeued message is not in the lane queue (%v)", err)
		}
		if d.MessageId != messageID {
			continue // a filler that got in before the cap
		}
		if string(d.Body) != string(body) || d.Headers["x-herald-requeued-from"] != reason ||
			d.Headers[rabbitmq.HeaderFailureReason] != nil {
			t.Fatalf("requeued copy: body %s, headers %v", d.Body, d.Headers)
		}
		return
	}
}

// With a store, a requeue turns the PARKED delivery into a due retry before
// it publishes (the sender's claim accepts only that). If the lane refuses
// the copy, the delivery is parked again: it must not read RETRY_WAIT while
// no copy is on its way and the message is still parked.
func TestRequeueRefusedByTheLaneLeavesTheDeliveryParked(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	parking := e.parking(e.store)
	job, msg := e.parkedJob(t, "gone", heraldtype.ReasonUnknownKind)

	allow := e.refuseLane(t)
	if _, err := parking.Requeue(e.ctx, parked.Tenant("t1"), job.MessageID); !errors.Is(err, rabbitmq.ErrNacked) {
		t.Fatalf("requeue into a full lane: %v, want %v", err, rabbitmq.ErrNacked)
	}
	if d := e.delivery(t, job.MessageID); d.State != heraldtype.DeliveryParked || d.Reason != heraldtype.ReasonUnknownKind {
		t.Fatalf("after a refused requeue the delivery is %s(%s), want PARKED(UNKNOWN_KIND): it waits for a copy that is not coming",
			d.State, d.Reason)
	}
	if ids := e.parkedIDs(t, parked.Operator("")); !slices.Equal(ids, []string{job.MessageID}) {
		t.Fatalf("parked after a refused requeue: %v, want [%s]", ids, job.MessageID)
	}

	allow()
	if n := e.requeueOnceTheLaneTakesIt(t, parking, job.MessageID); n != 1 {
		t.Fatalf("requeued %d, want 1", n)
	}
	if d := e.delivery(t, job.MessageID); d.State != heraldtype.DeliveryRetryWait || d.Reason != heraldtype.ReasonRequeued {
		t.Fatalf("after the requeue the delivery is %s(%s), want RETRY_WAIT(REQUEUED)", d.State, d.Reason)
	}
	e.wantInLane(t, job.MessageID, msg.Body, heraldtype.ReasonUnknownKind)
}

// failingDiscard is a store whose discards fail (after writing nothing).
type failingDiscard struct{ store.Parked }

func (failingDiscard) ParkedDiscard(context.Context, store.ParkedDiscardParams) (store.ParkedDiscarded, error) {
	return store.ParkedDiscarded{}, errors.New("store unavailable")
}

// A discard records its decision (the delivery SUPPRESSED(DISCARDED), the
// audit row) before it removes every parked copy; it is the caller's
// tenant's only; a second discard finds nothing; and a copy left behind
// that is requeued later is acked by the sender without a call.
func TestDiscardRecordsThenRemovesEveryCopy(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	parking := e.parking(e.store)
	job, msg := e.parkedJob(t, "gone", heraldtype.ReasonUnknownKind)
	e.parkCopy(t, msg, heraldtype.ReasonUnknownKind) // a second copy
	discard := parked.Discard{MessageID: job.MessageID, Reason: "kind retired", Actor: "api:t1"}

	if list, err := parking.List(e.ctx, parked.Tenant("t1"), 10); err != nil || len(list) != 2 || list[0].Kind != "gone" {
		t.Fatalf("listed %+v (%v), want two copies naming kind gone", list, err)
	}
	if _, err := parking.Discard(e.ctx, parked.Tenant("t2"), discard); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("another tenant's discard: %v, want not found", err)
	}
	if _, err := parking.Discard(e.ctx, parked.Tenant("t1"), parked.Discard{MessageID: job.MessageID}); !errors.Is(err, parked.ErrReason) {
		t.Fatalf("discard without a reason: %v, want %v", err, parked.ErrReason)
	}
	if _, err := e.parking(failingDiscard{e.store}).Discard(e.ctx, parked.Tenant("t1"), discard); err == nil {
		t.Fatal("a discard that could not be recorded succeeded")
	}
	if ids := e.parkedIDs(t, parked.Operator("")); len(ids) != 2 {
		t.Fatalf("parked after a discard that was not recorded: %v, want both copies", ids)
	}
	if d := e.delivery(t, job.MessageID); d.State != heraldtype.DeliveryParked {
		t.Fatalf("delivery %s, want PARKED", d.State)
	}

	if _, err := parking.Discard(e.ctx, parked.Tenant("t1"), discard); err != nil {
		t.Fatalf("discard: %v", err)
	}
	if ids := e.parkedIDs(t, parked.Operator("")); len(ids) != 0 {
		t.Fatalf("parked after the discard: %v", ids)
	}
	if d := e.delivery(t, job.MessageID); d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonDiscarded {
		t.Fatalf("delivery %s(%s), want SUPPRESSED(DISCARDED)", d.State, d.Reason)
	}
	audit, err := e.store.ParkedDiscardList(e.ctx, store.ParkedDiscardListParams{MessageID: job.MessageID})
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit rows %+v (%v), want one", audit, err)
	}
	if a := audit[0]; a.Actor != "api:t1" || a.Tenant != "t1" || a.ParkedReason != heraldtype.ReasonUnknownKind || a.Reason != "kind retired" {
		t.Fatalf("audit row %+v", a)
	}
	if _, err := parking.Discard(e.ctx, parked.Tenant("t1"), discard); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("second discard: %v, want not found", err)
	}

	// A copy left behind (a crash between the record and the removal)
	// is requeued: the sender, which knows the kind again, finds the
	// delivery SUPPRESSED and acks it without a call.
	e.parkCopy(t, msg, heraldtype.ReasonUnknownKind)
	e.startConsumer(t, e.sender(t, "gone"), rabbitmq.ConsumerHooks{})
	if n, err := parking.Requeue(e.ctx, parked.Tenant("t1"), job.MessageID); err != nil || n.Total() != 1 {
		t.Fatalf("requeue of the left copy: %v %v", n, err)
	}
	e.waitFor(t, "the requeued copy of a discarded message acked", func() bool {
		return slices.Contains(e.actions(job.MessageID), "acked")
	})
	if n := e.sim.CallCount(job.MessageID); n != 0 {
		t.Fatalf("a discarded message was sent %d times", n)
	}
	if d := e.delivery(t, job.MessageID); d.State != heraldtype.DeliverySuppressed || d.Reason != heraldtype.ReasonDiscarded {
		t.Fatalf("delivery %s(%s) after the requeue, want SUPPRESSED(DISCARDED)", d.State, d.Reason)
	}
}

// A body that is not a job names no tenant: no tenant lists or discards
// it; the operator lists it (alone with Untenanted) and discards it, with
// an audit row and no delivery row.
func TestUntenantedParkedMessagesAreTheOperatorsOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	parking := e.parking(e.store)
	job, _ := e.parkedJob(t, "gone", heraldtype.ReasonUnknownKind)
	e.parkCopy(t, amqp.Publishing{MessageId: "garbage-1", DeliveryMode: amqp.Persistent, Body: []byte("not json")}, rabbitmq.ReasonMalformed)

	for _, c := range []struct {
		name  string
		scope parked.Scope
		want  []string
	}{
		{"Tenant", parked.Tenant("t1"), []string{job.MessageID}},
		{"OtherTenant", parked.Tenant("t2"), nil},
		{"Untenanted", parked.Untenanted(), []string{"garbage-1"}},
		{"Operator", parked.Operator(""), []string{job.MessageID, "garbage-1"}},
		{"OperatorOfATenant", parked.Operator("t1"), []string{job.MessageID}},
	} {
		if got := e.parkedIDs(t, c.scope); !slices.Equal(got, c.want) {
			t.Errorf("%s lists %v, want %v", c.name, got, c.want)
		}
	}
	list, err := parking.List(e.ctx, parked.Untenanted(), 10)
	if err != nil || len(list) != 1 {
		t.Fatalf("untenanted: %+v (%v)", list, err)
	}
	if g := list[0]; g.Tenant != "" || g.NotificationID != "" || g.Kind != "" || g.Lane != "" || g.Channel != "" || g.Reason != rabbitmq.ReasonMalformed {
		t.Fatalf("untenanted entry %+v", g)
	}

	discard := parked.Discard{MessageID: "garbage-1", Reason: "not ours", Actor: "cli:ops"}
	if _, err := parking.Discard(e.ctx, parked.Tenant("t1"), discard); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("a tenant discarded an untenanted message: %v", err)
	}
	if _, err := parking.Discard(e.ctx, parked.Operator(""), discard); err != nil {
		t.Fatalf("operator discard: %v", err)
	}
	if got := e.parkedIDs(t, parked.Operator("")); !slices.Equal(got, []string{job.MessageID}) {
		t.Fatalf("parked after the discard: %v", got)
	}
	audit, err := e.store.ParkedDiscardList(e.ctx, store.ParkedDiscardListParams{MessageID: "garbage-1"})
	if err != nil || len(audit) != 1 || audit[0].Tenant != "" || audit[0].Actor != "cli:ops" || audit[0].ParkedReason != rabbitmq.ReasonMalformed {
		t.Fatalf("audit rows %+v (%v)", audit, err)
	}
	if _, err := e.store.DeliveryGet(e.ctx, "garbage-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a delivery row for a message with no notification: %v", err)
	}
}
