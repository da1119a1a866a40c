package sender_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/alert"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/metrics"
	"github.com/heraldhq/herald/metrics/metricstest"
	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/sender"
)

// TestDeliveriesTotalCountsStateEntries: a delivery that is retried twice
// and then accepted adds one to each state each time it enters it (SENDING
// 3, RETRY_WAIT 2, PROVIDER_ACCEPTED 1), and nothing for copies that found
// it waiting or finished; the terminal states sum to the one delivery.
func TestDeliveriesTotalCountsStateEntries(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	m := metrics.New(nil)
	m.Declare(metrics.Known{Channels: map[heraldtype.Lane][]heraldtype.Channel{heraldtype.LaneTransactional: {heraldtype.ChannelWebhook}}})
	snd.Metrics = m
	var calls atomic.Int64
	b.sims[heraldtype.ChannelWebhook].OnCall(func(context.Context, provider.Message) provider.Outcome {
		if calls.Add(1) <= 2 {
			return provider.NotSentOutcome("HTTP_429", 0)
		}
		return provider.AcceptedOutcome("")
	})
	j := job("n1", heraldtype.ChannelWebhook)
	for i, delay := range []time.Duration{time.Second, 10 * time.Minute} {
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Retry || r.Delay != delay {
			t.Fatalf("attempt %d: %+v, want Retry after %s", i+1, r, delay)
		}
		// A copy that comes before the retry is due writes nothing.
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Retry {
			t.Fatalf("early copy after attempt %d: %+v", i+1, r)
		}
		b.clk.Advance(delay)
	}
	if r := snd.Send(b.ctx, j); r.State != heraldtype.DeliveryProviderAccepted {
		t.Fatalf("third attempt: %+v, want PROVIDER_ACCEPTED", r)
	}
	// A copy after the end (a broker redelivery) writes nothing either.
	if r := snd.Send(b.ctx, j); r.Verdict != sender.Done {
		t.Fatalf("late copy: %+v", r)
	}

	got := metricstest.Deliveries(t, m)
	want := map[string]float64{"SENDING": 3, "RETRY_WAIT": 2, "PROVIDER_ACCEPTED": 1}
	terminal := 0.0
	for _, s := range metrics.DeliveryStates {
		key := "transactional/webhook/" + string(s)
		v, ok := got[key]
		if !ok {
			t.Errorf("herald_deliveries_total{%s} is not exported", key)
		}
		if v != want[string(s)] {
			t.Errorf("herald_deliveries_total{%s} = %v, want %v", key, v, want[string(s)])
		}
		if s.Terminal() {
			terminal += v
		}
	}
	if terminal != 1 {
		t.Errorf("terminal states sum to %v, want 1 (the one delivery finished)", terminal)
	}
	if len(got) != len(metrics.DeliveryStates) {
		t.Errorf("%d series, want %d: %v", len(got), len(metrics.DeliveryStates), got)
	}
}

func newJSONLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, nil))
}

// logRecords decodes JSON log lines.
func logRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// TestRetryWaitIsLogged: each move to RETRY_WAIT logs, at warn level, the
// message id, tenant, lane, channel, attempt, reason code and next attempt
// time, and nothing of the recipient.
func TestRetryWaitIsLogged(t *testing.T) {
	t.Parallel()
	snd, b := setup(t, sender.Hooks{})
	var buf bytes.Buffer
	snd.Logger = newJSONLogger(&buf)
	force(b.sims[heraldtype.ChannelWebhook], provider.NotSentOutcome("CONNECTION_REFUSED", 0))
	j := job("n1", heraldtype.ChannelWebhook)
	var wantNext []string
	for _, delay := range []time.Duration{time.Second, 10 * time.Minute} {
		wantNext = append(wantNext, b.clk.Now().Add(delay).UTC().Format(time.RFC3339Nano))
		if r := snd.Send(b.ctx, j); r.Verdict != sender.Retry {
			t.Fatalf("%+v, want Retry", r)
		}
		b.clk.Advance(delay)
	}
	var got []map[string]any
	for _, rec := range logRecords(t, &buf) {
		if rec["msg"] == "sender: delivery waits for a retry" {
			got = append(got, rec)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d retry-wait log lines, want 2:\n%s", len(got), buf.String())
	}
	for i, rec := range got {
		want := map[string]any{
			"level": "WARN", "message_id": j.MessageID, "tenant": "t1", "lane": "transactional", "channel": "webhook",
			"attempt": float64(i + 1), "reason": "CONNECTION_REFUSED", "next_attempt_at": wantNext[i],
		}
		for k, v := range want {
			if rec[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i+1, k, rec[k], v, rec)
			}
		}
	}
	for _, rec := range got {
		if _, ok := rec["recipient"]; ok {
			t.Errorf("the retry-wait line names the recipient: %v", rec)
		}
	}
	if strings.Contains(buf.String(), "Paid") {
		t.Errorf("the log holds the rendered text:\n%s", buf.String())
	}
}

// TestParkingRaisesAnAlert: every pre-check that parks a message raises a
// PARKED alert with its message id, tenant and reason code, and counts one
// PARKED entry, once: neither a copy that peeks and finds it parked nor one
// that skips the peek (a relay's re-publish on rabbitmq) and parks it again
// raises or counts anything more.
func TestParkingRaisesAnAlert(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*heraldtype.Job)
		reason string
	}{
		{"UnknownKind", func(j *heraldtype.Job) { j.Kind = "gone" }, heraldtype.ReasonUnknownKind},
		{"TemplateFails", func(j *heraldtype.Job) { j.Params = json.RawMessage(`{}`) }, heraldtype.ReasonTemplateFailed},
		{"MessageIDTooLong", func(j *heraldtype.Job) { j.MessageID = strings.Repeat("x", 101) }, heraldtype.ReasonMessageIDTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snd, b := setup(t, sender.Hooks{})
			m := metrics.New(nil)
			snd.Metrics = m
			j := job("n1", heraldtype.ChannelWebhook)
			tc.change(&j)
			if r := snd.Send(b.ctx, j); r.Verdict != sender.Park || r.Reason != tc.reason {
				t.Fatalf("%+v, want Park(%s)", r, tc.reason)
			}
			// A copy that finds it parked, and one that skips the peek and
			// reaches the pre-checks again, raise nothing more.
			for _, known := range []heraldtype.Known{{Delivery: true}, {Delivery: false}} {
				j.Known = &known
				if r := snd.Send(b.ctx, j); r.Verdict != sender.Park || r.State != heraldtype.DeliveryParked || r.Reason != tc.reason {
					t.Fatalf("copy (peek %t): %+v, want Park(%s)", known.Delivery, r, tc.reason)
				}
			}
			if a := wantAlerts(t, b, j, alert.Parked); a[0].Reason != tc.reason {
				t.Errorf("alert reason %q, want %s", a[0].Reason, tc.reason)
			}
			if got := metricstest.Deliveries(t, m)["transactional/webhook/PARKED"]; got != 1 {
				t.Errorf("herald_deliveries_total{state=PARKED} = %v, want 1", got)
			}
			if got := metricstest.Series(t, m, "herald_alerts_total", "kind")[alert.Parked]; got != 1 {
				t.Errorf("herald_alerts_total{kind=PARKED} = %v, want 1", got)
			}
		})
	}
}
