package rabbitmq_test

import (
	"net/url"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/metrics"
)

// statusOf is what readiness reads from a component.
type statusOf interface{ Status() rabbitmq.Status }

// awaitStatus waits until every component's status satisfies cond.
func (e *env) awaitStatus(t *testing.T, what string, cond func(rabbitmq.Status) bool, comps ...statusOf) {
	t.Helper()
	e.waitFor(t, what, func() bool {
		for _, c := range comps {
			if !cond(c.Status()) {
				return false
			}
		}
		return true
	})
}

func connected(s rabbitmq.Status) bool { return s.Connected }

// TestStatusFollowsTheConnection: a publisher's and a consumer's Status is
// connected only while their connection is up and working, says why when
// it is not, and is not connected once Run has returned.
func TestStatusFollowsTheConnection(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	cons := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{
		URL: e.url, Name: "status-consumer", Lane: lane, Topology: e.topo, Sender: e.sender(t), Logger: quiet,
	})
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: e.url, Name: "status-relay", Topology: e.topo, Logger: quiet})
	for _, c := range []statusOf{cons, pub} {
		if s := c.Status(); s.Connected || s.Err != nil {
			t.Fatalf("status before Run: %+v, want not connected and no error yet", s)
		}
	}
	stopCons, stopPub := testenv.Start(t, cons.Run), testenv.Start(t, pub.Run)
	e.awaitStatus(t, "both connected", connected, cons, pub)

	// The broker closes every connection and refuses new ones: not
	// connected, with the broker's reason, until it lets them back.
	vhost, user := testmq.VHostOf(e.url), "guest"
	if u, err := url.Parse(e.url); err == nil && u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	testmq.Ctl(t, "clear_permissions", "-p", vhost, user)
	testmq.CloseConnections(t, e.url)
	e.awaitStatus(t, "both down with a reason", func(s rabbitmq.Status) bool { return !s.Connected && s.Err != nil }, cons, pub)
	testmq.Ctl(t, "set_permissions", "-p", vhost, user, ".*", ".*", ".*")
	e.awaitStatus(t, "both connected again", connected, cons, pub)

	stopCons()
	stopPub()
	for _, c := range []statusOf{cons, pub} {
		if s := c.Status(); s.Connected || s.Err == nil {
			t.Errorf("status after Run returned: %+v, want not connected, stopped", s)
		}
	}
}

// TestStatusOfAnUnreachableBrokerSaysWhyWithoutThePassword needs no broker.
func TestStatusOfAnUnreachableBrokerSaysWhyWithoutThePassword(t *testing.T) {
	t.Parallel()
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: "amqp://guest:s3cr3t@127.0.0.1:1/", Logger: quiet})
	testenv.Start(t, pub.Run)
	testenv.WaitFor(t, "the publisher's connect error", testenv.Patience, func() bool { return pub.Status().Err != nil })
	s := pub.Status()
	if s.Connected || !strings.Contains(s.Err.Error(), "127.0.0.1:1") || strings.Contains(s.Err.Error(), "s3cr3t") {
		t.Fatalf("status %+v (%v), want not connected, naming the broker without its password", s, s.Err)
	}
}

// TestParkingRaisesAnAlert: a message parked on the rabbitmq transport
// raises a PARKED alert once, with its message id, tenant and reason:
// by the consumer for a body that is not a job (its tenant from the
// message's header), by the sender for a kind it does not know.
func TestParkingRaisesAnAlert(t *testing.T) {
	t.Parallel()
	e := setup(t, options{})
	rec := &alert.Recorder{}
	m := metrics.New(nil)
	snd := e.sender(t, "pay")
	snd.Alerts, snd.Metrics = rec, m
	e.consumer(t, rabbitmq.ConsumerConfig{Sender: snd, Alerts: rec, Metrics: m})
	e.startRelay(t, relayOpts{})

	if !e.publish(t, e.topo.Exchange(), string(lane), amqp.Publishing{
		MessageId: "garbage-1", DeliveryMode: amqp.Persistent, Body: []byte("not json"),
		Headers: amqp.Table{rabbitmq.HeaderTenant: "t1"},
	}) {
		t.Fatal("publish garbage-1: nacked")
	}
	unknown := e.notify(t, "gone")
	e.waitFor(t, "both parked", func() bool {
		return len(e.actions("garbage-1")) > 0 && len(e.actions(unknown)) > 0
	})
	if a, b := e.actions("garbage-1"), e.actions(unknown); a[0] != rabbitmq.ActionParked || b[0] != rabbitmq.ActionParked {
		t.Fatalf("actions %v, %v; want parked", a, b)
	}
	got := map[string]alert.Alert{}
	for _, a := range rec.Alerts() {
		got[a.MessageID] = a
	}
	want := map[string]alert.Alert{
		"garbage-1": {Kind: alert.Parked, MessageID: "garbage-1", Tenant: "t1", Reason: rabbitmq.ReasonMalformed},
		unknown:     {Kind: alert.Parked, MessageID: unknown, Tenant: "t1", Reason: heraldtype.ReasonUnknownKind},
	}
	if len(rec.Alerts()) != 2 || got["garbage-1"] != want["garbage-1"] || got[unknown] != want[unknown] {
		t.Fatalf("alerts %+v, want %+v", rec.Alerts(), want)
	}
	if v := alertCount(t, m, alert.Parked); v != 2 {
		t.Errorf("herald_alerts_total{kind=PARKED} = %v, want 2", v)
	}
}

func alertCount(t *testing.T, m *metrics.Metrics, kind string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "herald_alerts_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "kind" && lp.GetValue() == kind {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

var (
	_ statusOf = (*rabbitmq.Publisher)(nil)
	_ statusOf = (*rabbitmq.Consumer)(nil)
)
