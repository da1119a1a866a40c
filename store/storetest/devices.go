package storetest

import (
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// putDevice registers token for tenant t1's recipient r; any error fails
// the test. It returns the device id.
func putDevice(t *testing.T, b bundle, recipient, token string, platform store.Platform) string {
	t.Helper()
	id := store.DeviceID("t1", recipient, token)
	if _, _, err := b.s.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: recipient, DeviceID: id, Token: token, Platform: platform}); err != nil {
		t.Fatalf("DevicePut: %v", err)
	}
	return id
}

func getDevice(t *testing.T, b bundle, recipient, id string) store.Device {
	t.Helper()
	d, err := b.s.DeviceGet(b.ctx, "t1", recipient, id)
	if err != nil {
		t.Fatalf("DeviceGet %s: %v", id, err)
	}
	return d
}

func testDevices(t *testing.T, h Harness) {
	t.Run("DeviceIDIsShortStableAndPerRecipient", func(t *testing.T) {
		t.Parallel()
		id := store.DeviceID("t1", "r1", "tok")
		if !regexp.MustCompile(`^d[0-9a-f]{16}$`).MatchString(id) || store.DeviceID("t1", "r1", "tok") != id {
			t.Fatalf("DeviceID = %q, want d and 16 hex digits, the same each time", id)
		}
		for _, other := range []string{store.DeviceID("t2", "r1", "tok"), store.DeviceID("t1", "r2", "tok"),
			store.DeviceID("t1", "r1", "tok2"), store.DeviceID("t1", "r1t", "ok")} {
			if other == id {
				t.Errorf("another tenant, recipient or token has the same id %q", id)
			}
		}
	})
	t.Run("ATokenRegisteredForAnotherRecipientMoves", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		put := func(tenant, recipient, token string) (bool, int) {
			t.Helper()
			created, moved, err := b.s.DevicePut(b.ctx, store.Device{Tenant: tenant, Recipient: recipient,
				DeviceID: store.DeviceID(tenant, recipient, token), Token: "sealed:" + recipient, Platform: store.PlatformFCM,
				TokenDigest: store.TokenDigest(tenant, token)})
			if err != nil {
				t.Fatalf("DevicePut: %v", err)
			}
			return created, moved
		}
		put("t1", "user-42", "phone")
		put("t1", "user-42", "tablet")
		put("t2", "user-42", "phone") // another tenant's app: its own token space
		if created, moved := put("t1", "user-42", "phone"); created || moved != 0 {
			t.Fatalf("the same recipient again: created %v, moved %d; want neither", created, moved)
		}
		// user-43 logs in on user-42's phone: the phone is user-43's alone.
		if created, moved := put("t1", "user-43", "phone"); !created || moved != 1 {
			t.Fatalf("another recipient: created %v, moved %d; want created, one row moved", created, moved)
		}
		list := func(tenant, recipient string) []string {
			t.Helper()
			ds, err := b.s.DevicesList(b.ctx, tenant, recipient)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range ds {
				ids = append(ids, d.DeviceID)
			}
			return ids
		}
		if got := list("t1", "user-42"); len(got) != 1 || got[0] != store.DeviceID("t1", "user-42", "tablet") {
			t.Fatalf("user-42's devices %v, want only the tablet", got)
		}
		if got := list("t1", "user-43"); len(got) != 1 {
			t.Fatalf("user-43's devices %v, want the phone", got)
		}
		if got := list("t2", "user-42"); len(got) != 1 {
			t.Fatalf("t2's user-42 devices %v, want its phone kept", got)
		}
		// A put without a digest (a row from before migration 40/36) moves nothing.
		if _, moved, err := b.s.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: "user-44",
			DeviceID: store.DeviceID("t1", "user-44", "phone"), Token: "x", Platform: store.PlatformFCM}); err != nil || moved != 0 {
			t.Fatalf("a put without a digest moved %d (%v), want none", moved, err)
		}
	})
	t.Run("PutGetListDelete", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		id := store.DeviceID("t1", "r1", "tok-a")
		created, _, err := b.s.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: "r1", DeviceID: id, Token: "tok-a", Platform: store.PlatformFCM})
		if err != nil || !created {
			t.Fatalf("DevicePut of a new token = %v, %v; want created", created, err)
		}
		d := getDevice(t, b, "r1", id)
		want := store.Device{Tenant: "t1", Recipient: "r1", DeviceID: id, Token: "tok-a", Platform: store.PlatformFCM, Active: true,
			CreatedAt: b.clk.Now(), UpdatedAt: b.clk.Now()}
		if d != want {
			t.Fatalf("DeviceGet = %+v, want %+v", d, want)
		}
		b.clk.Advance(time.Minute)
		created, _, err = b.s.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: "r1", DeviceID: id, Token: "tok-a", Platform: store.PlatformWeb})
		if err != nil || created {
			t.Fatalf("DevicePut of a known token = %v, %v; want not created", created, err)
		}
		if d := getDevice(t, b, "r1", id); d.Platform != store.PlatformWeb || !d.CreatedAt.Equal(Epoch) || !d.UpdatedAt.Equal(b.clk.Now()) {
			t.Fatalf("after a second put: %+v, want platform web, created at the first put, updated now", d)
		}
		other := putDevice(t, b, "r1", "tok-b", store.PlatformAPNs)
		putDevice(t, b, "r2", "tok-c", store.PlatformFCM)
		list, err := b.s.DevicesList(b.ctx, "t1", "r1")
		byID := []string{id, other}
		slices.Sort(byID)
		if err != nil || len(list) != 2 || list[0].DeviceID != byID[0] || list[1].DeviceID != byID[1] {
			t.Fatalf("DevicesList = %+v, %v; want r1's two devices by id", list, err)
		}
		if list, err := b.s.DevicesList(b.ctx, "t2", "r1"); err != nil || len(list) != 0 {
			t.Fatalf("another tenant's DevicesList = %+v, %v; want none", list, err)
		}
		if _, err := b.s.DeviceGet(b.ctx, "t2", "r1", id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's DeviceGet: %v, want ErrNotFound", err)
		}
		if ok, err := b.s.DeviceDelete(b.ctx, "t2", "r1", id); err != nil || ok {
			t.Fatalf("another tenant's DeviceDelete = %v, %v; want false", ok, err)
		}
		if ok, err := b.s.DeviceDelete(b.ctx, "t1", "r1", id); err != nil || !ok {
			t.Fatalf("DeviceDelete = %v, %v; want true", ok, err)
		}
		if ok, err := b.s.DeviceDelete(b.ctx, "t1", "r1", id); err != nil || ok {
			t.Fatalf("DeviceDelete again = %v, %v; want false", ok, err)
		}
		if _, err := b.s.DeviceGet(b.ctx, "t1", "r1", id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("DeviceGet after delete: %v, want ErrNotFound", err)
		}
	})
	t.Run("PushFansOutToActiveDevices", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		a := putDevice(t, b, "r1", "tok-a", store.PlatformFCM)
		c := putDevice(t, b, "r1", "tok-c", store.PlatformAPNs)
		dead := putDevice(t, b, "r1", "tok-dead", store.PlatformFCM)
		putDevice(t, b, "r2", "tok-other", store.PlatformFCM)
		if ok, err := b.s.DeviceDeactivate(b.ctx, store.DeviceDeactivateParams{Tenant: "t1", Recipient: "r1", DeviceID: dead, Reason: heraldtype.ReasonUnregistered}); err != nil || !ok {
			t.Fatalf("DeviceDeactivate = %v, %v", ok, err)
		}
		pushAndWebhook := func(p *store.NotificationCreateParams) {
			p.Channels = []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.ChannelPush}
		}
		p, _ := create(t, b, pushAndWebhook)
		want := []heraldtype.Channel{heraldtype.ChannelWebhook, heraldtype.DeviceSend(heraldtype.ChannelPush, a), heraldtype.DeviceSend(heraldtype.ChannelPush, c)}
		slices.Sort(want[1:])
		v, err := b.s.NotificationGet(b.ctx, "t1", p.ID)
		if err != nil || len(v.Deliveries) != len(want) {
			t.Fatalf("NotificationGet = %+v, %v; want the webhook's send and one per active device of r1", v, err)
		}
		for i, d := range v.Deliveries {
			if d.Channel != want[i] || d.MessageID != store.MessageID(p.ID, want[i]) || d.OutboxState != heraldtype.OutboxPending {
				t.Errorf("planned send %d = %+v, want channel %s, message id %s, PENDING", i, d, want[i], store.MessageID(p.ID, want[i]))
			}
			if len(d.MessageID) > heraldtype.MaxMessageIDLen {
				t.Errorf("message id %q is longer than %d", d.MessageID, heraldtype.MaxMessageIDLen)
			}
		}
		var jobs []heraldtype.Channel
		for _, row := range claim(t, b, heraldtype.LaneTransactional, 10) {
			if row.MessageID != store.MessageID(p.ID, row.Channel) {
				t.Errorf("claimed %s with channel %s", row.MessageID, row.Channel)
			}
			jobs = append(jobs, row.Channel)
		}
		slices.Sort(jobs)
		if sorted := slices.Sorted(slices.Values(want)); !slices.Equal(jobs, sorted) {
			t.Fatalf("claimed sends %v, want %v", jobs, sorted)
		}

		// A recipient without an active device keeps the one push send.
		p, _ = create(t, b, func(p *store.NotificationCreateParams) { pushAndWebhook(p); p.Recipient = "r3" })
		v, err = b.s.NotificationGet(b.ctx, "t1", p.ID)
		if err != nil || len(v.Deliveries) != 2 || v.Deliveries[1].Channel != heraldtype.ChannelPush ||
			v.Deliveries[1].MessageID != store.MessageID(p.ID, heraldtype.ChannelPush) {
			t.Fatalf("without devices: %+v, %v; want one push send %s", v.Deliveries, err, store.MessageID(p.ID, heraldtype.ChannelPush))
		}
	})
	t.Run("DeactivateLeavesADeviceRegisteredSinceItWasRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		id := putDevice(t, b, "r1", "tok-a", store.PlatformAPNs)
		read := getDevice(t, b, "r1", id).UpdatedAt
		// The app registers the token again while the call that will call
		// it dead is in flight, within the same clock tick: the answer is
		// about the token as it was read, and the registration is newer.
		putDevice(t, b, "r1", "tok-a", store.PlatformAPNs)
		p := store.DeviceDeactivateParams{Tenant: "t1", Recipient: "r1", DeviceID: id, Reason: heraldtype.ReasonUnregistered, UpdatedAt: read}
		if ok, err := b.s.DeviceDeactivate(b.ctx, p); err != nil || ok {
			t.Fatalf("DeviceDeactivate with the UpdatedAt read before a registration = %v, %v; want false", ok, err)
		}
		d := getDevice(t, b, "r1", id)
		if !d.Active || !d.UpdatedAt.After(read) {
			t.Fatalf("device %+v, want active with UpdatedAt after %v", d, read)
		}
		p.UpdatedAt = d.UpdatedAt
		if ok, err := b.s.DeviceDeactivate(b.ctx, p); err != nil || !ok {
			t.Fatalf("DeviceDeactivate with the current UpdatedAt = %v, %v; want true", ok, err)
		}
		if d := getDevice(t, b, "r1", id); d.Active || d.DeactivatedReason != heraldtype.ReasonUnregistered {
			t.Fatalf("device %+v, want inactive, UNREGISTERED", d)
		}
	})
	t.Run("DeactivateThenPutReactivates", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		id := putDevice(t, b, "r1", "tok-a", store.PlatformFCM)
		keep := putDevice(t, b, "r1", "tok-b", store.PlatformFCM)
		b.clk.Advance(time.Minute)
		if ok, err := b.s.DeviceDeactivate(b.ctx, store.DeviceDeactivateParams{Tenant: "t1", Recipient: "r1", DeviceID: id, Reason: heraldtype.ReasonUnregistered}); err != nil || !ok {
			t.Fatalf("DeviceDeactivate = %v, %v; want true", ok, err)
		}
		d := getDevice(t, b, "r1", id)
		if d.Active || d.DeactivatedAt == nil || !d.DeactivatedAt.Equal(b.clk.Now()) || d.DeactivatedReason != heraldtype.ReasonUnregistered {
			t.Fatalf("deactivated device = %+v, want inactive since now with reason UNREGISTERED", d)
		}
		if d := getDevice(t, b, "r1", keep); !d.Active {
			t.Fatalf("the other device was deactivated too: %+v", d)
		}
		if ok, err := b.s.DeviceDeactivate(b.ctx, store.DeviceDeactivateParams{Tenant: "t1", Recipient: "r1", DeviceID: id, Reason: "OTHER"}); err != nil || ok {
			t.Fatalf("DeviceDeactivate again = %v, %v; want false", ok, err)
		}
		if d := getDevice(t, b, "r1", id); d.DeactivatedReason != heraldtype.ReasonUnregistered {
			t.Fatalf("a second deactivation changed the reason: %+v", d)
		}
		if ok, err := b.s.DeviceDeactivate(b.ctx, store.DeviceDeactivateParams{Tenant: "t1", Recipient: "r1", DeviceID: "dmissing", Reason: "X"}); err != nil || ok {
			t.Fatalf("DeviceDeactivate of no device = %v, %v; want false", ok, err)
		}
		b.clk.Advance(time.Minute)
		created, _, err := b.s.DevicePut(b.ctx, store.Device{Tenant: "t1", Recipient: "r1", DeviceID: id, Token: "tok-a", Platform: store.PlatformFCM})
		if err != nil || created {
			t.Fatalf("DevicePut of a deactivated token = %v, %v; want not created", created, err)
		}
		if d := getDevice(t, b, "r1", id); !d.Active || d.DeactivatedAt != nil || d.DeactivatedReason != "" || !d.UpdatedAt.Equal(b.clk.Now()) {
			t.Fatalf("re-registered device = %+v, want active again with no deactivation", d)
		}
	})
}
