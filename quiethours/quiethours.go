// Package quiethours keeps marketing out of the night. Seed 000 sends
// advertising only from 08:00 to 20:50, as Korean law allows; herald makes
// that a window of the day (Window), per tenant, read on the wall clock of
// the recipient's time zone: the profile's time_zone, else the tenant's,
// else the default's (Asia/Seoul unless configured). Only marketing is
// held; alert, transactional and internal sends never meet the rule.
//
// Two layers, each of which holds on its own:
//
//   - The dispatcher's (Rule.Gate, run on each claimed job by the db
//     transport's claimers and by the rabbitmq transport's marketing
//     relay, whose claim then reads the profiles too): it stops releasing
//     marketing StopReleaseBefore (10 minutes) before the window closes,
//     from 20:40, so nothing it lets through is still on its way at
//     20:50, and defers each job it holds to the next opening. The
//     claimer or the relay puts the outbox row back to PENDING with
//     available_at at that opening and last_reason QUIET_HOURS; the relay
//     publishes nothing for it.
//   - The sender's (Rule.Check), at send time, with the profile read now:
//     outside the window itself (from 20:50) it defers rather than sends.
//     With rabbitmq this catches what was published before 20:40 and
//     still sits in the broker at 20:50 (a campaign's queue draining):
//     the consumer puts the row back to PENDING for the opening too and
//     drops its copy (package broker/rabbitmq, "Long deferrals wait in
//     the outbox"), so the night's wait is the outbox's with either
//     transport: no copy goes round the retry queues, and no PUBLISHED
//     row without a delivery is left for the watchdog to re-drive.
//
// A deferral is sender.DeferFor(until the next opening, QUIET_HOURS): no
// delivery row, no provider call, no failed attempt. The row keeps its
// owner and its deadline (DESIGN §3): the lane's claimers at available_at,
// and the expiry sweep at expires_at if that comes first.
//
// # The night's backlog costs the claim nothing
//
// The claim walks the partial index outbox_fair (lane, tenant, scope,
// available_at, id) from each (tenant, scope)'s oldest row and stops at the
// first one not yet due. A deferral past store.DeferHorizon takes the row
// out of that index altogether (store/promote.go): the lane's claims put
// it back a few minutes before the opening, so the night's backlog costs
// the claim nothing however many tenants and scopes it spans. A shorter
// deferral stays in the index; its available_at is past every due row of
// its (tenant, scope), so no claim reads it before then. Either way a
// backlog of a million deferred rows costs the marketing claim what none
// does (store/postgres and store/sqlite pin the plan, with a million
// deferred rows, in quiethours_plan_test.go, and with tomorrow's rows
// spread over 2,000 scopes in deferred_plan_test.go).
//
// # A due-by that passes while deferred
//
// A job is deferred to the next opening even when its expires_at comes
// first: it is not expired before its due-by, and no send is made after
// it. The expiry sweep ends the waiting row EXPIRED at expires_at and
// raises OUTBOX_EXPIRED, as for any row past its due-by, with either
// transport (the row waits in the outbox with both).
//
// # Time
//
// The wall clock decides, not elapsed hours: on a day with a
// daylight-saving change the window keeps its clock times, so the wait
// from 21:00 to 08:00 is ten or twelve hours instead of eleven, and the
// next opening is the first instant the clock reaches Start (Window.
// NextOpening has the rule for a Start the clocks skip or show twice).
// "Now" is the clock herald was given; with PostgreSQL the outbox row's
// available_at is the database's clock plus the wait, so a skew between
// the two moves the opening by the skew, and a row claimed a moment early
// is deferred again for the moment left.
package quiethours

import (
	"context"
	"fmt"
	"sync"
	"time"

	_ "time/tzdata" // the default Asia/Seoul loads on a machine with no zoneinfo

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/validate"
)

// Config configures the rule.
type Config struct {
	// Window is the window of every tenant Tenants does not name; nil:
	// those tenants' marketing goes at any hour.
	Window *Window
	// Tenants are the tenants with a window of their own; a nil window
	// turns the rule off for its tenant.
	Tenants map[string]*Window
	// Clock tells the time. Defaults to the system clock.
	Clock clock.Clock
}

// Rule is the quiet-hours rule: a sender.Check and a dispatcher gate.
type Rule struct {
	cfg Config
	// zones caches the profiles' time zones by name: time.LoadLocation
	// reads and parses the zone file on every call.
	zones sync.Map
}

var _ sender.Check = (*Rule)(nil)

// New returns the rule, or an error naming a window that is not valid.
func New(cfg Config) (*Rule, error) {
	if cfg.Window != nil {
		if err := cfg.Window.Validate(); err != nil {
			return nil, err
		}
	}
	for tenant, w := range cfg.Tenants {
		if w == nil {
			continue
		}
		if err := w.Validate(); err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tenant, err)
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Rule{cfg: cfg}, nil
}

// Check is the sender's layer: a marketing send outside its recipient's
// window is deferred to the next opening.
func (r *Rule) Check(_ context.Context, s sender.Subject) sender.Ruling {
	if s.Category != heraldtype.LaneMarketing {
		return sender.Ruling{}
	}
	w := r.window(s.Job.Tenant)
	if w == nil {
		return sender.Ruling{}
	}
	return r.rule(w, r.zone(s.Profile.TimeZone, w), w.Open)
}

// Gate is the dispatcher's layer, for the db transport's claimers (via
// sender.Sender.Apply) and the rabbitmq relay (dispatch.RelayConfig.Gate):
// a claimed marketing job outside its recipient's window less
// StopReleaseBefore is deferred to the next opening. It reads
// the recipient's profile the claim read with the job; a job that came
// without it goes on to the sender, which reads the profile and checks
// itself. So does a send the sender will refuse at once for want of
// consent on its channel: holding it overnight would only delay its
// SUPPRESSED(CONSENT_DENIED).
func (r *Rule) Gate(_ context.Context, job heraldtype.Job) sender.Ruling {
	if job.Lane != heraldtype.LaneMarketing {
		return sender.Ruling{}
	}
	w := r.window(job.Tenant)
	if w == nil || job.Known == nil || !job.Known.ProfileRead {
		return sender.Ruling{}
	}
	var p store.Profile
	if job.Known.Profile != nil {
		var err error
		if p, err = store.DecodeProfile(job.Tenant, job.Recipient, job.Known.Profile, job.Known.ProfileUpdatedAt); err != nil {
			return sender.Ruling{} // the sender reads it again and decides
		}
	}
	if !p.Consent[job.Channel.Base()] {
		return sender.Ruling{}
	}
	return r.rule(w, r.zone(p.TimeZone, w), w.OpenForRelease)
}

// rule defers until w's next opening on zone's clock unless open says now
// is inside.
func (r *Rule) rule(w *Window, zone *time.Location, open func(time.Time, *time.Location) bool) sender.Ruling {
	now := r.cfg.Clock.Now()
	if open(now, zone) {
		return sender.Ruling{}
	}
	return sender.DeferFor(w.NextOpening(now, zone).Sub(now), heraldtype.ReasonQuietHours)
}

// window is tenant's window; nil when the rule is off for it.
func (r *Rule) window(tenant string) *Window {
	if w, ok := r.cfg.Tenants[tenant]; ok {
		return w
	}
	return r.cfg.Window
}

// zone is the recipient's time zone: the profile's, or the window's when
// the profile names none, or one this machine cannot load (the profile
// API refuses those, so only a profile written some other way has one).
func (r *Rule) zone(name string, w *Window) *time.Location {
	if name == "" {
		return w.Zone
	}
	if z, ok := r.zones.Load(name); ok {
		return z.(*time.Location)
	}
	z, err := validate.TimeZone(name)
	if err != nil {
		return w.Zone
	}
	r.zones.Store(name, z)
	return z
}
