package quiethours_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/sim"
	"github.com/heraldhq/herald/quiethours"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// setup returns the seed's rule (Asia/Seoul by default; tenant "ny" in
// New York, tenant "always" without quiet hours) on a fake clock at the
// given Seoul wall time of 11 June 2026.
func setup(t *testing.T, h, m int) (*quiethours.Rule, *clock.Fake) {
	t.Helper()
	seoul, ny := zone(t, "Asia/Seoul"), zone(t, "America/New_York")
	def, nyw := seed000(seoul), seed000(ny)
	clk := clock.NewFake(time.Date(2026, 6, 11, h, m, 0, 0, seoul))
	r, err := quiethours.New(quiethours.Config{
		Window: &def, Tenants: map[string]*quiethours.Window{"ny": &nyw, "always": nil}, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, clk
}

// subject is a marketing SMS to r1 of tenant with profile time zone tz
// and SMS consent.
func subject(tenant, tz string, lane heraldtype.Lane) sender.Subject {
	return sender.Subject{
		Job:      heraldtype.Job{MessageID: "n1.sms", Tenant: tenant, Recipient: "r1", Lane: lane, Channel: heraldtype.ChannelSMS},
		Category: lane,
		Profile:  store.Profile{Tenant: tenant, Recipient: "r1", TimeZone: tz, Consent: map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}},
	}
}

// claimed is the job as the db transport's claim hands it over: with the
// profile it read.
func claimed(t *testing.T, s sender.Subject) heraldtype.Job {
	t.Helper()
	data, err := json.Marshal(s.Profile)
	if err != nil {
		t.Fatal(err)
	}
	j := s.Job
	j.Known = &heraldtype.Known{ProfileRead: true, Profile: data}
	return j
}

func wantRuling(t *testing.T, what string, got sender.Ruling, wait time.Duration) {
	t.Helper()
	want := sender.Ruling{}
	if wait > 0 {
		want = sender.DeferFor(wait, heraldtype.ReasonQuietHours)
	}
	if got != want {
		t.Errorf("%s: %+v, want %+v", what, got, want)
	}
}

// The sender's layer holds marketing from 20:50 to 08:00 in the
// recipient's zone (the profile's, else the tenant's, else the default);
// the dispatcher's stops releasing it ten minutes earlier. Nothing else
// is held.
func TestRulings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		h, m        int // Seoul wall time
		s           sender.Subject
		check, gate time.Duration // the deferral each layer rules; 0: go
	}{
		{"SeoulAfternoon", 15, 0, subject("shop", "", heraldtype.LaneMarketing), 0, 0},
		{"SeoulAt2039", 20, 39, subject("shop", "", heraldtype.LaneMarketing), 0, 0},
		{"SeoulAt2040", 20, 40, subject("shop", "", heraldtype.LaneMarketing), 0, 11*time.Hour + 20*time.Minute},
		{"SeoulAt2050", 20, 50, subject("shop", "", heraldtype.LaneMarketing), 11*time.Hour + 10*time.Minute, 11*time.Hour + 10*time.Minute},
		{"SeoulAfterMidnight", 0, 30, subject("shop", "", heraldtype.LaneMarketing), 7*time.Hour + 30*time.Minute, 7*time.Hour + 30*time.Minute},
		{"AlertsAtNight", 23, 0, subject("shop", "", heraldtype.LaneAlert), 0, 0},
		{"TransactionalAtNight", 23, 0, subject("shop", "", heraldtype.LaneTransactional), 0, 0},
		{"InternalAtNight", 23, 0, subject("shop", "", heraldtype.LaneInternal), 0, 0},
		// 23:00 in Seoul is 10:00 in New York: the profile's zone decides.
		{"ProfileZone", 23, 0, subject("shop", "America/New_York", heraldtype.LaneMarketing), 0, 0},
		// 15:00 in Seoul is 02:00 in New York: the tenant's zone decides, until 08:00 EDT.
		{"TenantZone", 15, 0, subject("ny", "", heraldtype.LaneMarketing), 6 * time.Hour, 6 * time.Hour},
		// The profile's zone goes before the tenant's.
		{"ProfileBeforeTenant", 15, 0, subject("ny", "Asia/Seoul", heraldtype.LaneMarketing), 0, 0},
		// A zone that cannot be loaded is the tenant's.
		{"UnreadableProfileZone", 15, 0, subject("ny", "Mars/Olympus", heraldtype.LaneMarketing), 6 * time.Hour, 6 * time.Hour},
		{"ServerZoneInAProfile", 15, 0, subject("ny", "Local", heraldtype.LaneMarketing), 6 * time.Hour, 6 * time.Hour},
		{"TenantWithoutQuietHours", 23, 0, subject("always", "", heraldtype.LaneMarketing), 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, _ := setup(t, c.h, c.m)
			wantRuling(t, "sender", r.Check(ctx, c.s), c.check)
			wantRuling(t, "dispatcher", r.Gate(ctx, claimed(t, c.s)), c.gate)
		})
	}
}

// The dispatcher's layer lets through what it cannot judge or what the
// sender will refuse anyway: a job that came without its profile goes to
// the sender, which reads it and checks itself; a recipient without
// consent on the channel is SUPPRESSED(CONSENT_DENIED) by the sender now
// rather than in the morning.
func TestTheGateLeavesToTheSender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := setup(t, 23, 0)
	s := subject("shop", "", heraldtype.LaneMarketing)
	wantRuling(t, "no profile read", r.Gate(ctx, s.Job), 0)

	noProfile := s.Job
	noProfile.Known = &heraldtype.Known{ProfileRead: true}
	wantRuling(t, "no profile stored", r.Gate(ctx, noProfile), 0)

	denied := s
	denied.Profile.Consent = map[heraldtype.Channel]bool{heraldtype.ChannelPush: true}
	wantRuling(t, "no consent on the channel", r.Gate(ctx, claimed(t, denied)), 0)

	corrupt := s.Job
	corrupt.Known = &heraldtype.Known{ProfileRead: true, Profile: []byte("{")}
	wantRuling(t, "a profile that does not decode", r.Gate(ctx, corrupt), 0)

	// A push to one device: consent is the channel's.
	device := s
	device.Job.Channel = heraldtype.DeviceSend(heraldtype.ChannelPush, "d1")
	device.Profile.Consent = map[heraldtype.Channel]bool{heraldtype.ChannelPush: true}
	wantRuling(t, "a push to one device", r.Gate(ctx, claimed(t, device)), 9*time.Hour)
}

func TestNewRefusesABadWindow(t *testing.T) {
	t.Parallel()
	bad := quiethours.Window{Start: clockTime(8, 0), End: clockTime(8, 0), Zone: time.UTC}
	if _, err := quiethours.New(quiethours.Config{Window: &bad}); err == nil {
		t.Error("New took an empty default window")
	}
	if _, err := quiethours.New(quiethours.Config{Tenants: map[string]*quiethours.Window{"shop": &bad}}); err == nil {
		t.Error("New took an empty tenant window")
	}
}

// The sender's own check, with no dispatcher in front of it (the rabbitmq
// transport, or a job handed straight to Send): at 20:55 a marketing send
// is deferred to 08:00 with nothing written and no provider call, the
// same job is sent once the clock reaches 08:00, and a transactional send
// goes at once.
func TestTheSenderDefersWithoutTheDispatcher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, clk := setup(t, 20, 55)
	st, err := sqlite.Open(ctx, testsqlite.Path(t), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tmpl := map[string]config.Template{"sms": {Body: "{{.pct}}% off"}}
	cat, err := catalog.New([]config.Kind{
		{Name: "promo", Category: "marketing", Channels: []string{"sms"}, Templates: tmpl},
		{Name: "receipt", Category: "transactional", Channels: []string{"sms"}, Templates: tmpl},
	})
	if err != nil {
		t.Fatal(err)
	}
	sms := sim.New(sim.Config{})
	reg := provider.NewRegistry()
	reg.Register(heraldtype.ChannelSMS, "sim-sms", sms)
	snd := sender.New(sender.Config{
		Store: st, Providers: reg, Catalog: cat, Clock: clk, Owner: "test", Checks: []sender.Check{r},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := st.ProfilePut(ctx, store.Profile{Tenant: "shop", Recipient: "r1",
		Addresses: map[heraldtype.Channel]string{heraldtype.ChannelSMS: "+821000000000"},
		Consent:   map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}}); err != nil {
		t.Fatal(err)
	}
	job := func(id, kind string, lane heraldtype.Lane) heraldtype.Job {
		return heraldtype.Job{MessageID: id + ".sms", NotificationID: id, Tenant: "shop", Recipient: "r1", EventID: id,
			Kind: kind, Lane: lane, Channel: heraldtype.ChannelSMS, Params: json.RawMessage(`{"pct":10}`)}
	}
	promo := job("n1", "promo", heraldtype.LaneMarketing)
	res := snd.Send(ctx, promo)
	if want := (sender.Result{Verdict: sender.Retry, Reason: heraldtype.ReasonQuietHours, Delay: 11*time.Hour + 5*time.Minute}); res.Verdict != want.Verdict ||
		res.Reason != want.Reason || res.Delay != want.Delay || res.State != "" {
		t.Fatalf("at 20:55 Send = %+v, want %+v", res, want)
	}
	if d, err := st.DeliveryGet(ctx, promo.MessageID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the deferral wrote %+v (%v)", d, err)
	}
	if res := snd.Send(ctx, job("n2", "receipt", heraldtype.LaneTransactional)); res.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("a transactional send at 20:55: %+v", res)
	}
	if n := sms.Total(); n != 1 {
		t.Fatalf("%d provider calls by 20:55, want 1 (the transactional one)", n)
	}

	clk.Advance(res.Delay)
	if res := snd.Send(ctx, promo); res.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("at 08:00 Send = %+v, want PROVIDER_ACCEPTED", res)
	}
	if n := sms.Total(); n != 2 {
		t.Fatalf("%d provider calls, want 2", n)
	}
}
