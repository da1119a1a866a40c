package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/app"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devices"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/internal/testpg"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/lookup"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/storetest"
)

// deadToken is the token the simulated push provider answers as dead.
const deadToken = "tok-dead-000000000000"

// devicesHerald runs the development herald on driver with the push
// simulator answering deadToken as dead, and hooks before each send's
// pre-checks (a push held there reads its device only when released).
type devicesHerald struct {
	base  string
	sim   *sim.Sim
	store store.Store

	mu   sync.Mutex
	hold map[string]chan struct{} // message id suffix → closed to release its sends
	held chan string              // message ids that reached their hold
}

// holdSends holds every send whose message id ends with suffix before its
// pre-checks, until release is called.
func (h *devicesHerald) holdSends(suffix string) (release func()) {
	c := make(chan struct{})
	h.mu.Lock()
	h.hold[suffix] = c
	h.mu.Unlock()
	return func() { close(c) }
}

func startDevicesHerald(t *testing.T, driver string) *devicesHerald {
	t.Helper()
	database, mq := "sqlite:"+testsqlite.Path(t), ""
	switch driver {
	case "postgres":
		database = testpg.Schema(t)
	case "postgres+rabbitmq":
		// Each job crosses the broker as JSON, its device in its channel.
		database, mq = testpg.Schema(t), testmq.VHost(t)
	}
	cfg := testConfig(t, database, func(c *config.Config) {
		if mq != "" {
			c.Transport, c.RabbitMQURL = "rabbitmq", mq
		}
		for i := range c.Providers {
			if c.Providers[i].Channel == string(heraldtype.ChannelPush) {
				c.Providers[i].Faults.DeadAddresses = []string{deadToken}
			}
		}
		// Tokens are stored sealed: the sender opens them for the
		// provider, the list for its hint, and the dead-device answer
		// still finds its device.
		c.PersonalData.Keys = []config.RecipientKey{{ID: "dev1", Secret: "devices-test-personal-data-key-0123456789"}}
	})
	h := &devicesHerald{hold: map[string]chan struct{}{}, held: make(chan string, 16)}
	a, base := newHerald(t, cfg, app.Options{Hooks: sender.Hooks{AfterPeek: func(ctx context.Context, job heraldtype.Job) {
		h.mu.Lock()
		var release chan struct{}
		for suffix, c := range h.hold {
			if strings.HasSuffix(job.MessageID, suffix) {
				release = c
			}
		}
		h.mu.Unlock()
		if release != nil {
			h.held <- job.MessageID
			<-release
		}
	}}})
	h.base, h.sim, h.store = base, a.Sim("sim-push"), a.Store()
	runHerald(t, a)
	return h
}

// call makes a request with the development API key (and, for a
// POST, an idempotency key of its body) and returns the status and body.
func (h *devicesHerald) call(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	return call(t, h.base, method, path, config.DevAPIKey, body)
}

func (h *devicesHerald) register(t *testing.T, recipient, token string, want int) string {
	t.Helper()
	code, body := h.call(t, http.MethodPut, "/v1/recipients/"+recipient+"/devices/"+url.PathEscape(token), `{"platform":"fcm"}`)
	if code != want {
		t.Fatalf("register %s: %d %s, want %d", token, code, body, want)
	}
	id := store.DeviceID(config.DevTenant, recipient, token)
	if d, err := h.store.DeviceGet(context.Background(), config.DevTenant, recipient, id); err != nil || !strings.HasPrefix(d.Token, "hs1:dev1:") {
		t.Fatalf("the stored token of %s is %q (%v), want it sealed with dev1", id, d.Token, err)
	}
	return id
}

// notify accepts a payment.approved (webhook and push) for recipient.
func (h *devicesHerald) notify(t *testing.T, recipient, event string) string {
	t.Helper()
	code, body := h.call(t, http.MethodPost, "/v1/notifications",
		`{"recipient":"`+recipient+`","event_id":"`+event+`","kind":"payment.approved","params":{"amount":"1000","merchant":"m"}}`)
	var accepted struct{ ID string }
	if err := json.Unmarshal(body, &accepted); code != http.StatusAccepted || err != nil {
		t.Fatalf("notify: %d %s", code, body)
	}
	return accepted.ID
}

// pushes returns the notification's push entries, by message id, once
// every entry of it has ended.
func (h *devicesHerald) pushes(t *testing.T, id string) []lookup.Delivery {
	t.Helper()
	n := h.await(t, id, "every entry ended", func(n lookup.Notification) bool {
		for _, d := range n.Deliveries {
			if !heraldtype.DeliveryState(d.State).Terminal() {
				return false
			}
		}
		return true
	})
	var push []lookup.Delivery
	for _, d := range n.Deliveries {
		if d.Channel == string(heraldtype.ChannelPush) {
			push = append(push, d)
		}
	}
	slices.SortFunc(push, func(a, b lookup.Delivery) int { return strings.Compare(a.MessageID, b.MessageID) })
	return push
}

// await reads the notification until done holds (30 s at most) and
// returns it.
func (h *devicesHerald) await(t *testing.T, id, what string, done func(lookup.Notification) bool) lookup.Notification {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := h.call(t, http.MethodGet, "/v1/notifications/"+id, "")
		var n lookup.Notification
		if err := json.Unmarshal(body, &n); code != http.StatusOK || err != nil {
			t.Fatalf("lookup %s: %d %s", id, code, body)
		}
		if done(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("notification %s: not %s in 30s: %s", id, what, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listed returns the recipient's devices as GET …/devices shows them, by
// device id.
func (h *devicesHerald) listed(t *testing.T, recipient string) map[string]devices.Device {
	t.Helper()
	code, body := h.call(t, http.MethodGet, "/v1/recipients/"+recipient+"/devices", "")
	var out struct {
		Devices []devices.Device `json:"devices"`
	}
	if err := json.Unmarshal(body, &out); code != http.StatusOK || err != nil {
		t.Fatalf("list devices: %d %s", code, body)
	}
	m := map[string]devices.Device{}
	for _, d := range out.Devices {
		m[d.DeviceID] = d
	}
	return m
}

// waitInactive waits until the recipient's device is listed inactive: the
// sender deactivates a dead device right after it wrote the push's result,
// so the result can be read a moment before the deactivation.
func (h *devicesHerald) waitInactive(t *testing.T, recipient, device string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for h.listed(t, recipient)[device].Active {
		if time.Now().After(deadline) {
			t.Fatalf("device %s still active after 30s", device)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sent returns the push simulator's calls for notification id: message id
// → the tokens it was sent to.
func (h *devicesHerald) sent(id string) map[string][]string {
	out := map[string][]string{}
	for _, c := range h.sim.Calls() {
		if strings.HasPrefix(c.Message.MessageID, id+".") {
			out[c.Message.MessageID] = append(out[c.Message.MessageID], c.Message.Address)
		}
	}
	return out
}

var deviceMessageID = regexp.MustCompile(`^ntf_[0-9A-Z]{26}\.push\.d[0-9a-f]{16}$`)

// A push goes to each active device of the recipient with its own message
// id; a device the provider calls dead is deactivated, alone, and gets no
// later push until it is registered again; a device deleted between intake
// and send is not sent to. Through HTTP, on both stores, and with the
// rabbitmq transport.
func TestPushFansOutToDevices(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres", "postgres+rabbitmq"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			h := startDevicesHerald(t, driver)
			devA := h.register(t, "alice", "tok-a-111111111111", http.StatusCreated)
			devB := h.register(t, "alice", "tok-b-222222222222", http.StatusCreated)

			// Two devices: two push deliveries, each to its own token once.
			id := h.notify(t, "alice", "e1")
			push := h.pushes(t, id)
			wantIDs := []string{id + ".push." + devA, id + ".push." + devB}
			slices.Sort(wantIDs)
			if len(push) != 2 || push[0].MessageID != wantIDs[0] || push[1].MessageID != wantIDs[1] {
				t.Fatalf("push entries %+v, want message ids %v", push, wantIDs)
			}
			for _, d := range push {
				if d.State != string(heraldtype.DeliveryProviderAccepted) || len(d.MessageID) > heraldtype.MaxMessageIDLen ||
					!deviceMessageID.MatchString(d.MessageID) {
					t.Errorf("push entry %+v, want PROVIDER_ACCEPTED with a derived id of at most 100 characters", d)
				}
			}
			want := map[string][]string{id + ".push." + devA: {"tok-a-111111111111"}, id + ".push." + devB: {"tok-b-222222222222"}}
			if got := h.sent(id); !mapsEqual(got, want) {
				t.Fatalf("provider calls %v, want %v", got, want)
			}
			// The list shows the same entries as the notification's own view.
			code, body := h.call(t, http.MethodGet, "/v1/notifications?recipient=alice", "")
			var list struct{ Notifications []lookup.Notification }
			if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || len(list.Notifications) != 1 ||
				len(list.Notifications[0].Deliveries) != 3 {
				t.Fatalf("list: %d %s, want one notification with three entries", code, body)
			}
			for _, d := range list.Notifications[0].Deliveries {
				if d.Channel == string(heraldtype.ChannelPush) && !slices.Contains(wantIDs, d.MessageID) {
					t.Errorf("listed push entry %+v, want one of %v", d, wantIDs)
				}
			}

			// One device answers dead: that one only is deactivated, and the
			// next notification goes to the other only.
			devDead := h.register(t, "alice", deadToken, http.StatusCreated)
			id = h.notify(t, "alice", "e2")
			push = h.pushes(t, id)
			for _, d := range push {
				dead := d.MessageID == id+".push."+devDead
				if dead != (d.State == string(heraldtype.DeliveryPermanentFailure) && d.Reason == heraldtype.ReasonUnregistered) {
					t.Errorf("push entry %+v: the dead device's alone should be PERMANENT_FAILURE(UNREGISTERED)", d)
				}
			}
			if len(push) != 3 {
				t.Fatalf("push entries %+v, want three", push)
			}
			h.waitInactive(t, "alice", devDead)
			devs := h.listed(t, "alice")
			if devs[devDead].Active || devs[devDead].DeactivatedReason != heraldtype.ReasonUnregistered || !devs[devA].Active || !devs[devB].Active {
				t.Fatalf("devices %+v, want only %s inactive (UNREGISTERED)", devs, devDead)
			}
			id = h.notify(t, "alice", "e3")
			if push = h.pushes(t, id); len(push) != 2 || slices.ContainsFunc(push, func(d lookup.Delivery) bool { return strings.HasSuffix(d.MessageID, devDead) }) {
				t.Fatalf("after the deactivation: push entries %+v, want the two live devices only", push)
			}
			if n := len(h.sent(id)); n != 2 {
				t.Fatalf("after the deactivation: %d push calls, want 2", n)
			}

			// Registering the dead token again makes it active again: the
			// next notification plans a push to it.
			h.register(t, "alice", deadToken, http.StatusOK)
			if devs := h.listed(t, "alice"); !devs[devDead].Active || devs[devDead].DeactivatedReason != "" {
				t.Fatalf("re-registered device %+v, want active", devs[devDead])
			}
			id = h.notify(t, "alice", "e4")
			if push = h.pushes(t, id); len(push) != 3 {
				t.Fatalf("after re-registering: push entries %+v, want three", push)
			}
			h.waitInactive(t, "alice", devDead) // by this push's dead answer, again

			// A device deleted between intake and send: its push is
			// SUPPRESSED(DESTINATION_UNAVAILABLE), the others go out.
			release := h.holdSends(".push." + devB)
			id = h.notify(t, "alice", "e5")
			if held := storetest.Receive(t, h.held, "the push to device B held before its pre-checks"); held != id+".push."+devB {
				t.Fatalf("held %s, want %s", held, id+".push."+devB)
			}
			if code, body := h.call(t, http.MethodDelete, "/v1/recipients/alice/devices/tok-b-222222222222", ""); code != http.StatusNoContent {
				t.Fatalf("delete device B: %d %s", code, body)
			}
			release()
			push = h.pushes(t, id)
			for _, d := range push {
				deleted := d.MessageID == id+".push."+devB
				if deleted != (d.State == string(heraldtype.DeliverySuppressed) && d.Reason == heraldtype.ReasonDestinationUnavailable) {
					t.Errorf("push entry %+v: the deleted device's alone should be SUPPRESSED(DESTINATION_UNAVAILABLE)", d)
				}
			}
			// Each deactivation is counted: e2's and e4's.
			if _, metrics := h.call(t, http.MethodGet, "/metrics", ""); !strings.Contains(string(metrics), `herald_devices_deactivated_total{reason="UNREGISTERED"} 2`) {
				t.Errorf("/metrics lacks herald_devices_deactivated_total{reason=\"UNREGISTERED\"} 2")
			}
			// (The dead token's push of e4 deactivated it again: two devices.)
			if got := h.sent(id)[id+".push."+devB]; len(push) != 2 || len(got) != 0 {
				t.Fatalf("push entries %+v, calls to the deleted device %v; want two entries and no call", push, got)
			}
		})
	}
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestSealedTokenWithoutItsKeyParks: a device token sealed with a key this
// herald no longer holds parks that push PERSONAL_DATA_UNREADABLE before
// any provider call; the notification's other send, whose address opens,
// goes out.
func TestSealedTokenWithoutItsKeyParks(t *testing.T) {
	t.Parallel()
	h := startDevicesHerald(t, "sqlite")
	gone, err := seal.New([]seal.Key{{ID: "gone", Secret: []byte("a-key-this-herald-was-never-given-0123456789")}})
	if err != nil {
		t.Fatal(err)
	}
	const token = "tok-c-333333333333"
	dev := store.DeviceID(config.DevTenant, "carol", token)
	if _, _, err := h.store.DevicePut(context.Background(), store.Device{Tenant: config.DevTenant, Recipient: "carol", DeviceID: dev,
		Token: gone.Seal(seal.Device, config.DevTenant, token), Platform: store.PlatformFCM}); err != nil {
		t.Fatal(err)
	}
	id := h.notify(t, "carol", "e1")
	h.await(t, id, "push PARKED/PERSONAL_DATA_UNREADABLE and webhook PROVIDER_ACCEPTED", func(n lookup.Notification) bool {
		states := map[string]string{}
		for _, d := range n.Deliveries {
			states[d.Channel] = d.State + "/" + d.Reason
		}
		return states["push"] == "PARKED/PERSONAL_DATA_UNREADABLE" && strings.HasPrefix(states["webhook"], "PROVIDER_ACCEPTED")
	})
	if got := h.sent(id); len(got) != 0 {
		t.Fatalf("push provider calls %v for a token that does not open, want none", got)
	}
}
