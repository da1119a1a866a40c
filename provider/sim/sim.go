// Package sim is a simulated provider: configurable latency and fault mix, and
// a record of every message it was asked to send. The default configuration,
// the tests and the benchmarks use it.
package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
)

// Config sets the simulated behaviour.
type Config struct {
	// Latency is added to every call.
	Latency time.Duration
	// NotSent, Permanent and Unknown are the fractions of calls answered with
	// that class; the rest are accepted.
	NotSent, Permanent, Unknown float64
	// Seed makes the fault mix repeatable. Defaults to 1.
	Seed uint64
	// DeadAddresses are destinations (device tokens) answered as dead,
	// every call, whatever the fault mix: Permanent with reason
	// UNREGISTERED and Outcome.DeadDestination, as FCM answers for an
	// uninstalled app's token. Defaults to none.
	DeadAddresses []string
	// Keep bounds the record: past it the oldest half is forgotten, so a
	// long-running development server does not grow without end.
	// Defaults to 500,000 calls.
	Keep int
	// ReportAfter, when set, makes the simulator send a delivery report
	// this long after each call that reached it (accepted, or answered
	// UNKNOWN: the call went out, only its answer was lost), through the
	// function SetReporter installs, as a provider calls back: DELIVERED,
	// or for the ReportFailed fraction of them failed (SIM_UNDELIVERED).
	ReportAfter time.Duration
	// ReportFailed is the fraction (0..1) of reports that say failed.
	ReportFailed float64
	// StatusLookup makes the simulator a provider.StatusChecker: a
	// look-up answers from its record of calls (what its report would
	// say for a call that reached it; not found for any other). Off by
	// default: the record is this process's memory, so after a restart
	// every look-up would be "not found".
	StatusLookup bool
}

// Call is one recorded call.
type Call struct {
	Message provider.Message
	At      time.Time
	Outcome provider.Outcome
}

// Sim is the simulated provider.
type Sim struct {
	cfg Config

	dead map[string]bool

	mu     sync.Mutex
	rng    *rand.Rand
	calls  []Call
	counts map[string]int
	// OnCall, when set, runs at the start of every call (tests use it as a
	// barrier or to force an outcome). A non-zero returned class overrides
	// the fault mix.
	onCall func(ctx context.Context, m provider.Message) provider.Outcome
	// reporter receives the delivery reports (ReportAfter).
	reporter func(provider.Report)
	// reached are the reports of the calls that reached the simulator, by
	// message id (for look-ups); forgotten with the calls.
	reached map[string]provider.Report
}

var _ provider.Provider = (*Sim)(nil)

// New returns a simulated provider.
func New(cfg Config) *Sim {
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Keep == 0 {
		cfg.Keep = 500_000
	}
	dead := map[string]bool{}
	for _, a := range cfg.DeadAddresses {
		dead[a] = true
	}
	return &Sim{cfg: cfg, dead: dead, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed)), counts: map[string]int{},
		reached: map[string]provider.Report{}}
}

// SetReporter installs where the delivery reports go (Config.ReportAfter);
// the app applies them as a provider's callback.
func (s *Sim) SetReporter(f func(provider.Report)) {
	s.mu.Lock()
	s.reporter = f
	s.mu.Unlock()
}

// Lookups reports whether the simulator answers status look-ups
// (Config.StatusLookup).
func (s *Sim) Lookups() bool { return s.cfg.StatusLookup }

// Status answers a look-up from the record of calls.
func (s *Sim) Status(_ context.Context, q provider.StatusQuery) (provider.Report, error) {
	if !s.cfg.StatusLookup {
		return provider.Report{}, errors.New("sim: status look-up is off")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.reached[q.MessageID]
	if !ok {
		return provider.Report{MessageID: q.MessageID, Result: provider.ReportNotFound}, nil
	}
	return r, nil
}

// OnCall installs a hook run at the start of every call. Its outcome, when its
// Class is set, replaces the simulated one.
func (s *Sim) OnCall(f func(ctx context.Context, m provider.Message) provider.Outcome) {
	s.mu.Lock()
	s.onCall = f
	s.mu.Unlock()
}

// Send records the call and answers with the configured mix.
func (s *Sim) Send(ctx context.Context, m provider.Message) provider.Outcome {
	s.mu.Lock()
	hook := s.onCall
	s.mu.Unlock()
	var forced provider.Outcome
	if hook != nil {
		forced = hook(ctx, m)
	}
	if s.cfg.Latency > 0 {
		clock.Sleep(ctx, s.cfg.Latency)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := forced
	switch {
	case out.Class != 0:
	case m.Address != "" && s.dead[m.Address]:
		out = provider.DeadDestinationOutcome(heraldtype.ReasonUnregistered)
	default:
		out = s.roll()
	}
	if len(s.calls) >= s.cfg.Keep {
		half := len(s.calls) / 2
		for _, c := range s.calls[:half] {
			delete(s.counts, c.Message.MessageID)
			delete(s.reached, c.Message.MessageID)
		}
		s.calls = append(s.calls[:0:0], s.calls[half:]...)
	}
	s.calls = append(s.calls, Call{Message: m, At: time.Now(), Outcome: out})
	s.counts[m.MessageID]++
	if out.Class == provider.Accepted || out.Class == provider.Unknown {
		s.reach(m.MessageID)
	}
	return out
}

// reach records what became of a call that reached the simulator and, with
// ReportAfter, reports it later. Called with s.mu held.
func (s *Sim) reach(messageID string) {
	r := provider.Report{MessageID: messageID, Result: provider.ReportDelivered, Reason: "SIM_DELIVERED"}
	if s.cfg.ReportFailed > 0 && s.rng.Float64() < s.cfg.ReportFailed {
		r.Result, r.Reason = provider.ReportFailed, "SIM_UNDELIVERED"
	}
	s.reached[messageID] = r
	if s.cfg.ReportAfter > 0 && s.reporter != nil {
		report := s.reporter
		time.AfterFunc(s.cfg.ReportAfter, func() { report(r) })
	}
}

func (s *Sim) roll() provider.Outcome {
	r := s.rng.Float64()
	switch {
	case r < s.cfg.NotSent:
		return provider.NotSentOutcome("SIM_NOT_SENT", 0)
	case r < s.cfg.NotSent+s.cfg.Permanent:
		return provider.PermanentOutcome("SIM_PERMANENT")
	case r < s.cfg.NotSent+s.cfg.Permanent+s.cfg.Unknown:
		return provider.UnknownOutcome("SIM_UNKNOWN")
	}
	return provider.AcceptedOutcome("")
}

// Calls returns a copy of every recorded call.
func (s *Sim) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// CallCount returns how many calls were made for messageID.
func (s *Sim) CallCount(messageID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[messageID]
}

// Total returns how many calls were made in all.
func (s *Sim) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// Duplicates returns the message ids that were called more than once.
func (s *Sim) Duplicates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d []string
	for id, n := range s.counts {
		if n > 1 {
			d = append(d, id)
		}
	}
	return d
}
