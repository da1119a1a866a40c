package rabbitmq

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
)

// recordingDiscards is a store whose discards are recorded (the only
// write a broker copy's discard makes), counted.
type recordingDiscards struct {
	store.Parked
	recorded int
}

func (r *recordingDiscards) ParkedDiscard(context.Context, store.ParkedDiscardParams) (bool, error) {
	r.recorded++
	return false, nil // a body that is not a job has no delivery to end
}

// A discard whose record committed but whose parked copy could not be
// removed (the ack lost) answers its error with the discard done, so that
// its caller audits it; a second discard removes the copy.
func TestADiscardWhoseAckIsLostSaysItWasRecorded(t *testing.T) {
	t.Parallel()
	url := testmq.VHost(t)
	topo := Topology{Prefix: "herald"}.WithDefaults()
	ch := testChannel(t, url, "discard-test")
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := ch.PublishWithContext(context.Background(), topo.ParkingExchange(), ParkedKey, true, false, amqp.Publishing{
		MessageId: "garbage-1", DeliveryMode: amqp.Persistent, Body: []byte("not json"),
		Headers: amqp.Table{HeaderFailureReason: ReasonMalformed},
	}); err != nil || !(<-confirms).Ack {
		t.Fatalf("park garbage-1: %v", err)
	}

	st := &recordingDiscards{}
	p := &Parking{URL: url, Topology: topo, Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ackCopy: func(amqp.Delivery) error { return amqp.ErrClosed }}
	d := parked.Discard{MessageID: "garbage-1", Reason: "not ours", Actor: "cli:ops"}
	done, err := p.Discard(context.Background(), parked.Operator(""), d)
	if err == nil || done.Total() != 1 || done[""] != 1 || st.recorded != 1 {
		t.Fatalf("a discard whose ack was lost: %v, %v (recorded %d); want the error with the untenanted discard done", done, err, st.recorded)
	}
	p.ackCopy = nil
	if done, err := p.Discard(context.Background(), parked.Operator(""), d); err != nil || done.Total() != 1 {
		t.Fatalf("the second discard: %v, %v; want it done", done, err)
	}
	if _, err := p.Discard(context.Background(), parked.Operator(""), d); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("a third discard: %v, want not found (the copy is gone)", err)
	}
}
