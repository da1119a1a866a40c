// Package devices serves a recipient's push devices over HTTP (API key):
//
//	PUT    /v1/recipients/{recipient}/devices/{token}  {"platform": "fcm" | "apns" | "web"}
//	       (an apns token must be hex: apns.WellFormedToken, else 422;
//	       it is kept in lower case, the same device however it is spelt)
//	       → 201 (new) or 200 (known) {"device_id", "platform", "active"}
//	DELETE /v1/recipients/{recipient}/devices/{token}  → 204, 404 when unknown
//	GET    /v1/recipients/{recipient}/devices          → 200 {"devices": [...]}
//
// The token is the path's last segment, URL-escaped (a "/" in it is %2F):
// at most MaxTokenLen bytes of printable UTF-8. herald names the device by
// store.DeviceID of the token ("d" and 16 hex digits), which is also the
// tail of the message id of every push to it
// (<notification id>.push.<device id>). Registering a token again is
// harmless and makes a deactivated device active again.
//
// The list never shows a token whole: a push token is a credential of
// sorts (with the app's provider key it reaches the device), and the
// caller that registered it has it already. Each entry carries the token's
// last four characters (token_hint, left out for a token of 8 characters
// or fewer) to tell devices apart, and its state:
// active, or deactivated with the time and the reason code (UNREGISTERED:
// the provider said the token is dead).
package devices

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/provider/apns"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// MaxTokenLen bounds a device token, in bytes (validate.MaxPushToken, a
// profile's push address's limit too).
const MaxTokenLen = validate.MaxPushToken

// Handler serves the three routes.
type Handler struct {
	Store  store.Devices
	Logger *slog.Logger
	// Seal seals tokens before they are stored and opens them for the
	// list's hint (package seal); nil keeps them plain.
	Seal *seal.Keyring
}

// Device is one entry of the API.
type Device struct {
	DeviceID string `json:"device_id"`
	Platform string `json:"platform"`
	Active   bool   `json:"active"`
	// The list's extras.
	TokenHint         string     `json:"token_hint,omitempty"`
	CreatedAt         *time.Time `json:"created_at,omitempty"`
	UpdatedAt         *time.Time `json:"updated_at,omitempty"`
	DeactivatedAt     *time.Time `json:"deactivated_at,omitempty"`
	DeactivatedReason string     `json:"deactivated_reason,omitempty"`
}

type putBody struct {
	Platform string `json:"platform"`
}

// Put registers the token of the path.
func (h *Handler) Put(w http.ResponseWriter, r *http.Request) {
	tenant, recipient := auth.Tenant(r.Context()), r.PathValue("recipient")
	token, ok := pathToken(w, r)
	if !ok {
		return
	}
	var body putBody
	if !validate.DecodeJSON(w, r, &body, 1<<10, false) {
		return
	}
	platform := store.Platform(body.Platform)
	if !platform.Valid() {
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("platform must be %s, %s or %s", store.PlatformFCM, store.PlatformAPNs, store.PlatformWeb), Param: "platform"})
		return
	}
	if platform == store.PlatformAPNs && !apns.WellFormedToken(token) {
		// The adapter would refuse it at the first push and deactivate
		// the device: say so while the app that sent it is listening.
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "token",
			Detail: "an APNs device token is hexadecimal, at most 200 digits: the app's device token as hex, not base64 or an FCM token"})
		return
	}
	sent := token
	if platform == store.PlatformAPNs {
		// APNs reads the token as hex in either case: "AB12…" and "ab12…"
		// are one phone, and as two devices every push would reach it twice.
		token = strings.ToLower(token)
	}
	d := store.Device{Tenant: tenant, Recipient: recipient, DeviceID: store.DeviceID(tenant, recipient, token),
		Token: h.Seal.Seal(seal.Device, tenant, token), Platform: platform, TokenDigest: store.TokenDigest(tenant, token)}
	// The token is this recipient's alone from now on: the app install
	// it names is logged in as them, and another recipient's row of it
	// is deleted with this write, or their pushes would reach this phone.
	created, moved, err := h.Store.DevicePut(r.Context(), d)
	if err != nil {
		h.unavailable(w, r, "put", err)
		return
	}
	if sent != token {
		// The same token registered as sent, before herald wrote APNs
		// tokens in lower case, is this device too: it goes, or both rows
		// would be pushed to. A failure is a 503: the app registers again.
		if _, err := h.Store.DeviceDelete(r.Context(), tenant, recipient, store.DeviceID(tenant, recipient, sent)); err != nil {
			h.unavailable(w, r, "put", err)
			return
		}
	}
	if moved > 0 && h.Logger != nil {
		h.Logger.LogAttrs(r.Context(), slog.LevelInfo, "devices: a token registered for another recipient moved",
			slog.String("tenant", tenant), slog.String("device_id", d.DeviceID), slog.Int("from_recipients", moved))
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, Device{DeviceID: d.DeviceID, Platform: string(platform), Active: true})
}

// Delete deletes the device of the path's token.
func (h *Handler) Delete(w http.ResponseWriter, r *http.Request) {
	tenant, recipient := auth.Tenant(r.Context()), r.PathValue("recipient")
	token, ok := pathToken(w, r)
	if !ok {
		return
	}
	found, err := h.Store.DeviceDelete(r.Context(), tenant, recipient, store.DeviceID(tenant, recipient, token))
	if err != nil {
		h.unavailable(w, r, "delete", err)
		return
	}
	if lower := strings.ToLower(token); lower != token && apns.WellFormedToken(token) {
		// An APNs token is registered in lower case (Put): deleting it in
		// upper case names the same device.
		ok, err := h.Store.DeviceDelete(r.Context(), tenant, recipient, store.DeviceID(tenant, recipient, lower))
		if err != nil {
			h.unavailable(w, r, "delete", err)
			return
		}
		found = found || ok
	}
	if !found {
		problem.New(w, http.StatusNotFound, "no such device for this recipient")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// List lists the recipient's devices, the tokens masked.
func (h *Handler) List(w http.ResponseWriter, r *http.Request) {
	list, err := h.Store.DevicesList(r.Context(), auth.Tenant(r.Context()), r.PathValue("recipient"))
	if err != nil {
		h.unavailable(w, r, "list", err)
		return
	}
	out := struct {
		Devices []Device `json:"devices"`
	}{Devices: make([]Device, 0, len(list))}
	for _, d := range list {
		// A token that does not open (its key is gone) shows no hint.
		d.Token, _ = h.Seal.Open(seal.Device, d.Tenant, d.Token)
		out.Devices = append(out.Devices, Device{
			DeviceID: d.DeviceID, Platform: string(d.Platform), Active: d.Active, TokenHint: hint(d.Token),
			CreatedAt: &d.CreatedAt, UpdatedAt: &d.UpdatedAt, DeactivatedAt: d.DeactivatedAt, DeactivatedReason: d.DeactivatedReason,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// pathToken reads and checks the path's token, answering a problem when
// it is not one.
func pathToken(w http.ResponseWriter, r *http.Request) (string, bool) {
	token := r.PathValue("token")
	var detail string
	switch {
	case token == "":
		detail = "the device token is empty"
	case len(token) > MaxTokenLen:
		detail = fmt.Sprintf("the device token is longer than %d bytes", MaxTokenLen)
	case !catalog.Printable(token):
		detail = "the device token must be printable UTF-8 (URL-escape it in the path)"
	case seal.Sealed(token):
		detail = fmt.Sprintf("a device token may not begin with %q (herald's mark of a sealed value)", seal.Prefix)
	default:
		return token, true
	}
	problem.Write(w, problem.Problem{Status: http.StatusBadRequest, Detail: detail, Param: "token"})
	return "", false
}

// hint is the last four characters of a token, for telling devices apart.
func hint(token string) string {
	r := []rune(token)
	if len(r) <= 8 {
		// Too short to show any part of without showing most of it.
		return ""
	}
	return "…" + string(r[len(r)-4:])
}

func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, op string, err error) {
	h.Logger.LogAttrs(r.Context(), slog.LevelError, "devices: store unavailable", slog.String("op", op), slog.Any("error", err))
	problem.New(w, http.StatusServiceUnavailable, "the store is unavailable")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
