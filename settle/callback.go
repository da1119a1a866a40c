package settle

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/store"
)

// MaxCallbackBody bounds a delivery report's body. Providers send a few
// hundred bytes per report, a vendor a batch of them.
const MaxCallbackBody = 256 << 10

// CallbackRetryAfter is the Retry-After, in seconds, of a callback that
// found a send still in flight.
const CallbackRetryAfter = 5

// CallbackHandler serves POST /v1/callbacks/{provider}: a provider's
// delivery reports. It takes no API key; each provider's own check
// (provider.CallbackReceiver: a signature, a shared token) says who sent
// it. A report reaches the messages its provider sent and, for a vendor
// that pushes a whole account's reports to one URL
// (provider.AccountReceiver), those the account's other entries sent.
//
//	204 (or the provider's own reply shape)  every report was applied, or
//	     changed nothing (repeated, late, or about a message herald does not
//	     know or another provider sent: logged, not refused, or the
//	     provider would bring it again for ever)
//	400  the check passed but the body cannot be read
//	401  the check failed: nothing changed
//	404  no provider of that name takes callbacks
//	413  over MaxCallbackBody
//	503  with Retry-After: a report found its send still in flight
//	     (SENDING), or the store failed; the reports before it are applied,
//	     and applying them again changes nothing
type CallbackHandler struct {
	Store Store
	// Receivers are the providers that take callbacks, by name.
	Receivers map[string]provider.CallbackReceiver
	Metrics   *metrics.Metrics
	Logger    *slog.Logger
	// Alerts receives FALLBACK_UNSENT (Apply); nil raises none.
	Alerts alert.Sink
}

func (h *CallbackHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("provider")
	recv, ok := h.Receivers[name]
	if !ok {
		problem.New(w, http.StatusNotFound, "no provider of that name takes delivery reports")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxCallbackBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem.New(w, http.StatusRequestEntityTooLarge, "a delivery report is at most "+strconv.Itoa(MaxCallbackBody)+" bytes")
			return
		}
		problem.New(w, http.StatusBadRequest, "the body could not be read")
		return
	}
	reports, err := recv.ParseCallback(r, body)
	switch {
	case errors.Is(err, provider.ErrBadSignature):
		h.Logger.LogAttrs(r.Context(), slog.LevelWarn, "callback: refused a report that failed its provider's check", slog.String("provider", name))
		problem.New(w, http.StatusUnauthorized, "the report's signature does not verify")
		return
	case err != nil:
		problem.New(w, http.StatusBadRequest, "the report cannot be read")
		return
	}
	notYet := false
	also := h.sameAccount(name, recv)
	for _, rep := range reports {
		_, err := apply(r.Context(), h.Store, h.Metrics, h.Alerts, name, also, metrics.ReportCallback, rep)
		switch {
		case err == nil:
		case errors.Is(err, ErrNotYet):
			notYet = true
		case errors.Is(err, store.ErrNotFound):
			h.Logger.LogAttrs(r.Context(), slog.LevelInfo, "callback: a report about no message of this provider or its account; ignored",
				slog.String("provider", name), slog.String("message_id", rep.MessageID))
		default:
			h.Logger.LogAttrs(r.Context(), slog.LevelError, "callback: cannot apply a report",
				slog.String("provider", name), slog.String("message_id", rep.MessageID), slog.Any("error", err))
			w.Header().Set("Retry-After", strconv.Itoa(CallbackRetryAfter))
			problem.New(w, http.StatusServiceUnavailable, "the report could not be recorded; send it again")
			return
		}
	}
	if notYet {
		w.Header().Set("Retry-After", strconv.Itoa(CallbackRetryAfter))
		problem.New(w, http.StatusServiceUnavailable, "a report arrived before herald recorded the provider's answer; send it again")
		return
	}
	if rr, ok := recv.(provider.CallbackResponder); ok {
		rr.CallbackReply(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sameAccount is the other receivers on recv's vendor account
// (provider.AccountReceiver), by name: the providers whose messages a
// report taken at name's URL may settle too. Nil for a receiver that
// shares its account with none.
func (h *CallbackHandler) sameAccount(name string, recv provider.CallbackReceiver) []string {
	ar, ok := recv.(provider.AccountReceiver)
	if !ok || ar.CallbackAccount() == "" {
		return nil
	}
	var out []string
	for other, r := range h.Receivers {
		if o, ok := r.(provider.AccountReceiver); ok && other != name && o.CallbackAccount() == ar.CallbackAccount() {
			out = append(out, other)
		}
	}
	slices.Sort(out)
	return out
}
