// Package sender is the one sender algorithm (DESIGN §3). Both transports
// hand it a Job and act on its Result: the db transport's claimers and the
// rabbitmq transport's consumers call the very same Send.
//
// The steps, and why each is where it is:
//
//  1. Peek. A delivery row for the message already exists → nothing to do
//     if it is terminal; a recheck if it is SENDING (see "The rule").
//     This is a fast path only: two copies can pass it together. It is
//     skipped when the transport knows that no row exists, or that none is
//     likely (Job.Known): the db transport's claim reads that in its own
//     statement, and a broker message that was never delivered before and
//     never came back from the retry queue is not worth a read. The claim
//     in step 3 refuses a duplicate either way.
//  2. Pre-checks, none of which writes a claim. First the cancel mark,
//     when the transport read it (Job.Known.Cancelled; the db transport's
//     claim does): a cancelled notification's send ends
//     SUPPRESSED(CANCELLED) there, through the cancel's own decision
//     write, before any rule may park it, defer it or spend a rate-limit
//     token on it (without it, the claim in step 3 ends it, and a
//     decision to park reads the mark first: a cancelled send is ended
//     SUPPRESSED(CANCELLED), raising no PARKED alert). Then
//     expiry, the kind, the
//     recipient's profile read now (consent, address; for a push to one
//     device, that device, read now: deleted or deactivated since intake
//     it gets nothing), the provider, the template, the message_id length. A decision not to send is recorded as
//     SUPPRESSED; a failure that would recur as PARKED, with a PARKED alert
//     (only a person moves it on). "Now" is send time:
//     the db transport's claim reads the profile in its statement, moments
//     before the send; otherwise the sender reads it here.
//  3. Pace, then claim. With a rate limit on the provider (Config.Limiter,
//     package ratelimit), wait for its token first: before the claim,
//     never while holding one, so a process that dies while waiting leaves
//     no SENDING row, and a token is spent only by a send that passed its
//     pre-checks; a wait that lasted (recheckAfterPace) runs Config.Checks
//     again, since it may have crossed a rule's boundary (quiet hours'
//     20:50). No token within the limiter's bound → Retry after the
//     time it names (RATE_LIMITED; nothing written, not a failed attempt);
//     a limiter that cannot reach the store → Backoff, as any store
//     failure before the claim. Then insert the SENDING row (unique on
//     message_id), or move a due RETRY_WAIT row to SENDING. Only the
//     winner goes on; a loser answers from the row that blocked it, as the
//     peek would (its token is spent without a call: the limit errs low).
//     A rule's key (Ruling.Take: event-level suppression's) is taken by
//     the claim itself, first: a key another notification holds claims
//     nothing, and the rule's ruling on it is written instead.
//  4. Call the provider with message_id as its reference, on a context that
//     shutdown does not cancel: a claim left without a result would block
//     the message for good.
//  5. Record the result, conditional on the row still being SENDING at this
//     attempt. A definite non-send releases the claim into RETRY_WAIT with
//     its next attempt time, logged at warn level with its reason code;
//     one refused for the provider's rate (Outcome.RateLimited, or any carrying a
//     Retry-After) also slows the provider's limit for every process;
//     everything the provider might have acted on
//     (timeouts, 5xx) becomes UNKNOWN and is never resent automatically.
//     A write whose outcome is not known (RecordTimeout of failed tries, or
//     a row that cannot be read back) answers a recheck, never Done.
//     A job that came with its outbox claim (Job.Outbox, db transport) has
//     the outbox row settled in the same transaction (Result.OutboxSettled).
//
// herald_deliveries_total is counted here, once per state a delivery
// enters, and only for writes that took: a won claim (SENDING), a recorded
// result, a written decision, and a claim that itself ended a cancelled
// notification's send or a cancelled campaign's retry (SUPPRESSED:
// DeliveryClaimResult.Cancelled). A copy that loses a write counts
// nothing,
// and a copy that parks a message already PARKED writes nothing (the
// decision write never puts PARKED over PARKED), so it raises no second
// PARKED alert either. The entries other writers make (the stale sweep, a
// cancel, the parked endpoints) are counted by them; package metrics lists
// them all.
//
// # The rule
//
// Nothing waits without an owner and a deadline (DESIGN §3). For each state
// that has not ended, who moves it on and by when, seen from the copies the
// transports hand the sender (package store has the store's half; package
// watchdog re-drives whatever is found past its bound with no owner):
//
//   - SCHEDULED, PENDING (no delivery row): the copy offered at available_at
//     (send_at, a retry or backoff time). db: a claimer of the lane, within
//     poll_interval. rabbitmq: the relay publishes it; the lane's consumer.
//   - CLAIMED (db): the claimer holding the lease. Its sender's result write
//     settles the row (DONE, or PENDING until the retry) while the lease
//     holds; its heartbeat extends the lease every lease/3 while the send
//     is in flight. Bound: claimed_until; a dead claimer's row is reclaimed.
//   - PUBLISHING, PUBLISHED (rabbitmq): the relay until the broker confirms
//     (confirm_timeout < lease), then the broker's copy: a consumer acks it
//     only after Send answered and any retry or parking copy is confirmed;
//     a consumer that dies unacked has it redelivered.
//   - SENDING: the copy that won the claim, which records a result after
//     the provider timeout and at most RecordTimeout of write retries. Every
//     other copy that meets SENDING answers a recheck (Retry after the
//     claim's age, MinRecheck..MaxRecheck) and so keeps its way back (db:
//     its outbox row PENDING again, not counted as a failed attempt;
//     rabbitmq: a copy in the retry queue): the owner may record a
//     RETRY_WAIT after losing its own lease or connection. So does the owner
//     when its result write's outcome is unknown. Bound: claimed_at +
//     stale_claim_after, when the stale sweep makes it UNKNOWN; the next
//     recheck, at most MaxRecheck later, finds it ended and answers Done.
//   - RETRY_WAIT: the copy the Retry verdict keeps (db: the outbox row,
//     PENDING until next_attempt_at, settled in the result's own write;
//     rabbitmq: a retry-queue copy for the longest tier not past the delay),
//     or a rechecking copy. Its claim at next_attempt_at makes the next
//     attempt; a copy that comes earlier answers Retry for the time left.
//     Bound: next_attempt_at.
//   - PARKED: a person, alerted when it was parked (requeue or discard).
//     Copies answer Park (rabbitmq: a copy in the parking queue; db: the
//     outbox row ends DONE and the PARKED delivery is what is listed).
//
// # Dead devices
//
// A push to one device (heraldtype.DeviceSend) that the provider refuses
// because the token is dead (provider.Outcome.DeadDestination, with the
// permanent class) ends PERMANENT_FAILURE, and that device, only that one,
// is deactivated with the answer's reason code (UNREGISTERED), right
// after the result is written: a second write, not the same one, because
// the device row is not the sender's table and the result write is the
// one every copy's safety rests on. A crash between the two loses
// nothing that matters: the device stays active, the next notification's
// push to it gets the same answer from the provider, and that send
// deactivates it. A failed deactivation is retried like the other store
// steps and then logged, with the same fallback. Registering the token
// again makes the device active again, and a registration made while the
// call was in flight keeps it so: the deactivation only applies to the
// device as the send read it (store.DeviceDeactivateParams.UpdatedAt).
package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/seal"
	"github.com/heraldhq/herald/store"
)

// Store is what the sender reads and writes: its own deliveries table and
// the recipients' profiles and devices, and whether a notification was
// erased.
type Store interface {
	store.Deliveries
	store.Profiles
	// Devices: a push to one device reads its token at send time and
	// deactivates it when the provider says it is dead.
	store.Devices
	// NotificationErased is store.Erasure's: asked before a retry's claim.
	NotificationErased(ctx context.Context, notificationID string) (bool, error)
	// NotificationCancelled is store.Cancels': asked before a decision to
	// park, when the transport did not read the mark.
	NotificationCancelled(ctx context.Context, notificationID string) (bool, error)
}

// Verdict tells the transport what to do with the message.
type Verdict int

const (
	// Done: nothing more for the transport to do (ack).
	Done Verdict = iota + 1
	// Retry: offer the message again after Delay. Either a definite
	// non-send released the claim into RETRY_WAIT, or this copy cannot
	// know yet what becomes of the message (a recheck: another copy's
	// SENDING claim, or a result write whose outcome is unknown) and must
	// not drop its copy, which may be the only one left to carry out a
	// retry, or the provider's rate limit has no token for it soon
	// (RATE_LIMITED, before any claim: nothing was written).
	Retry
	// Park: the same failure would recur; the delivery is PARKED with Reason.
	// A person fixes the cause and requeues it.
	Park
	// Backoff: nothing was decided (the store failed before a claim, or the
	// sender is shutting down); offer the message again later. Err says why.
	Backoff
)

func (v Verdict) String() string {
	switch v {
	case Done:
		return "done"
	case Retry:
		return "retry"
	case Park:
		return "park"
	case Backoff:
		return "backoff"
	}
	return "verdict(?)"
}

// Result is the sender's answer for one Job.
type Result struct {
	Verdict Verdict
	// State is the delivery's state as far as this call knows it.
	State  heraldtype.DeliveryState
	Reason string
	// Delay is when to offer the message again (Retry, Backoff).
	Delay time.Duration
	Err   error
	// OutboxSettled: the result write also settled the job's outbox row
	// (Job.Outbox) as the verdict asks; the transport has nothing to write.
	OutboxSettled bool
}

// MaxRetryAfterHint caps how long a provider's Retry-After can push a retry
// out; past it the policy's own schedule applies.
const MaxRetryAfterHint = time.Hour

// RetryPolicy is the schedule for definite non-sends.
type RetryPolicy struct {
	// Quick tries are QuickDelay apart; then Slow tries SlowDelay apart; a
	// definite non-send on the last try is RETRY_EXHAUSTED.
	Quick      int
	QuickDelay time.Duration
	Slow       int
	SlowDelay  time.Duration
}

// Attempts is the number of provider calls the policy allows.
func (p RetryPolicy) Attempts() int { return p.Quick + p.Slow }

// DelayAfter returns the wait after the given failed attempt (1-based) and
// whether another attempt is allowed.
func (p RetryPolicy) DelayAfter(attempt int) (time.Duration, bool) {
	switch {
	case attempt < p.Quick:
		return p.QuickDelay, true
	case attempt < p.Attempts():
		return p.SlowDelay, true
	}
	return 0, false
}

// Hooks are test seams. Each may be nil.
type Hooks struct {
	// AfterPeek runs after the peek found no row, before the pre-checks.
	AfterPeek func(ctx context.Context, job heraldtype.Job)
	// AfterClaim runs after a claim was won, before the provider call.
	AfterClaim func(ctx context.Context, job heraldtype.Job)
	// AfterRecord runs after a provider result was written.
	AfterRecord func(ctx context.Context, job heraldtype.Job, res Result)
}

// Config wires a sender.
type Config struct {
	Store     Store
	Providers *provider.Registry
	Catalog   *catalog.Catalog
	Clock     clock.Clock
	Retry     RetryPolicy
	// Owner names this process in claims and the attempt log.
	Owner   string
	Logger  *slog.Logger
	Alerts  alert.Sink
	Metrics *metrics.Metrics
	Hooks   Hooks
	// Seal opens the sealed params, addresses and device tokens (package
	// seal); nil opens only plain ones.
	Seal *seal.Keyring
	// RecordTimeout bounds the write of a provider call's result, retries
	// included: the last try is made when it has passed. A result still not
	// written then is given up (RECORD_FAILED): the claim stays SENDING and
	// the stale sweep turns it UNKNOWN, never a second call. Defaults to 30
	// seconds.
	RecordTimeout time.Duration
	// StoreRetry bounds how long each step up to and including the claim
	// (peek, profile read, claim, decision) retries a failing store call
	// before Send gives the job back (Backoff): the last try is made when it
	// has passed. A dropped database connection fails only the calls in
	// flight on it; the next try gets a new one, so a blip costs
	// milliseconds instead of the transport's backoff (a minute and more
	// with the db transport). Defaults to 5 seconds.
	StoreRetry time.Duration
	// RetryClock measures and spaces the store retries that StoreRetry and
	// RecordTimeout bound. Defaults to the system clock; tests pass one
	// whose Sleep moves a fake clock.
	RetryClock RetryClock
	// Limiter paces the calls to rate-limited providers (package
	// ratelimit). Defaults to nil: no provider is limited.
	Limiter Limiter
	// Checks are the send policy's rules (checks.go), run in order after
	// the built-in pre-checks. Defaults to none.
	Checks []Check
}

// Limiter is the providers' shared rate limit, as the sender uses it.
type Limiter interface {
	// Wait returns (0, nil) once a call to provider may be made for a
	// send on lane; a delay when none can be made soon (offer the send
	// again after it); an error when ctx ended or the limit could not be
	// read.
	Wait(ctx context.Context, provider string, lane heraldtype.Lane) (later time.Duration, err error)
	// Slow tells every process that provider refused a call for its
	// rate, asking for retryAfter (0: it did not say).
	Slow(ctx context.Context, provider string, retryAfter time.Duration)
}

// ReasonRateLimited is the reason of a Retry the rate limit answered.
const ReasonRateLimited = "RATE_LIMITED"

// recheckAfterPace is the rate-limit wait after which Config.Checks run
// again before the claim. A shorter wait is within what the path from the
// checks to the provider call takes anyway (the claim's round trip to the
// store); a token taken from the process's own grant takes microseconds.
const recheckAfterPace = 10 * time.Millisecond

// RetryClock is the time the sender's store retries run on.
type RetryClock interface {
	Now() time.Time
	// Sleep pauses for d, or until ctx is done, and reports whether the
	// whole pause passed.
	Sleep(ctx context.Context, d time.Duration) bool
}

// systemRetryClock is the default RetryClock.
type systemRetryClock struct{}

func (systemRetryClock) Now() time.Time { return time.Now() }
func (systemRetryClock) Sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, d)
}

// Sender runs the algorithm.
type Sender struct {
	Config
}

// New returns a sender.
func New(cfg Config) *Sender {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Alerts == nil {
		cfg.Alerts = alert.Log{Logger: cfg.Logger}
	}
	if cfg.RecordTimeout <= 0 {
		cfg.RecordTimeout = 30 * time.Second
	}
	if cfg.StoreRetry <= 0 {
		cfg.StoreRetry = 5 * time.Second
	}
	if cfg.RetryClock == nil {
		cfg.RetryClock = systemRetryClock{}
	}
	if cfg.Retry.Quick == 0 {
		cfg.Retry = RetryPolicy{Quick: 2, QuickDelay: time.Second, Slow: 3, SlowDelay: 10 * time.Minute}
	}
	return &Sender{Config: cfg}
}

// Send runs the algorithm for one job. ctx is the transport's: when it is
// cancelled before the claim, Send gives the job back (Backoff) without
// writing; after the claim it no longer matters.
func (s *Sender) Send(ctx context.Context, job heraldtype.Job) Result {
	// 1. Peek, unless the transport's claim already saw no delivery row.
	if job.Known == nil || job.Known.Delivery {
		var d store.Delivery
		err := s.retryStore(ctx, func(ctx context.Context) (err error) {
			d, err = s.Store.DeliveryGet(ctx, job.MessageID)
			return err
		})
		switch {
		case err == nil:
			if r, stop := s.existing(d); stop {
				return r
			}
			// A due retry. The recipient may have been erased since the
			// first attempt (erasure ends waiting sends itself, but not
			// one that was SENDING then): its params are {} now, and a
			// broker copy still carries the old ones. Neither is sent.
			if r, stop := s.erased(ctx, job); stop {
				return r
			}
		case errors.Is(err, store.ErrNotFound):
		default:
			return backoff(fmt.Errorf("peek: %w", err))
		}
	}
	if h := s.Hooks.AfterPeek; h != nil {
		h(ctx, job)
	}

	// 2. Pre-checks, then the policy's rules. A notification its
	// transport found marked cancelled is ended before them: the mark is
	// permanent and its claim would end the send anyway, and a rule must
	// not park it (an alert), defer it or spend a rate-limit token on it.
	if k := job.Known; k != nil && k.Cancelled {
		return s.decide(ctx, job, decision{state: heraldtype.DeliverySuppressed, reason: heraldtype.ReasonCancelled})
	}
	prep, decision := s.prepare(ctx, job)
	if decision != nil {
		return s.decide(ctx, job, *decision)
	}
	msg, named, profile := prep.msg, prep.named, prep.profile
	var sub Subject
	var take ClaimTake
	if len(s.Checks) > 0 {
		sub = Subject{Job: job, Category: s.Catalog.Kind(job.Kind).Lane, Profile: profile, Message: &msg, Provider: named.Name}
		v := s.runChecks(ctx, sub)
		if !v.Go() {
			return s.Apply(ctx, job, v)
		}
		take = v.Take
	}
	if err := ctx.Err(); err != nil {
		return backoff(err)
	}

	// 3. Pace (before the claim: a process that dies while it waits leaves
	// no SENDING row), then claim. From the claim on, shutdown does not
	// cancel: the claim, the call and the record form one unit. A claim
	// retried after an error whose first try did commit finds its own
	// SENDING row and loses; the stale sweep settles that row as UNKNOWN,
	// never a second call.
	paced := s.Clock.Now()
	if r, stop := s.pace(ctx, job, named.Name, paced); stop {
		return r
	}
	// A wait for the rate limit may cross a rule's boundary (quiet hours'
	// 20:50): the rules rule again on a send that waited longer than the
	// claim and the call themselves take (recheckAfterPace).
	if len(s.Checks) > 0 && s.Clock.Now().Sub(paced) >= recheckAfterPace {
		v := s.runChecks(ctx, sub)
		if !v.Go() {
			return s.Apply(ctx, job, v)
		}
		take = v.Take
	}
	work := context.WithoutCancel(ctx)
	claim, err := s.claim(work, job, named.Name, take)
	if err != nil && take != nil && errors.Is(err, store.ErrEventKeys) && !errors.Is(err, store.ErrClosed) {
		// The key could not be taken: the rule decides without it.
		if v := take.Failed(work, err); !v.Go() {
			return s.Apply(work, job, v)
		}
		take = nil
		claim, err = s.claim(work, job, named.Name, nil)
	}
	if err != nil {
		// If the claim did commit, the row stays SENDING and the stale sweep
		// turns it UNKNOWN: never a second call.
		return backoff(fmt.Errorf("claim: %w", err))
	}
	if take != nil && claim.Event.Outcome != 0 {
		if v := take.Taken(work, claim.Event); !v.Go() {
			return s.Apply(work, job, v)
		}
	}
	if !claim.Claimed {
		if claim.Current == nil { // a held key that its rule let go on
			return backoff(errors.New("claim: the event key is another notification's"))
		}
		if claim.Cancelled { // the claim ended a cancelled send
			s.Metrics.Delivery(job.Lane, job.Channel, heraldtype.DeliverySuppressed)
		}
		return s.blocked(*claim.Current)
	}
	s.Metrics.Delivery(job.Lane, job.Channel, heraldtype.DeliverySending)
	if h := s.Hooks.AfterClaim; h != nil {
		h(work, job)
	}

	// 4. Call.
	started := s.Clock.Now()
	out := named.Send(work, msg)
	took := s.Clock.Now().Sub(started)
	CallEnded(ctx)
	if !out.Suppressed { // the adapter's guard refused it: no call was made
		s.Metrics.ProviderCall(named.Name, out.Class.String(), took)
	}

	// 5. Record.
	res := s.record(work, job, claim.Attempt, out, started, took)
	s.slow(work, named.Name, out)
	if out.Class == provider.Permanent && out.DeadDestination {
		s.deactivate(work, job, out.Reason, prep.deviceUpdatedAt)
	}
	if h := s.Hooks.AfterRecord; h != nil {
		h(work, job, res)
	}
	return res
}

// claim claims job's message for a call to provider, taking take's key
// with it when take is set.
func (s *Sender) claim(ctx context.Context, job heraldtype.Job, provider string, take ClaimTake) (store.DeliveryClaimResult, error) {
	p := store.DeliveryClaimParams{
		MessageID: job.MessageID, NotificationID: job.NotificationID, Tenant: job.Tenant,
		Channel: job.Channel, Provider: provider, Owner: s.Owner,
	}
	if take != nil {
		key := take.Params()
		p.Event = &key
	}
	var claim store.DeliveryClaimResult
	began := s.RetryClock.Now()
	err := s.retryStore(ctx, func(ctx context.Context) (err error) {
		claim, err = s.Store.DeliveryClaim(ctx, p)
		if take != nil && errors.Is(err, store.ErrEventKeys) && s.RetryClock.Now().Sub(began) >= take.Wait() {
			return final{err}
		}
		return err
	})
	return claim, err
}

// final is an error retryStore does not try again after.
type final struct{ error }

func (f final) Unwrap() error { return f.error }

// existing turns a delivery row found by the peek (or one that blocked the
// claim, or a decision write) into a result. stop is false when the row is
// a due RETRY_WAIT, which this copy may try to claim.
func (s *Sender) existing(d store.Delivery) (Result, bool) {
	switch d.State {
	case heraldtype.DeliveryRetryWait:
		if d.NextAttemptAt == nil {
			return Result{Verdict: Done, State: d.State, Reason: d.Reason}, true
		}
		if wait := d.NextAttemptAt.Sub(s.Clock.Now()); wait > 0 {
			return Result{Verdict: Retry, State: d.State, Reason: d.Reason, Delay: wait}, true
		}
		return Result{}, false
	case heraldtype.DeliveryParked:
		return Result{Verdict: Park, State: d.State, Reason: d.Reason}, true
	case heraldtype.DeliverySending:
		// Another copy holds the claim, or a crash left it for the stale
		// sweep. Its owner may still record a RETRY_WAIT that only a copy
		// of the message can carry out, and may have lost its own (a lease
		// that ran out, a dropped broker connection): keep this copy and
		// look again later.
		return s.recheck(d.ClaimedAt, heraldtype.ReasonClaimHeld), true
	}
	// Terminal: this copy has nothing to do.
	return Result{Verdict: Done, State: d.State, Reason: d.Reason}, true
}

// erased ends a due retry of an erased notification SUPPRESSED(ERASED)
// through the decision write (conditional on the row still waiting, so a
// claim that got there first stands); stop is false when the notification
// was not erased.
func (s *Sender) erased(ctx context.Context, job heraldtype.Job) (Result, bool) {
	var erased bool
	err := s.retryStore(ctx, func(ctx context.Context) (err error) {
		erased, err = s.Store.NotificationErased(ctx, job.NotificationID)
		return err
	})
	switch {
	case err != nil:
		return backoff(fmt.Errorf("read erasure: %w", err)), true
	case !erased:
		return Result{}, false
	}
	return s.decide(ctx, job, decision{state: heraldtype.DeliverySuppressed, reason: store.ReasonErased}), true
}

// Bounds of the recheck delay: see recheck.
const (
	MinRecheck = time.Second
	MaxRecheck = time.Minute
)

// recheck is the answer for a copy that cannot know yet what became of the
// claim made at claimedAt: offer it again after as long as the claim is
// old, at least MinRecheck and at most MaxRecheck. Each recheck so doubles
// the wait without keeping a count anywhere: a normal owner records within
// milliseconds and the first recheck a second later finds its result; a
// long call (provider timeout plus record retries) is looked at a few
// times; a claim whose owner died is ended by the stale sweep
// (stale_claim_after, 10 minutes by default), and the next recheck, at
// most a minute later, finds it UNKNOWN and answers Done. That is about
// fifteen single-row reads per dead claim on the defaults.
func (s *Sender) recheck(claimedAt *time.Time, reason string) Result {
	age := time.Duration(0)
	if claimedAt != nil {
		age = s.Clock.Now().Sub(*claimedAt)
	}
	return Result{Verdict: Retry, State: heraldtype.DeliverySending, Reason: reason, Delay: min(max(age, MinRecheck), MaxRecheck)}
}

// blocked is the result for a copy that lost a write to the row d: it leaves
// the message to whoever holds it, or offers it again if d is a due retry.
func (s *Sender) blocked(d store.Delivery) Result {
	if r, stop := s.existing(d); stop {
		return r
	}
	return Result{Verdict: Retry, State: d.State, Reason: d.Reason}
}

// pace waits for the provider's rate limit (Config.Limiter), before the
// claim; stop is true with the result when the send does not go on now.
// The wait may be long (the limiter's bound): a job that expired
// meanwhile is suppressed, not sent late. began is when the send came to
// it, for the wait's metric.
func (s *Sender) pace(ctx context.Context, job heraldtype.Job, name string, began time.Time) (Result, bool) {
	if s.Limiter == nil {
		return Result{}, false
	}
	later, err := s.Limiter.Wait(ctx, name, job.Lane)
	switch {
	case err != nil:
		return backoff(fmt.Errorf("rate limit: %w", err)), true
	case later > 0:
		s.Metrics.RateLimitDeferred(name)
		return Result{Verdict: Retry, Reason: ReasonRateLimited, Delay: later}, true
	}
	s.Metrics.RateLimitWaited(name, s.Clock.Now().Sub(began))
	if s.expired(job) {
		return s.Apply(ctx, job, Suppress(heraldtype.ReasonExpired)), true
	}
	return Result{}, false
}

// expired reports whether job's expires_at has passed: checked in the
// pre-checks and again after a rate-limit wait.
func (s *Sender) expired(job heraldtype.Job) bool {
	return job.ExpiresAt != nil && !s.Clock.Now().Before(*job.ExpiresAt)
}

// slow tells the limiter that the provider refused a call for its rate:
// a 429, or any definite non-send with a Retry-After.
func (s *Sender) slow(ctx context.Context, name string, out provider.Outcome) {
	if s.Limiter != nil && out.Class == provider.NotSent && (out.RateLimited || out.RetryAfter > 0) {
		s.Limiter.Slow(ctx, name, out.RetryAfter)
	}
}

type decision struct {
	state  heraldtype.DeliveryState
	reason string
	err    error // a transient failure: decide nothing, back off
}

// prepared is what prepare read and built for one send.
type prepared struct {
	msg   provider.Message
	named provider.Named
	// profile is the recipient's profile as prepare read it, for the
	// policy's rules.
	profile store.Profile
	// deviceUpdatedAt is, for a push to one device, the device's UpdatedAt
	// as read before the call: a dead answer deactivates the device only
	// if nothing registered it again since (see deactivate).
	deviceUpdatedAt time.Time
}

// prepare runs the pre-checks and builds the provider message.
func (s *Sender) prepare(ctx context.Context, job heraldtype.Job) (prepared, *decision) {
	suppress := func(reason string) (prepared, *decision) {
		return prepared{}, &decision{state: heraldtype.DeliverySuppressed, reason: reason}
	}
	park := func(reason string) (prepared, *decision) {
		return prepared{}, &decision{state: heraldtype.DeliveryParked, reason: reason}
	}
	if len(job.MessageID) > heraldtype.MaxMessageIDLen {
		return park(heraldtype.ReasonMessageIDTooLong)
	}
	if s.expired(job) {
		return suppress(heraldtype.ReasonExpired)
	}
	kind := s.Catalog.Kind(job.Kind)
	if kind == nil {
		return park(heraldtype.ReasonUnknownKind)
	}
	// A send to one device is a send on its channel (push): the provider,
	// the consent and the template are the channel's.
	ch := job.Channel.Base()
	named, ok := s.Providers.For(ch)
	if !ok {
		return park(heraldtype.ReasonNoProvider)
	}
	profile, err := s.profile(ctx, job)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return prepared{}, &decision{err: fmt.Errorf("read profile: %w", err)}
	}
	if job.Lane == heraldtype.LaneMarketing && !profile.Consent[ch] {
		return suppress(heraldtype.ReasonConsentDenied)
	}
	address, platform, deviceUpdatedAt, dec := s.address(ctx, job, profile)
	if dec != nil {
		return prepared{}, dec
	}
	if platform != "" {
		// A push to one device goes through its platform's provider (FCM
		// for fcm devices, APNs for apns ones), the channel's otherwise.
		named, _ = s.Providers.ForPlatform(ch, string(platform))
	}
	plain, err := s.Seal.OpenJSON(job.Tenant, job.Params)
	if err != nil {
		return park(heraldtype.ReasonPersonalDataUnreadable)
	}
	params, err := catalog.DecodeParams(plain)
	if err != nil {
		return park(heraldtype.ReasonTemplateFailed)
	}
	title, body, err := kind.Render(ch, profile.Language, params)
	switch {
	case errors.Is(err, catalog.ErrNoTemplate):
		return park(heraldtype.ReasonTemplateMissing)
	case err != nil:
		return park(heraldtype.ReasonTemplateFailed)
	}
	msg := provider.Message{
		MessageID: job.MessageID, Tenant: job.Tenant, Recipient: job.Recipient, Kind: job.Kind,
		Channel: ch, Address: address, Title: title, Body: body,
	}
	return prepared{msg: msg, named: named, profile: profile, deviceUpdatedAt: deviceUpdatedAt}, nil
}

// address is job's destination: for a push to one device, that device's
// token, read now, its platform and its UpdatedAt; otherwise the profile's
// address for the channel. A device deleted or deactivated since intake, or a channel
// that needs an address the profile lacks, is a decision not to send.
func (s *Sender) address(ctx context.Context, job heraldtype.Job, profile store.Profile) (string, store.Platform, time.Time, *decision) {
	unavailable := &decision{state: heraldtype.DeliverySuppressed, reason: heraldtype.ReasonDestinationUnavailable}
	device := job.Channel.Device()
	if device == "" {
		address, err := s.Seal.Open(seal.Address, job.Tenant, profile.Addresses[job.Channel])
		if err != nil {
			return "", "", time.Time{}, &decision{state: heraldtype.DeliveryParked, reason: heraldtype.ReasonPersonalDataUnreadable}
		}
		if job.Channel.NeedsAddress() && address == "" {
			return "", "", time.Time{}, unavailable
		}
		return address, "", time.Time{}, nil
	}
	var d store.Device
	err := s.retryStore(ctx, func(ctx context.Context) (err error) {
		d, err = s.Store.DeviceGet(ctx, job.Tenant, job.Recipient, device)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", "", time.Time{}, unavailable
	case err != nil:
		return "", "", time.Time{}, &decision{err: fmt.Errorf("read device: %w", err)}
	case !d.Active:
		return "", "", time.Time{}, unavailable
	}
	token, err := s.Seal.Open(seal.Device, job.Tenant, d.Token)
	if err != nil {
		return "", "", time.Time{}, &decision{state: heraldtype.DeliveryParked, reason: heraldtype.ReasonPersonalDataUnreadable}
	}
	return token, d.Platform, d.UpdatedAt, nil
}

// deactivate marks the device of a push the provider called dead inactive
// (see "Dead devices" in the package doc), unless it was written since
// the send read it at updatedAt: the provider's answer is about the token
// as it was when the call went out, and a registration of it during the
// call is newer (APNs: "stop pushing until the device registers a token
// with a later timestamp"). Nothing else waits on it: a failure is
// logged, and the next push to the device tries again.
func (s *Sender) deactivate(ctx context.Context, job heraldtype.Job, reason string, updatedAt time.Time) {
	device := job.Channel.Device()
	if device == "" {
		return
	}
	if reason == "" {
		reason = heraldtype.ReasonUnregistered
	}
	var changed bool
	err := s.retryStore(ctx, func(ctx context.Context) (err error) {
		changed, err = s.Store.DeviceDeactivate(ctx, store.DeviceDeactivateParams{
			Tenant: job.Tenant, Recipient: job.Recipient, DeviceID: device, Reason: reason, UpdatedAt: updatedAt,
		})
		return err
	})
	if err != nil {
		s.Logger.LogAttrs(ctx, slog.LevelWarn, "sender: could not deactivate a dead device; its next push will try again",
			slog.String("message_id", job.MessageID), slog.String("device_id", device), slog.Any("error", err))
		return
	}
	if changed {
		s.Metrics.DeviceDeactivated(reason)
		s.Logger.LogAttrs(ctx, slog.LevelInfo, "sender: device deactivated",
			slog.String("message_id", job.MessageID), slog.String("device_id", device), slog.String("reason", reason))
	}
}

// profile is the recipient's profile as the transport read it, or read
// now. Either way it is read as the send starts, not when the notification
// was accepted: consent may have been withdrawn and the address changed
// since. The transport's read is the claim's, or, for a row handed over at
// intake (package dispatch), the create's, which starts the send as it
// returns.
func (s *Sender) profile(ctx context.Context, job heraldtype.Job) (store.Profile, error) {
	if k := job.Known; k != nil && k.ProfileRead {
		if k.Profile == nil {
			return store.Profile{}, store.ErrNotFound
		}
		return store.DecodeProfile(job.Tenant, job.Recipient, k.Profile, k.ProfileUpdatedAt)
	}
	var p store.Profile
	err := s.retryStore(ctx, func(ctx context.Context) (err error) {
		p, err = s.Store.ProfileGet(ctx, job.Tenant, job.Recipient)
		return err
	})
	return p, err
}

// decide records a pre-check decision (SUPPRESSED, PARKED) without a claim.
func (s *Sender) decide(ctx context.Context, job heraldtype.Job, dec decision) Result {
	if dec.err != nil {
		return backoff(dec.err)
	}
	if dec.state == heraldtype.DeliveryParked {
		// A park raises an alert a person must answer. A cancelled
		// notification's send ends SUPPRESSED(CANCELLED) instead: a copy
		// whose transport did not read the mark (a broker's; Known)
		// comes here after a cancel that failed after its mark.
		cancelled := job.Known != nil && job.Known.Cancelled
		if !cancelled {
			var err error
			if cancelled, err = s.Store.NotificationCancelled(ctx, job.NotificationID); err != nil {
				return backoff(fmt.Errorf("read the cancel mark before parking: %w", err))
			}
		}
		if cancelled {
			dec = decision{state: heraldtype.DeliverySuppressed, reason: heraldtype.ReasonCancelled}
		}
	}
	var ok bool
	err := s.retryStore(ctx, func(ctx context.Context) (err error) {
		ok, err = s.Store.DeliveryDecide(ctx, store.DeliveryDecideParams{
			MessageID: job.MessageID, NotificationID: job.NotificationID, Tenant: job.Tenant,
			Channel: job.Channel, State: dec.state, Reason: dec.reason, Lane: job.Lane,
		})
		return err
	})
	if err != nil {
		return backoff(fmt.Errorf("record %s: %w", dec.state, err))
	}
	if !ok {
		// Another copy got there first; whatever it wrote stands.
		cur, err := s.Store.DeliveryGet(ctx, job.MessageID)
		if err != nil {
			return backoff(fmt.Errorf("read delivery after lost decision: %w", err))
		}
		return s.blocked(cur)
	}
	s.Metrics.Delivery(job.Lane, job.Channel, dec.state)
	s.Logger.LogAttrs(ctx, slog.LevelInfo, "sender: decided not to send",
		slog.String("message_id", job.MessageID), slog.String("state", string(dec.state)), slog.String("reason", dec.reason))
	if dec.state == heraldtype.DeliveryParked {
		// Nothing moves a parked message on but a person: tell one.
		s.alert(ctx, alert.Parked, job, dec.reason)
		return Result{Verdict: Park, State: dec.state, Reason: dec.reason}
	}
	return Result{Verdict: Done, State: dec.state, Reason: dec.reason}
}

// record writes the outcome of a claimed call.
func (s *Sender) record(ctx context.Context, job heraldtype.Job, attempt int, out provider.Outcome, started time.Time, took time.Duration) Result {
	res := Result{Verdict: Done, Reason: out.Reason}
	switch out.Class {
	case provider.Accepted:
		res.State = heraldtype.DeliveryProviderAccepted
	case provider.Permanent:
		res.State = heraldtype.DeliveryPermanentFailure
	case provider.NotSent:
		if out.Suppressed {
			// The adapter's guard decided not to send (a policy rule):
			// final, as a pre-check's decision would be.
			res.State = heraldtype.DeliverySuppressed
			break
		}
		if delay, again := s.Retry.DelayAfter(attempt); again {
			hint := min(out.RetryAfter, MaxRetryAfterHint)
			res = Result{Verdict: Retry, State: heraldtype.DeliveryRetryWait, Reason: out.Reason, Delay: max(delay, hint)}
		} else {
			res.State = heraldtype.DeliveryRetryExhausted
		}
	default:
		// Unknown, or a class this sender does not know: it may have gone
		// out, so it is never sent again automatically.
		res.State = heraldtype.DeliveryUnknown
		if res.Reason == "" {
			res.Reason = "UNCLASSIFIED"
		}
	}
	params := store.DeliveryRecordParams{
		MessageID: job.MessageID, Attempt: attempt, State: res.State, Reason: res.Reason, RetryDelay: res.Delay,
		ProviderRef: out.ProviderRef, Owner: s.Owner, Class: out.Class.String(), StartedAt: started, Duration: took, Outbox: job.Outbox,
		OffChain: job.OffChain, Lane: job.Lane,
	}
	rec, err := s.recordWithRetry(ctx, params)
	if err != nil {
		// Whether the result was written is not known: a try may have
		// committed before its answer was lost. If none did, the row stays
		// SENDING, which blocks every copy, and the stale sweep turns it
		// UNKNOWN: never a second call. If one did and it was a RETRY_WAIT,
		// only a copy of the message can carry the retry out: keep this
		// one (a recheck) rather than close the message's way back.
		s.alert(ctx, alert.RecordFailed, job, string(res.State))
		s.Logger.LogAttrs(ctx, slog.LevelError, "sender: could not record provider result; will look again",
			slog.String("message_id", job.MessageID), slog.String("state", string(res.State)), slog.Any("error", err))
		r := s.recheck(&started, heraldtype.ReasonStoreUnavailable)
		r.Delay = max(r.Delay, res.Delay)
		return r
	}
	if !rec.Recorded {
		// The stale sweep settled the row first (or, after a lost answer,
		// another attempt holds it now); theirs stands, and this copy
		// answers as any copy that finds that row.
		s.Logger.LogAttrs(ctx, slog.LevelWarn, "sender: claim no longer SENDING when recording",
			slog.String("message_id", job.MessageID), slog.Int("attempt", attempt))
		cur, err := s.Store.DeliveryGet(ctx, job.MessageID)
		if err != nil {
			return s.recheck(&started, heraldtype.ReasonStoreUnavailable)
		}
		return s.blocked(cur)
	}
	s.Metrics.Delivery(job.Lane, job.Channel, res.State)
	switch res.State {
	case heraldtype.DeliveryRetryWait:
		s.logRetryWait(ctx, job, attempt, res)
	case heraldtype.DeliveryUnknown:
		s.alert(ctx, alert.UnknownOutcome, job, res.Reason)
	case heraldtype.DeliveryRetryExhausted:
		s.alert(ctx, alert.RetryExhausted, job, res.Reason)
	}
	res.OutboxSettled = rec.OutboxSettled
	return res
}

// logRetryWait says why a delivery waits and until when, at warn level: the
// provider refused or could not be reached, and herald handles it by itself,
// but a provider outage should be visible before its first RETRY_EXHAUSTED
// alert. next_attempt_at is this process's clock plus the delay (the store
// sets the row's own from its clock, which with PostgreSQL is the server's).
func (s *Sender) logRetryWait(ctx context.Context, job heraldtype.Job, attempt int, res Result) {
	s.Logger.LogAttrs(ctx, slog.LevelWarn, "sender: delivery waits for a retry",
		slog.String("message_id", job.MessageID), slog.String("tenant", job.Tenant),
		slog.String("lane", string(job.Lane)), slog.String("channel", string(job.Channel)),
		slog.Int("attempt", attempt), slog.String("reason", res.Reason), slog.Duration("retry_in", res.Delay),
		slog.Time("next_attempt_at", s.Clock.Now().Add(res.Delay).UTC()))
}

func (s *Sender) recordWithRetry(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	// The timeout also ends a try that hangs on the wall clock; the retries
	// run on the retry clock.
	ctx, cancel := context.WithTimeout(ctx, s.RecordTimeout)
	defer cancel()
	deadline := s.RetryClock.Now().Add(s.RecordTimeout)
	wait := 50 * time.Millisecond
	failedBefore := false
	for {
		res, err := s.Store.DeliveryRecord(ctx, p)
		if err == nil && !res.Recorded && failedBefore {
			// A failed try may have committed before its answer was lost;
			// then this try finds the row already settled — by that very
			// write, or by someone else. Whether that write settled the
			// outbox row too is not known: the transport settles it (a
			// fenced write, refused if it already was). A row that cannot
			// be read back is one more failed try, never "not recorded,
			// nothing to do".
			if res.Recorded, err = s.alreadyRecorded(ctx, p); err != nil {
				err = fmt.Errorf("read back the result: %w", err)
			}
		}
		if err == nil {
			return res, nil
		}
		failedBefore = true
		left := deadline.Sub(s.RetryClock.Now())
		if left <= 0 {
			return store.RecordResult{}, err
		}
		// The first failure is a warning; the tries after it (every 2 s
		// for up to RecordTimeout, minutes) are debug lines, or a database
		// outage would write one line a send every two seconds.
		level := slog.LevelWarn
		if wait > 50*time.Millisecond {
			level = slog.LevelDebug
		}
		s.Logger.LogAttrs(ctx, level, "sender: record failed, retrying",
			slog.String("message_id", p.MessageID), slog.Duration("for_at_most", left), slog.Any("error", err))
		if !s.RetryClock.Sleep(ctx, min(wait, left)) {
			return store.RecordResult{}, err
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// alreadyRecorded reports whether the delivery holds exactly this attempt's
// result.
func (s *Sender) alreadyRecorded(ctx context.Context, p store.DeliveryRecordParams) (bool, error) {
	d, err := s.Store.DeliveryGet(ctx, p.MessageID)
	if err != nil {
		return false, err
	}
	return d.Attempts == p.Attempt && d.State == p.State && d.Reason == p.Reason, nil
}

// retryStore runs op until it succeeds or fails with an answer (not found,
// store closed, an error op marks final), ctx is done, or StoreRetry has passed (the last try is made
// then); it returns op's last error. Every op it runs is safe to repeat: a
// read, or a conditional write that a repeat cannot apply twice.
func (s *Sender) retryStore(ctx context.Context, op func(context.Context) error) error {
	deadline := s.RetryClock.Now().Add(s.StoreRetry)
	wait := 20 * time.Millisecond
	for {
		err := op(ctx)
		if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrClosed) || ctx.Err() != nil {
			return err
		}
		if f, ok := err.(final); ok {
			return f.error
		}
		left := deadline.Sub(s.RetryClock.Now())
		if left <= 0 {
			return err
		}
		if !s.RetryClock.Sleep(ctx, min(wait, left)) {
			return errors.Join(err, ctx.Err())
		}
		wait = min(2*wait, time.Second)
	}
}

func (s *Sender) alert(ctx context.Context, kind string, job heraldtype.Job, reason string) {
	s.Metrics.Alert(kind)
	s.Alerts.Alert(ctx, alert.Alert{Kind: kind, MessageID: job.MessageID, Tenant: job.Tenant, Reason: reason})
}

func backoff(err error) Result {
	reason := heraldtype.ReasonStoreUnavailable
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		reason = "SHUTDOWN"
	}
	return Result{Verdict: Backoff, Err: err, Reason: reason}
}

// callEndedKey carries the function WithCallEnded sets.
type callEndedKey struct{}

// WithCallEnded returns a copy of ctx with which Send calls f once the
// provider call has returned (or the adapter's guard refused it), before
// its result is written: the dispatcher frees the send's slot there
// (dispatch.Claimer), so that the next send does not wait for the commit
// of this one's result. A send that never reaches the provider (a copy
// that finds its result, a decision not to send) never calls f. f must not
// block. Like net/http/httptrace, it is a hook on one call, carried by the
// call's context.
func WithCallEnded(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, callEndedKey{}, f)
}

// CallEnded calls the function WithCallEnded set on ctx, if any: Send calls
// it when its provider call returns, as does a stand-in for Send in tests.
func CallEnded(ctx context.Context) {
	if f, ok := ctx.Value(callEndedKey{}).(func()); ok {
		f()
	}
}
