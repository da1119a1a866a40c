package rabbitmq

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/parked"
	"github.com/heraldhq/herald/store"
)

// recordingDiscards is a store that keeps the discards' records (the
// only write a broker copy's discard makes).
type recordingDiscards struct {
	store.Parked
	records []store.ParkedDiscardEntry
}

func (r *recordingDiscards) ParkedDiscard(_ context.Context, p store.ParkedDiscardParams) (store.ParkedDiscarded, error) {
	r.records = append(r.records, store.ParkedDiscardEntry{MessageID: p.MessageID, Tenant: p.Tenant})
	return store.ParkedDiscarded{Tenant: p.Tenant}, nil // a body that is not a job has no delivery to end
}

func (r *recordingDiscards) ParkedDiscardList(_ context.Context, p store.ParkedDiscardListParams) ([]store.ParkedDiscardEntry, error) {
	var out []store.ParkedDiscardEntry
	for _, e := range r.records {
		if e.MessageID == p.MessageID {
			out = append(out, e)
		}
	}
	return out, nil
}

// A discard whose record committed but whose parked copy could not be
// removed (the ack lost) answers ErrCopyLeft with the discard done, so
// that its caller audits it; a second discard removes the copy, with no
// second record and nothing done to audit again.
func TestADiscardWhoseAckIsLostSaysItWasRecorded(t *testing.T) {
	t.Parallel()
	url, topo := parkOne(t, amqp.Publishing{MessageId: "garbage-1", Body: []byte("not json"),
		Headers: amqp.Table{HeaderFailureReason: ReasonMalformed}})

	st := &recordingDiscards{}
	p := &Parking{URL: url, Topology: topo, Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ackCopy: func(amqp.Delivery) error { return amqp.ErrClosed }}
	d := parked.Discard{MessageID: "garbage-1", Reason: "not ours", Actor: "cli:ops"}
	done, err := p.Discard(context.Background(), parked.Operator(""), d)
	if !errors.Is(err, parked.ErrCopyLeft) || done.Total() != 1 || done[""] != 1 || len(st.records) != 1 {
		t.Fatalf("a discard whose ack was lost: %v, %v (%d records); want ErrCopyLeft with the untenanted discard done", done, err, len(st.records))
	}
	p.ackCopy = nil
	if done, err := p.Discard(context.Background(), parked.Operator(""), d); err != nil || done.Total() != 0 || len(st.records) != 1 {
		t.Fatalf("the second discard: %v, %v (%d records); want the copy removed, nothing recorded or done again", done, err, len(st.records))
	}
	if _, err := p.Discard(context.Background(), parked.Operator(""), d); !errors.Is(err, parked.ErrNotFound) {
		t.Fatalf("a third discard: %v, want not found (the copy is gone)", err)
	}
}

// A requeue whose copy reached its lane but whose parked copy could not
// be removed (the ack lost) counts that message as requeued, with the
// error: its caller audits the move.
func TestARequeueWhoseAckIsLostCountsTheMove(t *testing.T) {
	t.Parallel()
	body, err := json.Marshal(heraldtype.Job{MessageID: "ntf_1.webhook", NotificationID: "ntf_1", Tenant: "t1",
		Lane: heraldtype.LaneTransactional, Channel: heraldtype.ChannelWebhook, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	url, topo := parkOne(t, amqp.Publishing{MessageId: "ntf_1.webhook", Body: body,
		Headers: amqp.Table{HeaderFailureReason: "UNKNOWN_KIND"}})
	p := &Parking{URL: url, Topology: topo, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ackCopy: func(amqp.Delivery) error { return amqp.ErrClosed }}
	done, err := p.Requeue(context.Background(), parked.Operator(""), "")
	if err == nil || done.Total() != 1 || done["t1"] != 1 {
		t.Fatalf("a requeue whose ack was lost: %v, %v; want the error with t1's message counted", done, err)
	}
}

// parkOne declares herald's topology on a fresh vhost and parks msg
// there, as a consumer parks a message; it returns the vhost's URL and
// the topology.
func parkOne(t *testing.T, msg amqp.Publishing) (string, Topology) {
	t.Helper()
	url := testmq.VHost(t)
	topo := Topology{Prefix: "herald"}.WithDefaults()
	ch := testmq.Channel(t, url)
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	msg.DeliveryMode = amqp.Persistent
	if err := ch.PublishWithContext(context.Background(), topo.ParkingExchange(), ParkedKey, true, false, msg); err != nil || !(<-confirms).Ack {
		t.Fatalf("park %s: %v", msg.MessageId, err)
	}
	return url, topo
}
