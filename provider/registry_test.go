package provider_test

import (
	"context"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
)

type named string

func (named) Send(context.Context, provider.Message) provider.Outcome { return provider.Outcome{} }

// A push device's platform may have a provider of its own; the channel's
// whole-channel provider, registered in any order, serves the others, and
// with none the first platform's stands for the channel.
func TestRegistryServesAPlatformByItsOwnProvider(t *testing.T) {
	t.Parallel()
	push := heraldtype.ChannelPush
	want := func(r *provider.Registry, platform, name string) {
		t.Helper()
		got, ok := r.ForPlatform(push, platform)
		if !ok || got.Name != name {
			t.Errorf("ForPlatform(push, %q) = %q, %v; want %q", platform, got.Name, ok, name)
		}
	}
	r := provider.NewRegistry()
	r.RegisterPlatform(push, "fcm", "fcm-1", named("fcm"))
	r.RegisterPlatform(push, "apns", "apns-1", named("apns"))
	want(r, "fcm", "fcm-1")
	want(r, "apns", "apns-1")
	want(r, "web", "fcm-1") // no whole-channel provider: the first platform's
	if n, ok := r.For(push); !ok || n.Name != "fcm-1" {
		t.Errorf("For(push) = %q, %v; want fcm-1", n.Name, ok)
	}
	r.Register(push, "sim", named("sim")) // after the platforms' still serves the channel
	want(r, "web", "sim")
	want(r, "apns", "apns-1")
	if n, ok := r.For(push); !ok || n.Name != "sim" {
		t.Errorf("For(push) = %q, %v; want sim", n.Name, ok)
	}
	if _, ok := r.ForPlatform(heraldtype.ChannelSMS, "fcm"); ok {
		t.Error("a channel with no provider has one")
	}
}
