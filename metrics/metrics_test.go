package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/store"
)

// gather returns the metric families by name.
func gather(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// value returns the sample of name with exactly labels (a counter's value,
// a histogram's count), and whether there is one.
func value(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	for _, s := range gather(t, m)[name].GetMetric() {
		if len(s.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, lp := range s.GetLabel() {
			match = match && labels[lp.GetName()] == lp.GetValue()
		}
		if !match {
			continue
		}
		if h := s.GetHistogram(); h != nil {
			return float64(h.GetSampleCount()), true
		}
		return s.GetCounter().GetValue(), true
	}
	return 0, false
}

func TestEverySeriesKnownAtStartIsExportedAtZero(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	m.Declare(metrics.Known{
		Channels:        map[heraldtype.Lane][]heraldtype.Channel{heraldtype.LaneAlert: {heraldtype.ChannelSMS, heraldtype.ChannelPush}},
		Providers:       []string{"sms-gw"},
		DispatchResults: []string{"done", "retry"},
	})
	type series struct {
		name   string
		labels map[string]string
	}
	var want []series
	add := func(name string, kv ...string) {
		l := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		want = append(want, series{name, l})
	}
	for _, k := range alert.Kinds {
		add("herald_alerts_total", "kind", k)
	}
	for _, c := range metrics.IntakeCodes {
		add("herald_intake_responses_total", "code", strconv.Itoa(c))
	}
	for _, l := range heraldtype.Lanes {
		add("herald_notifications_accepted_total", "lane", string(l))
		add("herald_intake_handed_total", "lane", string(l))
		add("herald_dispatch_total", "lane", string(l), "result", "done")
		add("herald_dispatch_total", "lane", string(l), "result", "retry")
		for _, k := range store.UnownedKinds {
			add("herald_watchdog_redriven_total", "lane", string(l), "kind", string(k))
		}
	}
	for _, ch := range []string{"sms", "push"} {
		for _, s := range metrics.DeliveryStates {
			add("herald_deliveries_total", "lane", "alert", "channel", ch, "state", string(s))
		}
	}
	for _, c := range []string{"accepted", "not_sent", "permanent", "unknown"} {
		add("herald_provider_call_seconds", "provider", "sms-gw", "class", c)
	}
	for _, w := range want {
		if v, ok := value(t, m, w.name, w.labels); !ok || v != 0 {
			t.Errorf("%s%v = %v (present %v), want 0 from the start", w.name, w.labels, v, ok)
		}
	}
	fams := gather(t, m)
	total := 0
	for _, name := range []string{"herald_alerts_total", "herald_intake_responses_total", "herald_notifications_accepted_total", "herald_intake_handed_total",
		"herald_dispatch_total", "herald_deliveries_total", "herald_provider_call_seconds", "herald_watchdog_redriven_total"} {
		total += len(fams[name].GetMetric())
	}
	if total != len(want) {
		t.Errorf("%d series exported, want exactly the %d known ones", total, len(want))
	}
	if _, ok := value(t, m, "herald_alerts_total", map[string]string{"kind": alert.Parked}); !ok {
		t.Error("the PARKED alert kind is not exported")
	}
}

func TestCountIntakeCountsEveryAnswerOfTheRoute(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	// An authentication layer that answers 401 before the handler runs,
	// a handler that writes a status, one that only writes a body (200),
	// and one that panics (the recoverer outside answers 500).
	h := m.CountIntake(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("do") {
		case "401":
			w.WriteHeader(http.StatusUnauthorized)
		case "202":
			w.WriteHeader(http.StatusAccepted)
			w.WriteHeader(http.StatusConflict) // superfluous: the first status counts
		case "body":
			_, _ = w.Write([]byte("{}"))
		case "panic":
			panic("boom")
		}
	}))
	recoverer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		h.ServeHTTP(w, r)
	})
	for _, do := range []string{"401", "401", "202", "body", "panic"} {
		recoverer.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/notifications?do="+do, nil))
	}
	for code, want := range map[string]float64{"401": 2, "202": 1, "200": 1, "500": 1, "409": 0} {
		if v, _ := value(t, m, "herald_intake_responses_total", map[string]string{"code": code}); v != want {
			t.Errorf("herald_intake_responses_total{code=%s} = %v, want %v", code, v, want)
		}
	}
}

func TestNilMetricsIsSafe(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	m.Declare(metrics.Known{Providers: []string{"p"}})
	m.Delivery(heraldtype.LaneAlert, heraldtype.ChannelSMS, heraldtype.DeliverySending)
	m.Alert(alert.Parked)
	m.Redriven(heraldtype.LaneAlert, store.UnownedRetryWait)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	rec := httptest.NewRecorder()
	m.CountIntake(next).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusTeapot {
		t.Errorf("nil metrics' CountIntake answered %d, want the handler's 418", rec.Code)
	}
}
