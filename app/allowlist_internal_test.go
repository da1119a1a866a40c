package app

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// destinations is a store.Store that knows a few profiles and devices, or
// fails every read.
type destinations struct {
	store.Store
	profiles map[string]store.Profile
	devices  map[string]store.Device
	fail     bool
}

var errDown = errors.New("store down")

func (s *destinations) ProfileGet(_ context.Context, _, recipient string) (store.Profile, error) {
	return read(s, s.profiles, recipient)
}

func (s *destinations) DeviceGet(_ context.Context, _, _, id string) (store.Device, error) {
	return read(s, s.devices, id)
}

// read is m[key], ErrNotFound, or errDown when s fails.
func read[V any](s *destinations, m map[string]V, key string) (V, error) {
	v, ok := m[key]
	switch {
	case s.fail:
		return v, errDown
	case !ok:
		return v, store.ErrNotFound
	}
	return v, nil
}

type acceptAll struct{}

func (acceptAll) Send(context.Context, provider.Message) provider.Outcome {
	return provider.AcceptedOutcome("")
}

// guardApp is an App with just what the guard's layers read.
func guardApp(t *testing.T, env string, st store.Store) *App {
	t.Helper()
	cfg := config.Dev()
	cfg.Environment = env
	cfg.Providers = []config.Provider{
		{Name: "sms-hook", Type: "webhook", Channel: "sms", URL: "https://sms.example.com"},
		{Name: "push-hook", Type: "webhook", Channel: "push", URL: "https://push.example.com"},
		{Name: "mail-sim", Type: "sim", Channel: "email"},
		{Name: "hooks", Type: "webhook", Channel: "webhook", URL: "https://hooks.example.com"},
	}
	cfg.AllowList = config.AllowList{Phones: []string{"010-1234-5678"}, DeviceTokens: []string{"tok-qa"}}
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a := &App{cfg: cfg, logger: slog.New(slog.DiscardHandler), store: st, registry: provider.NewRegistry()}
	for _, p := range cfg.Providers {
		a.registry.Register(heraldtype.Channel(p.Channel), p.Name, a.guardProvider(p, acceptAll{}))
	}
	return a
}

// In production the guard costs nothing: no check, no gate, the adapters
// as they are.
func TestProductionBuildsNoGuard(t *testing.T) {
	t.Parallel()
	a := guardApp(t, config.EnvProduction, &destinations{fail: true})
	if c, g := a.allowListChecks(), a.allowListGates(); c != nil || g != nil {
		t.Fatalf("production has %d checks and %d gates", len(c), len(g))
	}
	for _, ch := range []heraldtype.Channel{heraldtype.ChannelSMS, heraldtype.ChannelPush} {
		if n, _ := a.registry.For(ch); n.Provider != (acceptAll{}) {
			t.Fatalf("production wraps the %s adapter: %T", ch, n.Provider)
		}
	}
}

// Outside production the simulator and the webhook channel are left
// alone; the other adapters are wrapped.
func TestStagingWrapsTheAdaptersThatReachPeople(t *testing.T) {
	t.Parallel()
	a := guardApp(t, config.EnvStaging, &destinations{})
	for ch, wrapped := range map[heraldtype.Channel]bool{
		heraldtype.ChannelSMS: true, heraldtype.ChannelPush: true, heraldtype.ChannelEmail: false,
	} {
		n, _ := a.registry.For(ch)
		if got := n.Provider != (acceptAll{}); got != wrapped {
			t.Errorf("%s adapter wrapped = %v, want %v", ch, got, wrapped)
		}
	}
	if n, _ := a.registry.For(heraldtype.ChannelWebhook); n.Send(context.Background(), provider.Message{Channel: heraldtype.ChannelWebhook}).Suppressed {
		t.Error("the webhook channel, which carries no recipient address, was refused")
	}
}

// The dispatcher's layer finds the destination itself: the profile the
// claim read (Job.Known), else the stored one, or the device's token; no
// address goes on (the sender ends it DESTINATION_UNAVAILABLE), and a
// store that cannot be read puts the job off rather than letting it by.
func TestTheDispatchersLayerFindsTheDestination(t *testing.T) {
	t.Parallel()
	st := &destinations{
		profiles: map[string]store.Profile{
			"qa":   {Addresses: map[heraldtype.Channel]string{"sms": "+821012345678"}},
			"real": {Addresses: map[heraldtype.Channel]string{"sms": "+821099990000"}},
		},
		devices: map[string]store.Device{
			"d-qa": {Token: "tok-qa", Active: true}, "d-real": {Token: "tok-real", Active: true}, "d-off": {Token: "tok-real"},
		},
	}
	a := guardApp(t, config.EnvDevelopment, st)
	gates := a.allowListGates()
	if len(gates) != 1 {
		t.Fatalf("%d gates, want 1", len(gates))
	}
	gate := gates[0]
	push := func(dev string) heraldtype.Channel { return heraldtype.DeviceSend(heraldtype.ChannelPush, dev) }
	known := func(doc string) *heraldtype.Known {
		k := &heraldtype.Known{ProfileRead: true}
		if doc != "" {
			k.Profile = []byte(doc)
		}
		return k
	}
	blocked := sender.Suppress(heraldtype.ReasonNotAllowlisted)
	for _, tc := range []struct {
		name string
		job  heraldtype.Job
		want sender.Ruling
	}{
		{"StoredProfileAllowed", heraldtype.Job{Recipient: "qa", Channel: heraldtype.ChannelSMS}, sender.Ruling{}},
		{"StoredProfileNotAllowed", heraldtype.Job{Recipient: "real", Channel: heraldtype.ChannelSMS}, blocked},
		{"ClaimsProfileWins", heraldtype.Job{Recipient: "qa", Channel: heraldtype.ChannelSMS, Known: known(`{"addresses":{"sms":"010-5555-0000"}}`)}, blocked},
		{"ClaimsProfileAllowed", heraldtype.Job{Recipient: "real", Channel: heraldtype.ChannelSMS, Known: known(`{"addresses":{"sms":"010-1234-5678"}}`)}, sender.Ruling{}},
		{"ClaimFoundNoProfile", heraldtype.Job{Recipient: "real", Channel: heraldtype.ChannelSMS, Known: known("")}, sender.Ruling{}},
		{"NoProfile", heraldtype.Job{Recipient: "nobody", Channel: heraldtype.ChannelSMS}, sender.Ruling{}},
		{"DeviceAllowed", heraldtype.Job{Recipient: "real", Channel: push("d-qa")}, sender.Ruling{}},
		{"DeviceNotAllowed", heraldtype.Job{Recipient: "qa", Channel: push("d-real")}, blocked},
		{"DeviceInactive", heraldtype.Job{Recipient: "qa", Channel: push("d-off")}, sender.Ruling{}},
		{"DeviceGone", heraldtype.Job{Recipient: "qa", Channel: push("d-gone")}, sender.Ruling{}},
		{"Simulator", heraldtype.Job{Recipient: "real", Channel: heraldtype.ChannelEmail}, sender.Ruling{}},
		{"Webhook", heraldtype.Job{Recipient: "real", Channel: heraldtype.ChannelWebhook}, sender.Ruling{}},
		{"NoProvider", heraldtype.Job{Recipient: "real", Channel: heraldtype.ChannelAlimTalk}, sender.Ruling{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := gate(context.Background(), tc.job); got != tc.want {
				t.Fatalf("gate = %+v, want %+v", got, tc.want)
			}
		})
	}
	st2 := &destinations{fail: true}
	down := guardApp(t, config.EnvDevelopment, st2).allowListGates()[0]
	for _, ch := range []heraldtype.Channel{heraldtype.ChannelSMS, push("d-qa")} {
		got := down(context.Background(), heraldtype.Job{Recipient: "qa", Channel: ch})
		if got.Go() || got.State != "" || got.Reason != heraldtype.ReasonStoreUnavailable || got.Defer != allowGateRetry {
			t.Fatalf("%s with the store down: gate = %+v, want a deferral", ch, got)
		}
	}
}

// A simulator serving the push channel does not exempt a device whose
// platform a real provider serves: the gate judges a push by the provider
// the sender will call for that device.
func TestTheDispatchersLayerJudgesAPushByItsPlatformsProvider(t *testing.T) {
	t.Parallel()
	st := &destinations{devices: map[string]store.Device{
		"ios-real":     {Token: "tok-real", Platform: store.PlatformAPNs, Active: true},
		"ios-qa":       {Token: "tok-qa", Platform: store.PlatformAPNs, Active: true},
		"android-real": {Token: "tok-real", Platform: store.PlatformFCM, Active: true},
	}}
	a := guardApp(t, config.EnvStaging, st)
	a.cfg.Providers = []config.Provider{
		{Name: "push-sim", Type: "sim", Channel: "push"},
		{Name: "apns", Type: "apns", Channel: "push"},
	}
	a.registry = provider.NewRegistry()
	a.registry.Register(heraldtype.ChannelPush, "push-sim", acceptAll{})
	a.registry.RegisterPlatform(heraldtype.ChannelPush, "apns", "apns", acceptAll{})
	gate := a.allowListGates()[0]
	blocked := sender.Suppress(heraldtype.ReasonNotAllowlisted)
	for dev, want := range map[string]sender.Ruling{
		"ios-real":     blocked,         // APNs reaches a person: checked
		"ios-qa":       sender.Ruling{}, // on the list
		"android-real": sender.Ruling{}, // the simulator's
	} {
		job := heraldtype.Job{Recipient: "r", Channel: heraldtype.DeviceSend(heraldtype.ChannelPush, dev)}
		if got := gate(context.Background(), job); got != want {
			t.Errorf("%s: gate = %+v, want %+v", dev, got, want)
		}
	}
}
