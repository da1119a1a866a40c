package sender_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// lostDeactivation is a store whose device deactivations fail, as if the
// process died between the result write and the deactivation.
type lostDeactivation struct {
	*sqlite.Store
	tries int
}

func (l *lostDeactivation) DeviceDeactivate(context.Context, store.DeviceDeactivateParams) (bool, error) {
	l.tries++
	return false, store.ErrClosed
}

// A push to one device that the provider calls dead ends PERMANENT_FAILURE
// and deactivates that device. If the deactivation is lost, the device
// stays active and the next push to it, getting the same answer,
// deactivates it: nothing is lost but one more dead answer. A dead answer
// to a push addressed from the profile deactivates nothing; a push to a
// device inactive by send time is not sent.
func TestDeadDevice(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	const token = "tok-dead"
	dev := store.DeviceID("t1", "r1", token)
	if _, _, err := b.store.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: "r1", DeviceID: dev, Token: token, Platform: store.PlatformFCM}); err != nil {
		t.Fatal(err)
	}
	putProfile(t, b, store.Profile{Tenant: "t1", Recipient: "r1", Addresses: map[heraldtype.Channel]string{heraldtype.ChannelPush: token}})
	b.sims[heraldtype.ChannelPush].OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
		if m.Address == token {
			return provider.DeadDestinationOutcome(heraldtype.ReasonUnregistered)
		}
		return provider.Outcome{}
	})
	deviceJob := func(id string) heraldtype.Job {
		j := job(id, heraldtype.DeviceSend(heraldtype.ChannelPush, dev))
		if j.MessageID != store.MessageID(id, heraldtype.DeviceSend(heraldtype.ChannelPush, dev)) {
			t.Fatalf("job message id %s", j.MessageID)
		}
		return j
	}
	active := func() bool {
		t.Helper()
		d, err := b.store.DeviceGet(b.ctx, "t1", "r1", dev)
		if err != nil {
			t.Fatal(err)
		}
		return d.Active
	}

	// The profile's push address is dead too: a permanent failure, and no
	// device is deactivated for it.
	if res := snd.Send(b.ctx, job("ntf_profile", heraldtype.ChannelPush)); res.State != heraldtype.DeliveryPermanentFailure || !active() {
		t.Fatalf("profile-addressed push: %+v, device active %v; want PERMANENT_FAILURE and the device left alone", res, active())
	}

	// The deactivation after the result is lost.
	lost := &lostDeactivation{Store: b.store}
	snd.Store = lost
	res := snd.Send(b.ctx, deviceJob("ntf_1"))
	if res.State != heraldtype.DeliveryPermanentFailure || res.Reason != heraldtype.ReasonUnregistered || lost.tries == 0 {
		t.Fatalf("first push: %+v after %d deactivation tries, want PERMANENT_FAILURE(UNREGISTERED) and a try", res, lost.tries)
	}
	if d := delivery(t, b, "ntf_1.push."+dev); d.State != heraldtype.DeliveryPermanentFailure || !active() {
		t.Fatalf("after a lost deactivation: delivery %+v, device active %v; want the result written and the device active", d, active())
	}

	// The next push to the device gets the same answer and deactivates it.
	snd.Store = b.store
	if res := snd.Send(b.ctx, deviceJob("ntf_2")); res.State != heraldtype.DeliveryPermanentFailure || active() {
		t.Fatalf("second push: %+v, device active %v; want PERMANENT_FAILURE and the device inactive", res, active())
	}
	if d, _ := b.store.DeviceGet(b.ctx, "t1", "r1", dev); d.DeactivatedReason != heraldtype.ReasonUnregistered {
		t.Fatalf("device %+v, want reason UNREGISTERED", d)
	}

	// A push planned before the deactivation finds the device inactive at
	// send time and is not sent.
	calls := b.sims[heraldtype.ChannelPush].Total()
	res = snd.Send(b.ctx, deviceJob("ntf_3"))
	if res.State != heraldtype.DeliverySuppressed || res.Reason != heraldtype.ReasonDestinationUnavailable || b.sims[heraldtype.ChannelPush].Total() != calls {
		t.Fatalf("push to an inactive device: %+v, %d calls more; want SUPPRESSED(DESTINATION_UNAVAILABLE) and no call", res, b.sims[heraldtype.ChannelPush].Total()-calls)
	}
}

// A dead answer about a token that the app registered again while the
// call was in flight leaves the device active: the answer is about the
// token as the send read it, and the registration is newer (APNs: stop
// pushing until the device registers a token with a later timestamp).
// The push itself still ends PERMANENT_FAILURE.
func TestDeadAnswerSparesATokenRegisteredDuringTheCall(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	const token = "tok-reinstalled"
	dev := store.DeviceID("t1", "r1", token)
	put := func() {
		t.Helper()
		if _, _, err := b.store.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: "r1", DeviceID: dev, Token: token, Platform: store.PlatformFCM}); err != nil {
			t.Fatal(err)
		}
	}
	put()
	b.sims[heraldtype.ChannelPush].OnCall(func(_ context.Context, m provider.Message) provider.Outcome {
		put() // the app registers the token again, during the call
		return provider.DeadDestinationOutcome(heraldtype.ReasonUnregistered)
	})
	res := snd.Send(b.ctx, job("ntf_1", heraldtype.DeviceSend(heraldtype.ChannelPush, dev)))
	if res.State != heraldtype.DeliveryPermanentFailure || res.Reason != heraldtype.ReasonUnregistered {
		t.Fatalf("push: %+v, want PERMANENT_FAILURE(UNREGISTERED)", res)
	}
	d, err := b.store.DeviceGet(b.ctx, "t1", "r1", dev)
	if err != nil || !d.Active {
		t.Fatalf("device %+v, %v; want it active: it was registered after the call went out", d, err)
	}
}

// A push to one device goes through its platform's provider: an APNs
// token to APNs, an FCM one to FCM (both serving push), and a web one,
// whose platform has none of its own, to the channel's.
func TestAPushGoesThroughItsDevicesPlatformsProvider(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	apns, fcm := sim.New(sim.Config{}), sim.New(sim.Config{})
	snd.Providers.RegisterPlatform(heraldtype.ChannelPush, "apns", "apns", apns)
	snd.Providers.RegisterPlatform(heraldtype.ChannelPush, "fcm", "fcm", fcm)
	for i, p := range []store.Platform{store.PlatformAPNs, store.PlatformFCM, store.PlatformWeb} {
		token := "tok-" + string(p)
		dev := store.DeviceID("t1", "r1", token)
		if _, _, err := b.store.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: "r1", DeviceID: dev, Token: token, Platform: p}); err != nil {
			t.Fatal(err)
		}
		if res := snd.Send(b.ctx, job(fmt.Sprint("ntf_", i), heraldtype.DeviceSend(heraldtype.ChannelPush, dev))); res.State != heraldtype.DeliveryProviderAccepted {
			t.Fatalf("%s push: %+v", p, res)
		}
	}
	if a, f, whole := apns.Total(), fcm.Total(), b.sims[heraldtype.ChannelPush].Total(); a != 1 || f != 1 || whole != 1 {
		t.Fatalf("calls: apns %d, fcm %d, the channel's %d; want one each", a, f, whole)
	}
}
