package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/heraldhq/herald/allowlist"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
)

// The non-production guard (seed 000 §7): outside production only
// allow-listed destinations get provider calls, checked three times, each
// layer on its own and each from what it can see itself — the dispatcher
// from the job and the recipient's profile or device (read in its claim,
// or read here), the sender from the rendered message, the adapter from
// the message it is handed. A blocked send ends SUPPRESSED(NOT_ALLOWLISTED).
// In production none of the three is built: no check, no wrapper, no read.
// The simulator (type sim) is never guarded: it reaches nobody.

// allowGuard is the allow-list as the app's layers use it; nil in
// production.
type allowGuard struct {
	list *allowlist.List
	// exempt are the providers the guard leaves alone (simulators); a
	// name not here is checked.
	exempt map[string]bool
	// guarded are the channels a provider serves that is checked (for the
	// whole channel or one push platform): a channel served only by
	// simulators, or by none, needs no read at the gate.
	guarded map[heraldtype.Channel]bool
}

func (a *App) allowGuard() *allowGuard {
	if a.cfg.Environment == config.EnvProduction {
		return nil
	}
	g := &allowGuard{list: a.allowList(), exempt: map[string]bool{}, guarded: map[heraldtype.Channel]bool{}}
	for _, p := range a.cfg.Providers {
		g.exempt[p.Name] = !a.cfg.Guarded(p)
		if a.cfg.Guarded(p) {
			g.guarded[heraldtype.Channel(p.Channel)] = true
		}
	}
	return g
}

// allowList compiles the configured list; Validate refused one that does
// not compile, and an empty list allows nothing, so an error here fails
// closed.
func (a *App) allowList() *allowlist.List {
	l, err := a.cfg.AllowList.List()
	if err != nil {
		return &allowlist.List{}
	}
	return l
}

// allows reports whether a send through the named provider may go to
// address on ch.
func (g *allowGuard) allows(providerName string, ch heraldtype.Channel, address string) bool {
	return g.exempt[providerName] || g.list.Allows(ch, address)
}

// allowListChecks is the sender's layer: a pre-check on the rendered
// message, after the built-in ones found its address.
func (a *App) allowListChecks() []sender.Check {
	g := a.allowGuard()
	if g == nil {
		return nil
	}
	a.logAllowList(g)
	if a.cfg.AllowList.Off.Sender {
		return nil
	}
	return []sender.Check{allowCheck{g}}
}

type allowCheck struct{ g *allowGuard }

var _ sender.Check = allowCheck{}

func (c allowCheck) Check(_ context.Context, s sender.Subject) sender.Ruling {
	if c.g.allows(s.Provider, s.Message.Channel, s.Message.Address) {
		return sender.Ruling{}
	}
	return sender.Suppress(heraldtype.ReasonNotAllowlisted)
}

// allowGateRetry is how long the dispatcher's layer puts a job off when it
// cannot read the destination (the store failed).
const allowGateRetry = 5 * time.Second

// allowListGates is the dispatcher's layer (the db claimers' Gate). The
// job names the recipient, not the address, so the gate finds it itself:
// the profile the claim read in its own statement (Job.Known), else read
// now, or for a push to one device that device's token. A job with no
// address to send to goes on: the sender ends it DESTINATION_UNAVAILABLE,
// and no provider is called either way.
func (a *App) allowListGates() []gate {
	g := a.allowGuard()
	if g == nil || a.cfg.AllowList.Off.Dispatcher {
		return nil
	}
	return []gate{func(ctx context.Context, job heraldtype.Job) sender.Ruling {
		ch := job.Channel.Base()
		if !ch.NeedsAddress() || !g.guarded[ch] {
			return sender.Ruling{} // no address, no provider (the sender parks it), or only simulators
		}
		d, err := a.destination(ctx, job)
		switch {
		case err != nil:
			return sender.DeferFor(allowGateRetry, heraldtype.ReasonStoreUnavailable)
		case d.address == "":
			return sender.Ruling{}
		}
		// The provider the sender will call: for a push to one device, its
		// platform's (a simulator serving the channel does not exempt an
		// apns device that a real APNs entry serves).
		if named, ok := a.registry.ForPlatform(ch, d.platform); !ok || g.exempt[named.Name] || g.list.Allows(ch, d.address) {
			return sender.Ruling{}
		}
		return sender.Suppress(heraldtype.ReasonNotAllowlisted)
	}}
}

// place is where a job goes as the dispatcher can know it: the address,
// and for a push to one device its platform.
type place struct {
	address  string
	platform string
}

// destination is job's address as the dispatcher can know it: the
// device's token for a push to one device (none when it is gone or
// inactive), else the profile's address for the channel ("" when there is
// none).
func (a *App) destination(ctx context.Context, job heraldtype.Job) (place, error) {
	if dev := job.Channel.Device(); dev != "" {
		d, err := a.store.DeviceGet(ctx, job.Tenant, job.Recipient, dev)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return place{}, nil
		case err != nil:
			return place{}, err
		case !d.Active:
			return place{}, nil
		}
		return place{a.openOrNone(seal.Device, job.Tenant, d.Token), string(d.Platform)}, nil
	}
	var p store.Profile
	var err error
	if k := job.Known; k != nil && k.ProfileRead {
		if k.Profile == nil {
			return place{}, nil
		}
		p, err = store.DecodeProfile(job.Tenant, job.Recipient, k.Profile, k.ProfileUpdatedAt)
	} else {
		p, err = a.store.ProfileGet(ctx, job.Tenant, job.Recipient)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return place{}, nil
	case err != nil:
		return place{}, err
	}
	return place{address: a.openOrNone(seal.Address, job.Tenant, p.Addresses[job.Channel])}, nil
}

// openOrNone is the sealed value v opened, or "" (no address: the
// dispatcher lets the job on) when it does not open: the sender opens it
// again and parks the job PERSONAL_DATA_UNREADABLE, before any provider
// call.
func (a *App) openOrNone(purpose, tenant, v string) string {
	plain, err := a.seal.Open(purpose, tenant, v)
	if err != nil {
		return ""
	}
	return plain
}

// guardProvider is the allow-list's layer in the adapter itself: outside
// production every adapter but the simulator is wrapped, so that it
// refuses a destination not on the list by itself
// (provider.SuppressedOutcome: the sender records SUPPRESSED and counts no
// call). In production the adapter is returned as it is.
func (a *App) guardProvider(p config.Provider, impl provider.Provider) provider.Provider {
	if !a.cfg.Guarded(p) || a.cfg.AllowList.Off.Adapter {
		return impl
	}
	return a.allowList().Guard(impl, func(ctx context.Context, m provider.Message) {
		// The earlier layers read the same destination: one that gets
		// here is a slip of theirs (or the address changed in between).
		a.logger.LogAttrs(ctx, slog.LevelWarn, "allowlist: the adapter's guard refused a send the earlier layers let through",
			slog.String("message_id", m.MessageID), slog.String("provider", p.Name), slog.String("channel", string(m.Channel)))
	})
}

// logAllowList says at start what the guard will do, never which
// addresses are on the list.
func (a *App) logAllowList(g *allowGuard) {
	var guarded []string
	for _, p := range a.cfg.Providers {
		if !g.exempt[p.Name] && heraldtype.Channel(p.Channel).NeedsAddress() {
			guarded = append(guarded, p.Name)
		}
	}
	if len(guarded) == 0 {
		return
	}
	attrs := []slog.Attr{slog.String("environment", a.cfg.Environment), slog.Int("entries", g.list.Len()),
		slog.String("providers", strings.Join(guarded, ","))}
	if g.list.Len() == 0 {
		a.logger.LogAttrs(context.Background(), slog.LevelWarn,
			"allowlist: not production and the allow-list is empty: every send through these providers ends SUPPRESSED(NOT_ALLOWLISTED)", attrs...)
		return
	}
	a.logger.LogAttrs(context.Background(), slog.LevelInfo,
		"allowlist: not production: only allow-listed destinations get provider calls", attrs...)
}
