// Package metrics defines herald's Prometheus metrics. Every method is safe on
// a nil *Metrics, so components may run without them (tests, library use).
//
// Every series whose labels are known at start is exported from the first
// scrape, at 0, so a dashboard or an alert rule sees it (and rate() works)
// before the first event: New exports every lane, alert kind and intake
// response code; Declare adds what depends on the configuration (each lane's
// channels, the providers, the transport's dispatch results).
//
// herald_deliveries_total counts state entries: each delivery (one row per
// message id) adds exactly one to a state each time it enters it, counted
// by the process whose write moved it there and only when that write took,
// so a copy that loses a write counts nothing. A delivery retried twice and
// then accepted adds SENDING 3, RETRY_WAIT 2 and PROVIDER_ACCEPTED 1; one
// parked, requeued and then sent adds PARKED 1, RETRY_WAIT 1, SENDING 1 and
// its result 1. The sum over all states is not the number of deliveries.
//
// The writers a herald server counts: the sender (a won claim: SENDING; a
// result: PROVIDER_ACCEPTED, PERMANENT_FAILURE, RETRY_WAIT,
// RETRY_EXHAUSTED, UNKNOWN; a decision: SUPPRESSED, PARKED; a claim that
// ended a cancelled send: SUPPRESSED), the stale
// sweep and the watchdog (SENDING to UNKNOWN), the expiry sweep (RETRY_WAIT to SUPPRESSED:
// an outbox row that expired while its delivery waited for a retry), a
// cancel (to SUPPRESSED) and the HTTP parked
// endpoints (a requeue to RETRY_WAIT, a rabbitmq requeue the lane refused
// back to PARKED, a discard to SUPPRESSED), and an erasure (waiting sends to
// SUPPRESSED(ERASED)). Hence, summed over the herald
// servers of one database (increase() over a window survives restarts),
// the terminal states PROVIDER_ACCEPTED, PERMANENT_FAILURE,
// RETRY_EXHAUSTED, UNKNOWN and SUPPRESSED count each delivery that ended,
// once. The exceptions:
//
//   - herald parked requeue and discard on the command line write from a
//     process of their own, which no scrape sees: a delivery the CLI
//     discards ends uncounted, and one it requeues enters RETRY_WAIT
//     uncounted (what follows, in the server, is counted).
//   - DELIVERED is not in that sum: it confirms a delivery that already
//     ended (PROVIDER_ACCEPTED, or UNKNOWN settled by a receipt), so adding
//     it would count that delivery twice. An app's receipt writes it
//     (package inbox), counted here and in herald_receipts_total.
//   - A planned send that ends in the outbox (EXPIRED, or FAILED by the
//     dispatcher) before any delivery row was written writes no delivery
//     state: it is counted by herald_alerts_total{kind="OUTBOX_EXPIRED"}
//     and {kind="OUTBOX_FAILED"}. (An expiry that finds the delivery
//     waiting in RETRY_WAIT ends it SUPPRESSED(EXPIRED), counted as above;
//     one that finds it PARKED leaves it to its person; FAILED leaves any
//     delivery row as it is.)
package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/store"
)

// Metrics holds the collectors.
type Metrics struct {
	Registry *prometheus.Registry

	accepted     *prometheus.CounterVec
	intake       *prometheus.CounterVec
	deliveries   *prometheus.CounterVec
	providerCall *prometheus.HistogramVec
	dispatch     *prometheus.CounterVec
	alerts       *prometheus.CounterVec
	cancels      *prometheus.CounterVec
	redriven     *prometheus.CounterVec
	quota        *prometheus.CounterVec
	handed       *prometheus.CounterVec
	drafts       prometheus.Counter
	inbox        *inbox      // inbox.go
	reports      *reports    // reports.go
	rateLimits   *rateLimits // ratelimit.go
	consumers    *consumers  // consumer.go
}

// IntakeCodes are the status codes POST /v1/notifications answers with
// (401 from authentication, 429 from the send rate or a lane quota, the
// rest from intake).
var IntakeCodes = []int{
	http.StatusAccepted, http.StatusBadRequest, http.StatusUnauthorized, http.StatusConflict,
	http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusTooManyRequests, http.StatusServiceUnavailable,
}

// DeliveryStates are the states herald_deliveries_total counts entries into.
var DeliveryStates = []heraldtype.DeliveryState{
	heraldtype.DeliverySending, heraldtype.DeliveryRetryWait, heraldtype.DeliveryParked,
	heraldtype.DeliveryProviderAccepted, heraldtype.DeliveryDelivered, heraldtype.DeliveryPermanentFailure,
	heraldtype.DeliveryRetryExhausted, heraldtype.DeliveryUnknown, heraldtype.DeliverySuppressed,
}

// providerClasses are the outcome classes a provider call is observed under.
var providerClasses = []provider.Class{provider.Accepted, provider.NotSent, provider.Permanent, provider.Unknown}

// ErrNoValue, from a gauge's read function, leaves the gauge out of the
// scrape without an error: a value computed elsewhere (the leader's, on a
// timer) is not there yet, or not in this process.
var ErrNoValue = errors.New("metrics: no value in this process")

// New registers herald's collectors on a fresh registry, with backlog read
// at scrape time (herald's app serves it from memory, computed by the
// leader on a timer: app/gauges.go).
func New(backlog func(ctx context.Context) (map[heraldtype.Lane]int, error)) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_notifications_accepted_total", Help: "Notifications accepted (202) by lane.",
		}, []string{"lane"}),
		intake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_intake_responses_total", Help: "Responses to POST /v1/notifications by status code, 401 included.",
		}, []string{"code"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_deliveries_total",
			Help: "Delivery state entries by lane, channel and state: one per delivery each time it enters the state. " +
				"The sum over terminal states is the deliveries this process ended (herald parked on the command line counts nothing); " +
				"the sum over all states is not the number of deliveries.",
		}, []string{"lane", "channel", "state"}),
		providerCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "herald_provider_call_seconds", Help: "Provider call latency by provider and outcome class.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"provider", "class"}),
		dispatch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_dispatch_total", Help: "Outbox rows and broker messages settled by the dispatcher, by lane and result.",
		}, []string{"lane", "result"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_alerts_total", Help: "Alerts raised, by kind.",
		}, []string{"kind"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_cancels_total",
			Help: "Cancel requests answered, by result: cancelled (at least one waiting send suppressed) or unchanged.",
		}, []string{"result"}),
		redriven: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_watchdog_redriven_total",
			Help: "Rows the watchdog found waiting past their deadline with no owner and moved on, by lane and kind " +
				"(retry_wait, published, sending, lease). Each is also a REDRIVEN alert; the goal is zero.",
		}, []string{"lane", "kind"}),
		quota: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_lane_quota_refused_total",
			Help: "Sends refused (429) at intake because their tenant was over its send quota in their lane (limits.lane_quotas), by lane.",
		}, []string{"lane"}),
		handed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_intake_handed_total",
			Help: "Notifications accepted whose outbox row intake wrote already claimed and handed to this process's claimer or relay, skipping the claim (package dispatch, \"Rows handed over at intake\"), by lane.",
		}, []string{"lane"}),
		drafts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "herald_campaign_drafts_expired_total",
			Help: "DRAFT campaigns never started that the leader ended CANCELLED (DRAFT_EXPIRED) once campaign_draft_ttl had passed since their creation.",
		}),
	}
	for _, r := range []string{CancelCancelled, CancelUnchanged} {
		m.cancels.WithLabelValues(r)
	}
	for _, l := range heraldtype.Lanes {
		m.accepted.WithLabelValues(string(l))
		m.quota.WithLabelValues(string(l))
		m.handed.WithLabelValues(string(l))
		for _, k := range store.UnownedKinds {
			m.redriven.WithLabelValues(string(l), string(k))
		}
	}
	for _, k := range alert.Kinds {
		m.alerts.WithLabelValues(k)
	}
	for _, c := range IntakeCodes {
		m.intake.WithLabelValues(strconv.Itoa(c))
	}
	m.Registry.MustRegister(m.accepted, m.intake, m.deliveries, m.providerCall, m.dispatch, m.alerts, m.cancels, m.redriven, m.quota, m.handed, m.drafts,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	m.inbox = newInbox(m.Registry)
	m.reports = newReports(m.Registry)
	m.rateLimits = newRateLimits(m.Registry)
	m.consumers = newConsumers(m.Registry)
	if backlog != nil {
		m.Registry.MustRegister(&backlogCollector{read: backlog, desc: prometheus.NewDesc(
			"herald_outbox_backlog", "Due outbox rows waiting for a claimer, by lane.", []string{"lane"}, nil)})
	}
	return m
}

// Known are the label values a configuration decides, exported at 0 by
// Declare.
type Known struct {
	// Channels are each lane's channels: those of the kinds in the lane.
	Channels map[heraldtype.Lane][]heraldtype.Channel
	// Providers are the configured providers' names.
	Providers []string
	// DispatchResults are the results the transport's dispatchers count.
	DispatchResults []string
}

// Declare exports the series k makes known, at 0: deliveries for every
// lane, channel and state; provider calls for every provider and class;
// dispatch results for every lane.
func (m *Metrics) Declare(k Known) {
	if m == nil {
		return
	}
	for lane, chans := range k.Channels {
		for _, ch := range chans {
			for _, s := range DeliveryStates {
				m.deliveries.WithLabelValues(string(lane), string(ch), string(s))
			}
		}
	}
	for _, p := range k.Providers {
		for _, c := range providerClasses {
			m.providerCall.WithLabelValues(p, c.String())
		}
	}
	for _, l := range heraldtype.Lanes {
		for _, r := range k.DispatchResults {
			m.dispatch.WithLabelValues(string(l), r)
		}
	}
}

// Accepted counts a 202.
func (m *Metrics) Accepted(l heraldtype.Lane) {
	if m != nil {
		m.accepted.WithLabelValues(string(l)).Inc()
	}
}

// Handed counts a notification of lane l whose row intake handed over.
func (m *Metrics) Handed(l heraldtype.Lane) {
	if m != nil {
		m.handed.WithLabelValues(string(l)).Inc()
	}
}

// QuotaRefused counts a send refused over its tenant's quota in lane l.
func (m *Metrics) QuotaRefused(l heraldtype.Lane) {
	if m != nil {
		m.quota.WithLabelValues(string(l)).Inc()
	}
}

// IntakeResponse counts an intake answer.
func (m *Metrics) IntakeResponse(code string) {
	if m != nil {
		m.intake.WithLabelValues(code).Inc()
	}
}

// CountIntake wraps the whole POST /v1/notifications route, authentication
// included, and counts every answer by its status code, so a 401 that
// authentication gives before intake runs is counted too.
func (m *Metrics) CountIntake(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				// The recoverer outside answers 500.
				m.IntakeResponse(strconv.Itoa(http.StatusInternalServerError))
				panic(v)
			}
			m.IntakeResponse(strconv.Itoa(sw.code()))
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Delivery counts one delivery entering state s. Callers count only writes
// that changed the row's state (a won claim, a recorded result, a decision
// that was written), so each entry is counted once.
func (m *Metrics) Delivery(l heraldtype.Lane, ch heraldtype.Channel, s heraldtype.DeliveryState) {
	if m != nil {
		// A push to one device counts under its channel: a label per
		// device would be a series per device.
		m.deliveries.WithLabelValues(string(l), string(ch.Base()), string(s)).Inc()
	}
}

// ProviderCall observes one provider call.
func (m *Metrics) ProviderCall(provider, class string, d time.Duration) {
	if m != nil {
		m.providerCall.WithLabelValues(provider, class).Observe(d.Seconds())
	}
}

// Dispatch counts how the dispatcher settled a row.
func (m *Metrics) Dispatch(l heraldtype.Lane, result string) {
	if m != nil {
		m.dispatch.WithLabelValues(string(l), result).Inc()
	}
}

// DispatchN counts n rows settled with the same result (the relay's batches).
func (m *Metrics) DispatchN(l heraldtype.Lane, result string, n int) {
	if m != nil && n > 0 {
		m.dispatch.WithLabelValues(string(l), result).Add(float64(n))
	}
}

// The results herald_cancels_total counts: a cancel request that suppressed
// at least one waiting send, or one that found nothing left to cancel
// (already cancelled, under way or done).
const (
	CancelCancelled = "cancelled"
	CancelUnchanged = "unchanged"
)

// Cancel counts a cancel request that suppressed n sends.
func (m *Metrics) Cancel(n int) {
	if m == nil {
		return
	}
	result := CancelUnchanged
	if n > 0 {
		result = CancelCancelled
	}
	m.cancels.WithLabelValues(result).Inc()
}

// Redriven counts a row of kind on lane l that the watchdog moved on.
func (m *Metrics) Redriven(l heraldtype.Lane, kind store.UnownedKind) {
	if m != nil {
		m.redriven.WithLabelValues(string(l), string(kind)).Inc()
	}
}

// DraftsExpired counts n DRAFT campaigns ended past their time.
func (m *Metrics) DraftsExpired(n int) {
	if m != nil {
		m.drafts.Add(float64(n))
	}
}

// Alert counts an alert.
func (m *Metrics) Alert(kind string) {
	if m != nil {
		m.alerts.WithLabelValues(kind).Inc()
	}
}

type backlogCollector struct {
	read func(ctx context.Context) (map[heraldtype.Lane]int, error)
	desc *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.read(ctx)
	if errors.Is(err, ErrNoValue) {
		return
	}
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, l := range heraldtype.Lanes {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[l]), string(l))
	}
}
