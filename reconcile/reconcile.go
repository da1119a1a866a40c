// Package reconcile accounts for every accepted notification (DESIGN §6,
// seed 003 §8): top down from the source of truth, the notifications, it
// counts what each planned send has come to and finds what nothing will
// move on, repairs what cannot have had an external effect, alerts the
// rest, and keeps each run's report. `herald reconcile` runs it once; the
// leader runs it every reconcile_interval (Loop).
//
// What a run finds, and what it does with each (the report's kinds):
//
//   - missing_outbox: a notification with no planned send (outbox row) at
//     all. Every kind plans at least one send, and intake writes a
//     notification with its outbox rows in one transaction, so this is a
//     lost write, never a passing state. No delivery can exist without an
//     outbox row, so nothing was sent: the run recreates the planned sends,
//     PENDING, one per channel of the kind as configured now (conditional on
//     the notification still having none), and the claim guards the send as
//     always. A kind with policy first gets its chain back as intake writes
//     it: the first step PENDING, the later ones WAITING (package fallback). A kind no longer configured cannot be recreated: alerted.
//   - no_delivery: a planned send whose outbox row is DONE, finished more
//     than the grace ago, with no delivery row. The sender writes a
//     delivery row before it answers Done, so its path was closed without
//     a result and nothing owns it. No delivery row means no claim, so no
//     provider call: the run puts the row back to PENDING, as the watchdog
//     re-drives (store.Reconciler.ReconcileOutboxRedrive).
//   - retry_wait, published, sending, lease: the watchdog's kinds of rows
//     waiting past their deadline with no owner (store.UnownedKind), found
//     with the watchdog's own query and graces from the beginning of each
//     kind's order (not from its checkpoint), and re-driven as the watchdog
//     re-drives (Config.Redrive): an outbox row back to PENDING, a stale
//     claim to UNKNOWN.
//
// A finding the run repaired, or that was moved on by someone else before
// the repair's conditional write, is owned again; what remains counts as
// unowned: a finding that cannot be repaired, one past the per-run repair
// limit, one whose repair failed. Each is alerted (UNACCOUNTED), and
// `herald reconcile` exits 1 while any remains.
//
// Event keys taken over (package suppression): a notification of an event
// took the key from another notification of it whose lease had run out
// with nothing sent (its owner died before its claim, or its sends ended
// without a call). Nothing is wrong to repair, but it is the rule's one
// hand-over, and the report counts the keys taken over between the
// previous kept run's count and this one's (event_keys_taken_over; the
// store's clock; every kept key before the first run). A key is counted
// by its last takeover, and only while it is kept (ttl after its lease).
//
// Deliveries in UNKNOWN are ended, and not unowned: the call may or may not
// have reached the provider, and herald never resends them. They are
// counted and listed, and a run that finds any raises one UNKNOWN_UNSETTLED
// alert. They are settled by a provider's delivery report or status
// look-up where it has one (package settle: Twilio, the simulator), by an
// app's receipt, or by a person; what a look-up cannot settle is left
// UNKNOWN with a LOOKUP_ reason.
//
// The count reads every notification once, a page of ids at a time, each
// page a few set-based statements (no round trip per row) in a short
// read-only transaction of its own, so no snapshot or lock is held between
// pages; by_state, accepted, unknown and overdue are each notification as
// its page found it, before the run's repairs. Between pages the run
// pauses (Config.Duty), so that a run over a large database takes a share
// of one database backend, not a whole one, from intake.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/watchdog"
)

// The kinds of finding, as the report names them. The watchdog's kinds
// (store.UnownedKinds) follow these two.
const (
	KindMissingOutbox = "missing_outbox"
	KindNoDelivery    = "no_delivery"
)

// Kinds is every kind of finding, in the report's order.
var Kinds = func() []string {
	k := []string{KindMissingOutbox, KindNoDelivery}
	for _, u := range store.UnownedKinds {
		k = append(k, string(u))
	}
	return k
}()

// DefaultDuty is the share of a run's time spent in the database unless
// Config.Duty says otherwise: low enough that a run costs intake little
// while it goes on, high enough that a run over a million notifications
// ends within half a minute (see bench, BenchmarkReconcile1M and
// BenchmarkIntakeWhileReconciling, and the numbers in docs/operations.md).
const DefaultDuty = 0.15

// Store is what a run reads and writes.
type Store interface {
	store.Reconciler
	store.Watchdog
	// EventKeysTakenOver is store.EventKeys': the takeovers since the
	// last run.
	EventKeysTakenOver(ctx context.Context, since time.Time) (int, error)
}

// Config wires a reconciler.
type Config struct {
	Store Store
	// Catalog gives a kind's channels, to recreate the planned sends of a
	// notification without any. Nil: such notifications are not repaired.
	Catalog *catalog.Catalog
	// Redrive moves rows the watchdog's find returned on, with the
	// watchdog's alert and metric per row. Defaults to the store's
	// UnownedRedrive alone.
	Redrive func(ctx context.Context, rows []store.Unowned) ([]store.Unowned, error)
	// Grace is how long a finished (DONE) planned send may go without a
	// delivery row, and a due PENDING one wait for a claimer, before they
	// count (no_delivery, overdue). Defaults to 10 minutes.
	Grace time.Duration
	// Watchdog is the watchdog's configuration: its graces (Config.Grace)
	// decide how long past its deadline a row of each of its kinds must be
	// to count as unowned, as they decide for the watchdog. Its zero value
	// means the watchdog's defaults.
	Watchdog watchdog.Config
	// RepairLimit caps the findings of each kind repaired in one run; the
	// rest count as unowned until a later run. Defaults to 1000.
	RepairLimit int
	// Sample caps the ids of each kind listed in the report. Defaults to 20.
	Sample int
	// Keep is how many runs' reports the store keeps. Defaults to 100.
	Keep int
	// Duty is the share of a run's time spent in the database: after each
	// page the count pauses for the page's time × (1/Duty − 1). 1 never
	// pauses. Defaults to DefaultDuty, 0.15.
	Duty float64
	// RunBy names who runs it in the report: "server <owner>", "cli <user>".
	RunBy string
	Clock clock.Clock
	// Logger, Alerts and Metrics default to slog.Default(), alerts logged
	// there, and none.
	Logger  *slog.Logger
	Alerts  alert.Sink
	Metrics *metrics.Metrics
}

// Reconciler runs reconciliations.
type Reconciler struct {
	Config
	// checked, when set (tests), runs after each of Loop's checks, which
	// come every checkEvery when it is set (tests).
	checked    func()
	checkEvery time.Duration
}

// New returns a reconciler.
func New(cfg Config) *Reconciler {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Alerts == nil {
		cfg.Alerts = alert.Log{Logger: cfg.Logger}
	}
	if cfg.Redrive == nil {
		cfg.Redrive = cfg.Store.UnownedRedrive
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 10 * time.Minute
	}
	cfg.Watchdog = cfg.Watchdog.WithDefaults()
	if cfg.RepairLimit <= 0 {
		cfg.RepairLimit = 1000
	}
	if cfg.Sample <= 0 {
		cfg.Sample = 20
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 100
	}
	if cfg.Duty <= 0 || cfg.Duty > 1 {
		cfg.Duty = DefaultDuty
	}
	return &Reconciler{Config: cfg}
}

// Report is one run's account. Its JSON is what `herald reconcile --json`
// prints, GET /v1/ops/reconcile serves and the store keeps: counts and ids
// only, no personal data.
type Report struct {
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// RunBy is who ran it: "server <owner>" or "cli <user>".
	RunBy string `json:"run_by"`
	// Accepted counts the notifications accepted (202) and kept.
	Accepted int64 `json:"accepted"`
	// PlannedSends counts their planned sends (one per channel), the sum
	// of ByState.
	PlannedSends int64 `json:"planned_sends"`
	// ByState counts the planned sends by the state GET
	// /v1/notifications/{id} shows for each: SCHEDULED, PENDING, SENDING,
	// RETRY_WAIT, PARKED, a delivery's end state, EXPIRED, FAILED.
	ByState map[string]int64 `json:"by_state"`
	// Unowned counts what nothing will move on after this run's repairs:
	// 0 means every accepted notification is accounted for.
	Unowned int64 `json:"unowned"`
	// UnownedByKind splits Unowned by kind (every kind, 0 included), and
	// UnownedSample names up to Sample of each: message ids, or
	// notification ids for missing_outbox.
	UnownedByKind map[string]int64    `json:"unowned_by_kind"`
	UnownedSample map[string][]string `json:"unowned_sample"`
	// Found counts the findings by kind before the repairs.
	Found map[string]int64 `json:"found"`
	// Repaired counts the findings this run repaired, RepairedByKind by
	// kind.
	Repaired       int64            `json:"repaired"`
	RepairedByKind map[string]int64 `json:"repaired_by_kind"`
	// Unknown counts the deliveries in UNKNOWN, ended but not settled by a
	// report, a look-up or a receipt yet; UnknownSample names up to
	// Sample of them, oldest notification first.
	Unknown       int64    `json:"unknown"`
	UnknownSample []string `json:"unknown_sample"`
	// Overdue counts PENDING planned sends due more than the grace ago:
	// owned by the claimers or the relay, which are behind (a backlog).
	Overdue int64 `json:"overdue"`
	// EventKeysTakenOver counts the event keys (package suppression)
	// taken over since the previous kept run's CountedAt: another
	// notification of the event sent after the first one's lease ran out
	// with nothing sent.
	EventKeysTakenOver int64 `json:"event_keys_taken_over"`
	// CountedAt is the store's time when this run's count began; the next
	// run counts takeovers from it.
	CountedAt time.Time `json:"counted_at"`
}

// Accounted reports whether nothing was left unowned.
func (r Report) Accounted() bool { return r.Unowned == 0 }

// Run runs one reconciliation, keeps its report and returns it. An error
// means the count could not be made (nothing is kept); a repair that fails
// leaves its findings unowned in the report and is logged.
func (r *Reconciler) Run(ctx context.Context) (Report, error) {
	rep := Report{
		StartedAt: r.Clock.Now().UTC(), RunBy: r.RunBy,
		UnownedByKind: map[string]int64{}, UnownedSample: map[string][]string{}, Found: map[string]int64{},
		RepairedByKind: map[string]int64{}, UnknownSample: []string{},
	}
	for _, k := range Kinds {
		rep.UnownedByKind[k], rep.Found[k], rep.RepairedByKind[k] = 0, 0, 0
		rep.UnownedSample[k] = []string{}
	}
	since, err := r.takeoversSince(ctx)
	if err != nil {
		return Report{}, err
	}
	counts, err := r.Store.ReconcileCount(ctx, store.ReconcileCountParams{
		Grace: r.Grace, Sample: r.RepairLimit, UnknownSample: r.Sample, Pace: r.pace,
	})
	if err != nil {
		return Report{}, fmt.Errorf("reconcile: count: %w", err)
	}
	rep.Accepted, rep.ByState, rep.Overdue, rep.CountedAt = counts.Accepted, counts.ByState, counts.Overdue, counts.Now
	if rep.EventKeysTakenOver, err = r.takenOver(ctx, since, counts.Now); err != nil {
		return Report{}, err
	}
	for _, n := range counts.ByState {
		rep.PlannedSends += n
	}
	rep.Unknown = counts.Unknown.Count
	for _, f := range counts.Unknown.Sample[:min(r.Sample, len(counts.Unknown.Sample))] {
		rep.UnknownSample = append(rep.UnknownSample, f.MessageID)
	}

	r.repairMissingOutbox(ctx, &rep, counts.MissingOutbox)
	r.repairNoDelivery(ctx, &rep, counts.NoDelivery)
	for _, kind := range store.UnownedKinds {
		if err := r.redriveUnowned(ctx, &rep, kind); err != nil {
			return Report{}, err
		}
	}
	for _, k := range Kinds {
		rep.Unowned += rep.UnownedByKind[k]
		rep.Repaired += rep.RepairedByKind[k]
	}
	if rep.Unknown > 0 {
		// One alert a run, for every UNKNOWN left: it names the one, or
		// counts them (the report's unknown_sample names the first).
		a := alert.Alert{Kind: alert.UnknownUnsettled, Reason: "UNSETTLED"}
		if rep.Unknown == 1 && len(rep.UnknownSample) == 1 {
			a.MessageID = rep.UnknownSample[0]
		} else {
			a.Count = int(rep.Unknown)
		}
		r.raise(ctx, a)
	}
	rep.FinishedAt = r.Clock.Now().UTC()
	r.keep(ctx, rep)
	level := slog.LevelInfo
	if !rep.Accounted() {
		level = slog.LevelError
	}
	r.Logger.LogAttrs(ctx, level, "reconcile: run finished",
		slog.Int64("accepted", rep.Accepted), slog.Int64("planned_sends", rep.PlannedSends),
		slog.Int64("unowned", rep.Unowned), slog.Int64("repaired", rep.Repaired), slog.Int64("unknown", rep.Unknown),
		slog.Int64("overdue", rep.Overdue), slog.Int64("event_keys_taken_over", rep.EventKeysTakenOver),
		slog.Duration("took", rep.FinishedAt.Sub(rep.StartedAt)))
	return rep, nil
}

// takenOver counts the event keys last taken over at since or later and
// before until (the store's times): those after until are the next run's.
func (r *Reconciler) takenOver(ctx context.Context, since, until time.Time) (int64, error) {
	from, err := r.Store.EventKeysTakenOver(ctx, since)
	if err != nil {
		return 0, fmt.Errorf("reconcile: count event keys taken over: %w", err)
	}
	later, err := r.Store.EventKeysTakenOver(ctx, until)
	if err != nil {
		return 0, fmt.Errorf("reconcile: count event keys taken over: %w", err)
	}
	return int64(max(from-later, 0)), nil
}

// takeoversSince is where this run's count of event-key takeovers starts:
// the previous kept run's count time (its start, for a report kept before
// reports had one), or the zero time before the first run.
func (r *Reconciler) takeoversSince(ctx context.Context) (time.Time, error) {
	_, last, ok, err := Last(ctx, r.Store)
	switch {
	case err != nil:
		return time.Time{}, fmt.Errorf("reconcile: read the last run: %w", err)
	case !ok:
		return time.Time{}, nil
	case !last.CountedAt.IsZero():
		return last.CountedAt, nil
	}
	return last.StartedAt, nil
}

// pace pauses after a page so that the count spends Duty of its time in
// the database.
func (r *Reconciler) pace(ctx context.Context, took time.Duration) error {
	duty := r.Duty
	switch {
	case duty >= 1:
		return nil
	case duty <= 0:
		duty = DefaultDuty
	}
	if !clock.Sleep(ctx, time.Duration(float64(took)*(1/duty-1))) {
		return ctx.Err()
	}
	return nil
}

// repairMissingOutbox recreates the planned sends of the notifications
// found without any, for the kinds still configured.
func (r *Reconciler) repairMissingOutbox(ctx context.Context, rep *Report, found store.ReconcileFindings) {
	const kind = KindMissingOutbox
	rep.Found[kind] = found.Count
	unowned := found.Count - int64(len(found.Sample))
	for _, f := range found.Sample {
		var k *catalog.Kind
		if r.Catalog != nil {
			k = r.Catalog.Kind(f.Kind)
		}
		if k == nil {
			unowned++
			r.unaccounted(ctx, rep, kind, f.NotificationID, f.Tenant, "UNKNOWN_KIND")
			continue
		}
		n, err := r.Store.ReconcileOutboxRecreate(ctx, store.ReconcileOutboxRecreateParams{
			NotificationID: f.NotificationID, Channels: k.Channels, Fallback: k.Fallback})
		switch {
		case err != nil:
			unowned++
			r.failed(ctx, kind, err)
			r.unaccounted(ctx, rep, kind, f.NotificationID, f.Tenant, "REPAIR_FAILED")
		case n > 0:
			rep.RepairedByKind[kind]++
			r.repaired(ctx, kind, f.NotificationID, f.Tenant)
		}
		// n == 0: it has planned sends now (another run recreated them).
	}
	rep.UnownedByKind[kind] = unowned
}

// repairNoDelivery re-drives the finished planned sends found without a
// delivery.
func (r *Reconciler) repairNoDelivery(ctx context.Context, rep *Report, found store.ReconcileFindings) {
	const kind = KindNoDelivery
	rep.Found[kind] = found.Count
	unowned := found.Count - int64(len(found.Sample))
	moved, err := r.Store.ReconcileOutboxRedrive(ctx, found.Sample)
	if err != nil {
		r.failed(ctx, kind, err)
		unowned += int64(len(found.Sample))
		for _, f := range found.Sample {
			r.unaccounted(ctx, rep, kind, f.MessageID, f.Tenant, "REPAIR_FAILED")
		}
	}
	rep.RepairedByKind[kind] = int64(len(moved))
	for _, f := range found.Sample {
		if slices.Contains(moved, f.MessageID) {
			r.repaired(ctx, kind, f.MessageID, f.Tenant)
		}
	}
	// A row not moved has a delivery or another state now: owned.
	rep.UnownedByKind[kind] = unowned
}

// redriveUnowned finds every row of a watchdog kind past its deadline
// with no owner, from the start of the kind's order, and re-drives up to
// the repair limit of them.
func (r *Reconciler) redriveUnowned(ctx context.Context, rep *Report, kind store.UnownedKind) error {
	var found []store.Unowned
	var total int64
	for pos := (store.UnownedPosition{}); ; {
		page, err := r.Store.UnownedFind(ctx, store.UnownedFindParams{Kind: kind, Grace: r.Watchdog.Grace(kind), After: pos})
		if err != nil {
			return fmt.Errorf("reconcile: find unowned %s rows: %w", kind, err)
		}
		total += int64(len(page.Rows))
		found = append(found, page.Rows[:min(len(page.Rows), r.RepairLimit-len(found))]...)
		if page.Done || page.Examined == 0 {
			break
		}
		pos = page.Next
	}
	name := string(kind)
	rep.Found[name] = total
	unowned := total - int64(len(found))
	if len(found) > 0 {
		moved, err := r.Redrive(ctx, found)
		if err != nil {
			r.failed(ctx, name, err)
			unowned += int64(len(found))
			for _, u := range found {
				r.unaccounted(ctx, rep, name, u.MessageID, u.Tenant, "REPAIR_FAILED")
			}
		}
		rep.RepairedByKind[name] = int64(len(moved))
		for _, u := range moved {
			r.repaired(ctx, name, u.MessageID, u.Tenant)
		}
	}
	rep.UnownedByKind[name] = unowned
	return nil
}

// unaccounted lists and alerts one finding left unowned, up to Sample of
// each kind per run (the run's log line and the report count them all).
func (r *Reconciler) unaccounted(ctx context.Context, rep *Report, kind, id, tenant, reason string) {
	if len(rep.UnownedSample[kind]) >= r.Sample {
		return
	}
	rep.UnownedSample[kind] = append(rep.UnownedSample[kind], id)
	r.raise(ctx, alert.Alert{Kind: alert.Unaccounted, MessageID: id, Tenant: tenant, Reason: kind + ":" + reason})
}

func (r *Reconciler) repaired(ctx context.Context, kind, id, tenant string) {
	r.Logger.LogAttrs(ctx, slog.LevelWarn, "reconcile: repaired", slog.String("kind", kind),
		slog.String("id", id), slog.String("tenant", tenant))
}

func (r *Reconciler) failed(ctx context.Context, kind string, err error) {
	r.Logger.LogAttrs(ctx, slog.LevelError, "reconcile: repair failed", slog.String("kind", kind), slog.Any("error", err))
}

func (r *Reconciler) raise(ctx context.Context, a alert.Alert) {
	r.Metrics.Alert(a.Kind)
	r.Alerts.Alert(ctx, a)
}

// keep stores the report; a failure is logged, the report still returned.
func (r *Reconciler) keep(ctx context.Context, rep Report) {
	body, err := json.Marshal(rep)
	if err == nil {
		err = r.Store.ReconcileRunSave(context.WithoutCancel(ctx), store.ReconcileRun{
			StartedAt: rep.StartedAt, FinishedAt: rep.FinishedAt, Report: body}, r.Keep)
	}
	if err != nil {
		r.Logger.LogAttrs(ctx, slog.LevelError, "reconcile: keeping the report failed", slog.Any("error", err))
	}
}

// Last returns the newest kept report, and false before the first run.
func Last(ctx context.Context, st store.Reconciler) (store.ReconcileRun, Report, bool, error) {
	run, err := st.ReconcileRunLast(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return store.ReconcileRun{}, Report{}, false, nil
	}
	if err != nil {
		return store.ReconcileRun{}, Report{}, false, err
	}
	var rep Report
	if err := json.Unmarshal(run.Report, &rep); err != nil {
		return store.ReconcileRun{}, Report{}, false, fmt.Errorf("decode the last reconciliation report: %w", err)
	}
	return run, rep, true, nil
}

// Figures are the last kept report's figures for the reconciliation
// gauges (metrics.Metrics.WatchReconcile); zero before the first run.
func Figures(ctx context.Context, st store.Reconciler) (metrics.ReconcileFigures, error) {
	_, rep, ok, err := Last(ctx, st)
	if err != nil || !ok {
		return metrics.ReconcileFigures{}, err
	}
	return metrics.ReconcileFigures{Ran: true, FinishedAt: rep.FinishedAt, Unowned: rep.UnownedByKind,
		Repaired: rep.RepairedByKind, Unknown: rep.Unknown}, nil
}
