package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/devices"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// devicePath is the device route of recipient r1 for token, escaped as a
// path segment.
func devicePath(token string) string {
	return "/v1/recipients/r1/devices/" + url.PathEscape(token)
}

func wantDevice(t *testing.T, r response, status int, want devices.Device) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	var got devices.Device
	if err := json.Unmarshal(r.body, &got); err != nil || got != want {
		t.Fatalf("body %s (%v), want %+v", r.body, err, want)
	}
}

func listDevices(t *testing.T, b *bundle, authz string) []devices.Device {
	t.Helper()
	r := b.do(t, http.MethodGet, "/v1/recipients/r1/devices", authz, "")
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var body struct {
		Devices []devices.Device `json:"devices"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("list body %s: %v", r.body, err)
	}
	return body.Devices
}

func TestDevices(t *testing.T) {
	t.Parallel()
	authA := "Bearer " + keyA

	t.Run("PutIs201ThenKnownIs200", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		const token = "fcm-token-0001:APA91b"
		id := store.DeviceID("a", "r1", token)
		wantDevice(t, b.do(t, http.MethodPut, devicePath(token), authA, `{"platform":"fcm"}`), http.StatusCreated,
			devices.Device{DeviceID: id, Platform: "fcm", Active: true})
		wantDevice(t, b.do(t, http.MethodPut, devicePath(token), authA, `{"platform":"web"}`), http.StatusOK,
			devices.Device{DeviceID: id, Platform: "web", Active: true})
		d, err := b.store.DeviceGet(t.Context(), "a", "r1", id)
		if err != nil || d.Token != token || d.Platform != store.PlatformWeb || !d.Active {
			t.Fatalf("stored device %+v, %v", d, err)
		}
	})
	// A phone's token registered for another customer (a logout and a
	// login on a shared phone) is theirs alone: the first one's row goes,
	// so none of their pushes reaches it.
	t.Run("ATokenRegisteredForAnotherRecipientMoves", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		const token = "fcm-token-shared-phone"
		b.do(t, http.MethodPut, devicePath(token), authA, `{"platform":"fcm"}`)
		r := b.do(t, http.MethodPut, "/v1/recipients/r2/devices/"+url.PathEscape(token), authA, `{"platform":"fcm"}`)
		wantDevice(t, r, http.StatusCreated, devices.Device{DeviceID: store.DeviceID("a", "r2", token), Platform: "fcm", Active: true})
		if list := listDevices(t, b, authA); len(list) != 0 {
			t.Fatalf("r1 still has %+v, want the phone gone to r2", list)
		}
		// Another tenant registering the same token takes nothing of a's.
		b.do(t, http.MethodPut, devicePath(token), "Bearer "+keyB, `{"platform":"fcm"}`)
		if d, err := b.store.DeviceGet(t.Context(), "a", "r2", store.DeviceID("a", "r2", token)); err != nil || !d.Active {
			t.Fatalf("a's r2 device after b's put: %+v, %v", d, err)
		}
	})
	// APNs reads a device token as hex in either case: an app that sends
	// it in upper case once and lower case another time (an update that
	// changed how it prints the token) has one device, pushed to once.
	t.Run("APNsTokenIsOneDeviceInEitherCase", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		lower := strings.Repeat("ab01", 16)
		upper := strings.ToUpper(lower)
		id := store.DeviceID("a", "r1", lower)
		wantDevice(t, b.do(t, http.MethodPut, devicePath(lower), authA, `{"platform":"apns"}`), http.StatusCreated,
			devices.Device{DeviceID: id, Platform: "apns", Active: true})
		wantDevice(t, b.do(t, http.MethodPut, devicePath(upper), authA, `{"platform":"apns"}`), http.StatusOK,
			devices.Device{DeviceID: id, Platform: "apns", Active: true})
		if list := listDevices(t, b, authA); len(list) != 1 || list[0].DeviceID != id {
			t.Fatalf("devices %+v, want the one device %s", list, id)
		}
		if d, err := b.store.DeviceGet(t.Context(), "a", "r1", id); err != nil || d.Token != lower {
			t.Fatalf("stored device %+v, %v; want the token in lower case", d, err)
		}
		// The shared-phone rule holds across spellings too.
		b.do(t, http.MethodPut, "/v1/recipients/r2/devices/"+upper, authA, `{"platform":"apns"}`)
		if list := listDevices(t, b, authA); len(list) != 0 {
			t.Fatalf("r1 still has %+v, want the phone gone to r2", list)
		}
		if r := b.do(t, http.MethodDelete, "/v1/recipients/r2/devices/"+upper, authA, ""); r.status != http.StatusNoContent {
			t.Fatalf("delete in upper case: %d %s", r.status, r.body)
		}

		// A row written as sent, before herald kept APNs tokens in lower
		// case, goes when the token is registered again.
		if _, _, err := b.store.DevicePut(t.Context(), store.Device{Tenant: "a", Recipient: "r1", DeviceID: store.DeviceID("a", "r1", upper),
			Token: upper, Platform: store.PlatformAPNs, TokenDigest: store.TokenDigest("a", upper)}); err != nil {
			t.Fatal(err)
		}
		b.do(t, http.MethodPut, devicePath(upper), authA, `{"platform":"apns"}`)
		if list := listDevices(t, b, authA); len(list) != 1 || list[0].DeviceID != id {
			t.Fatalf("devices %+v, want the legacy row gone and the one device %s", list, id)
		}
	})
	t.Run("EscapedTokenIsStoredUnescaped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		token := "https://push.example/sub/a b?x=1&y=é"
		wantDevice(t, b.do(t, http.MethodPut, devicePath(token), authA, `{"platform":"web"}`), http.StatusCreated,
			devices.Device{DeviceID: store.DeviceID("a", "r1", token), Platform: "web", Active: true})
		if d, err := b.store.DeviceGet(t.Context(), "a", "r1", store.DeviceID("a", "r1", token)); err != nil || d.Token != token {
			t.Fatalf("stored device %+v, %v; want the token unescaped", d, err)
		}
		if r := b.do(t, http.MethodDelete, devicePath(token), authA, ""); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	})
	t.Run("BadInputIsAProblem", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for name, c := range map[string]struct {
			path, body string
			status     int
			param      string
		}{
			"UnknownPlatform":   {devicePath("tok"), `{"platform":"sms"}`, http.StatusUnprocessableEntity, "platform"},
			"NoPlatform":        {devicePath("tok"), `{}`, http.StatusUnprocessableEntity, "platform"},
			"UnknownField":      {devicePath("tok"), `{"platform":"fcm","x":1}`, http.StatusBadRequest, "x"},
			"NotJSON":           {devicePath("tok"), `fcm`, http.StatusBadRequest, ""},
			"TokenTooLong":      {devicePath(strings.Repeat("t", devices.MaxTokenLen+1)), `{"platform":"fcm"}`, http.StatusBadRequest, "token"},
			"TokenNotPrintable": {devicePath("tok\x01en"), `{"platform":"fcm"}`, http.StatusBadRequest, "token"},
			"TokenNotUTF8":      {"/v1/recipients/r1/devices/tok%FFen", `{"platform":"fcm"}`, http.StatusBadRequest, "token"},
			// APNs' tokens are hex: another would be refused at the first
			// push and its device deactivated.
			"APNsTokenNotHex":  {devicePath("fcm-like:APA91b"), `{"platform":"apns"}`, http.StatusUnprocessableEntity, "token"},
			"APNsTokenTooLong": {devicePath(strings.Repeat("a", 201)), `{"platform":"apns"}`, http.StatusUnprocessableEntity, "token"},
		} {
			p := wantProblem(t, b.do(t, http.MethodPut, c.path, authA, c.body), c.status)
			if p.Param != c.param {
				t.Errorf("%s: param %q, want %q", name, p.Param, c.param)
			}
		}
		// The longest token is fine.
		long := strings.Repeat("t", devices.MaxTokenLen)
		if r := b.do(t, http.MethodPut, devicePath(long), authA, `{"platform":"fcm"}`); r.status != http.StatusCreated {
			t.Fatalf("a token of %d bytes: %d %s", devices.MaxTokenLen, r.status, r.body)
		}
		if list := listDevices(t, b, authA); len(list) != 1 {
			t.Fatalf("bad requests stored devices: %+v", list)
		}
		wantProblem(t, b.do(t, http.MethodPut, devicePath("tok"), "", `{"platform":"fcm"}`), http.StatusUnauthorized)
	})
	t.Run("DeleteIs204ThenUnknownIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		b.do(t, http.MethodPut, devicePath("tok-a"), authA, `{"platform":"fcm"}`)
		wantProblem(t, b.do(t, http.MethodDelete, devicePath("tok-a"), "Bearer "+keyB, ""), http.StatusNotFound)
		if r := b.do(t, http.MethodDelete, devicePath("tok-a"), authA, ""); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
		wantProblem(t, b.do(t, http.MethodDelete, devicePath("tok-a"), authA, ""), http.StatusNotFound)
	})
	t.Run("ListMasksTokensAndShowsDeactivation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		const live, dead = "live-token-ABCD1234", "0dead0beef0c0ffee9876"
		b.do(t, http.MethodPut, devicePath(live), authA, `{"platform":"fcm"}`)
		b.do(t, http.MethodPut, devicePath(dead), authA, `{"platform":"apns"}`)
		b.do(t, http.MethodPut, devicePath("short"), authA, `{"platform":"web"}`)
		deadID := store.DeviceID("a", "r1", dead)
		if ok, err := b.store.DeviceDeactivate(t.Context(), store.DeviceDeactivateParams{Tenant: "a", Recipient: "r1", DeviceID: deadID, Reason: heraldtype.ReasonUnregistered}); err != nil || !ok {
			t.Fatalf("deactivate: %v %v", ok, err)
		}
		r := b.do(t, http.MethodGet, "/v1/recipients/r1/devices", authA, "")
		for _, tok := range []string{live, dead, "short"} {
			if strings.Contains(string(r.body), tok) {
				t.Errorf("the list shows a token whole: %s", r.body)
			}
		}
		hints := map[string]devices.Device{}
		for _, d := range listDevices(t, b, authA) {
			hints[d.DeviceID] = d
		}
		now := b.clock.Now()
		if d := hints[store.DeviceID("a", "r1", live)]; d.TokenHint != "…1234" || !d.Active || d.DeactivatedAt != nil {
			t.Errorf("live device %+v, want hint …1234, active", d)
		}
		if d := hints[deadID]; d.TokenHint != "…9876" || d.Active || d.DeactivatedReason != heraldtype.ReasonUnregistered ||
			d.DeactivatedAt == nil || !d.DeactivatedAt.Equal(now) {
			t.Errorf("dead device %+v, want hint …9876, inactive since %v, UNREGISTERED", d, now)
		}
		if d := hints[store.DeviceID("a", "r1", "short")]; d.TokenHint != "" || d.Platform != "web" {
			t.Errorf("short token's device %+v, want no hint", d)
		}
		if list := listDevices(t, b, "Bearer "+keyB); len(list) != 0 {
			t.Errorf("tenant b sees tenant a's devices: %+v", list)
		}

		// Registering the dead token again makes it active again.
		b.clock.Advance(time.Minute)
		wantDevice(t, b.do(t, http.MethodPut, devicePath(dead), authA, `{"platform":"apns"}`), http.StatusOK,
			devices.Device{DeviceID: deadID, Platform: "apns", Active: true})
		for _, d := range listDevices(t, b, authA) {
			if d.DeviceID == deadID && (!d.Active || d.DeactivatedAt != nil || d.DeactivatedReason != "") {
				t.Errorf("re-registered device %+v, want active", d)
			}
		}
	})
}
