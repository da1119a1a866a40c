package e2e

// Helpers for the tests that hold the README's operator-facing promises
// (observability_test.go, cli_test.go): a scripted webhook provider, raw
// API calls, the CLI as a child process, and parsers for herald's log lines
// and its Prometheus exposition.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/heraldhq/herald/internal/testenv"
)

// sinkCall is the body herald's webhook provider POSTs.
type sinkCall struct {
	MessageID string `json:"message_id"`
	Recipient string `json:"recipient"`
	Kind      string `json:"kind"`
	Channel   string `json:"channel"`
	Title     string `json:"title"`
	Body      string `json:"body"`
}

// sinkAnswer is how a scriptedSink answers one call.
type sinkAnswer struct {
	status     int
	retryAfter string
}

// scriptedSink is a webhook provider that answers each call as its script
// says, given the call and how many calls its message id had before (0 for
// the first), and records every call. Error answers echo the request body,
// as some providers do, so a herald that logged raw provider answers would
// leak what it sent.
type scriptedSink struct {
	script func(c sinkCall, before int) sinkAnswer

	mu    sync.Mutex
	calls []sinkCall
	per   map[string]int
}

// newScriptedSink starts a scriptedSink; it is closed when the test ends.
func newScriptedSink(t *testing.T, script func(c sinkCall, before int) sinkAnswer) (*scriptedSink, string) {
	t.Helper()
	k := &scriptedSink{script: script, per: map[string]int{}}
	srv := httptest.NewServer(k)
	t.Cleanup(srv.Close)
	return k, srv.URL
}

func (k *scriptedSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	var c sinkCall
	if err != nil || json.Unmarshal(raw, &c) != nil || c.MessageID == "" || r.Header.Get("Idempotency-Key") != c.MessageID {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	k.mu.Lock()
	before := k.per[c.MessageID]
	k.per[c.MessageID]++
	k.calls = append(k.calls, c)
	k.mu.Unlock()
	a := k.script(c, before)
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.WriteHeader(a.status)
	if a.status >= 300 {
		_, _ = fmt.Fprintf(w, "rejected: %s", raw)
	}
}

// count is the number of calls made for messageID.
func (k *scriptedSink) count(messageID string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.per[messageID]
}

// snapshot returns every call so far and the calls per message id.
func (k *scriptedSink) snapshot() ([]sinkCall, map[string]int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	per := make(map[string]int, len(k.per))
	for id, n := range k.per {
		per[id] = n
	}
	return append([]sinkCall(nil), k.calls...), per
}

// apiDo makes one API request (no retries) and returns the status and body.
// body is sent as is when it is []byte, as JSON otherwise; idemKey, when
// set, is the Idempotency-Key.
func apiDo(t *testing.T, method, addr, apiKey, path, idemKey string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode request body: %v", err)
		}
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	return resp.StatusCode, out
}

// mustAccept POSTs a notification and returns the 202's id; any other answer
// fails the test.
func mustAccept(t *testing.T, addr, apiKey, idemKey string, body any) string {
	t.Helper()
	code, out := apiDo(t, http.MethodPost, addr, apiKey, "/v1/notifications", idemKey, body)
	var a struct{ ID string }
	if code != http.StatusAccepted || json.Unmarshal(out, &a) != nil || a.ID == "" {
		t.Fatalf("POST %s answered %d %s, want 202 with an id", idemKey, code, out)
	}
	return a.ID
}

// apiDelivery is one entry of GET /v1/notifications/{id}.
type apiDelivery struct {
	MessageID string `json:"message_id"`
	Channel   string `json:"channel"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	Attempts  int    `json:"attempts"`
}

// deliveriesOf reads the notification's deliveries, keyed by channel.
func deliveriesOf(t *testing.T, addr, apiKey, id string) map[string]apiDelivery {
	t.Helper()
	code, out := apiDo(t, http.MethodGet, addr, apiKey, "/v1/notifications/"+id, "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s answered %d %s", id, code, out)
	}
	var n struct{ Deliveries []apiDelivery }
	if err := json.Unmarshal(out, &n); err != nil {
		t.Fatalf("GET %s: %v in %s", id, err, out)
	}
	m := make(map[string]apiDelivery, len(n.Deliveries))
	for _, d := range n.Deliveries {
		m[d.Channel] = d
	}
	return m
}

// awaitDeliveries waits until the notification's deliveries are exactly
// want: channel → "STATE" or "STATE/REASON". It returns what it read last.
func awaitDeliveries(t *testing.T, addr, apiKey, id string, want map[string]string) map[string]apiDelivery {
	t.Helper()
	var got map[string]apiDelivery
	matches := func() bool {
		got = deliveriesOf(t, addr, apiKey, id)
		if len(got) != len(want) {
			return false
		}
		for ch, w := range want {
			d, ok := got[ch]
			if !ok {
				return false
			}
			state, reason, withReason := strings.Cut(w, "/")
			if d.State != state || (withReason && d.Reason != reason) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for !matches() {
		if time.Now().After(deadline) {
			t.Fatalf("notification %s: deliveries %+v after 30 s, want %v", id, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return got
}

// logRecord is one line of herald's slog text output, key → value.
type logRecord map[string]string

// logfmtLine matches the start of a slog text line.
var logfmtLine = regexp.MustCompile(`^time=\S+ level=[A-Z]+ msg=`)

// parseLogRecords returns the log lines of logs written by slog's text
// handler, parsed; other lines (the start-up banner) are skipped. A line
// that looks like a log line but does not parse fails the test.
func parseLogRecords(t *testing.T, logs string) []logRecord {
	t.Helper()
	var out []logRecord
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !logfmtLine.MatchString(line) {
			continue
		}
		rec, err := parseLogfmt(line)
		if err != nil {
			t.Fatalf("log line does not parse (%v): %s", err, line)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read logs: %v", err)
	}
	return out
}

// parseLogfmt splits key=value pairs; values may be Go-quoted.
func parseLogfmt(line string) (logRecord, error) {
	rec := logRecord{}
	s := line
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return rec, nil
		}
		key, rest, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			return nil, fmt.Errorf("no key=value at %q", s)
		}
		var val string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("value of %s: %w", key, err)
			}
			if val, err = strconv.Unquote(q); err != nil {
				return nil, fmt.Errorf("value of %s: %w", key, err)
			}
			rest = rest[len(q):]
		} else {
			val, rest, _ = strings.Cut(rest, " ")
			rest = " " + rest
		}
		rec[key] = val
		s = rest
	}
}

// scrapeMetrics reads GET /metrics and parses the text exposition.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := testenv.HTTP.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics answered %d: %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: not the Prometheus text format: %v", err)
	}
	return fams
}

// metricSample finds the metric of fam whose labels are exactly labels.
func metricSample(fam *dto.MetricFamily, labels map[string]string) *dto.Metric {
	if fam == nil {
		return nil
	}
next:
	for _, m := range fam.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
				continue next
			}
		}
		return m
	}
	return nil
}

// metricValue is the sampleValue of the series name{labels}; a series that
// is not there, or is of another type, reads as absent.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	m := metricSample(fams[name], labels)
	if m == nil || (m.Counter == nil && m.Gauge == nil && m.Histogram == nil) {
		return 0, false
	}
	return sampleValue(m), true
}

// sampleValue is a counter's or gauge's value, or a histogram's sample
// count (0 for a sample of any other type).
func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// labelsOf is a sample's labels, name → value.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// fmtLabels writes labels as Prometheus does: {a="x",b="y"}.
func fmtLabels(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, labels[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// cliResult is what one run of the herald CLI did.
type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runCLI runs the herald binary with args in dir (so a default ./herald.db
// would land in the test's own directory), with the HERALD_* overrides of
// the environment removed, and returns its exit code and output.
func runCLI(t *testing.T, dir string, args ...string) cliResult {
	t.Helper()
	r, err := execCLI(heraldBinary(t), dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// execCLI is runCLI for other goroutines than the test's: it returns an
// error where runCLI fails the test.
func execCLI(bin, dir string, args ...string) (cliResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	gorace := "atexit_sleep_ms=0" // a race-enabled herald would pause 1 s before every exit
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		case !strings.HasPrefix(kv, "HERALD_"):
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GORACE="+gorace)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return cliResult{}, fmt.Errorf("herald %s did not finish within 2 minutes\n%s\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
	case err != nil && !errors.As(err, &exit):
		return cliResult{}, fmt.Errorf("herald %s: %w", strings.Join(args, " "), err)
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}, nil
}

// latestMigration is the highest version among the .sql files of a store's
// migrations directory (../store/<driver>/migrations): the schema version
// `herald migrate` must report.
func latestMigration(t *testing.T, driver string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "store", driver, "migrations", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations for %s (%v)", driver, err)
	}
	latest := 0
	for _, f := range files {
		num, _, _ := strings.Cut(filepath.Base(f), "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			t.Fatalf("migration %s: no version number", f)
		}
		latest = max(latest, v)
	}
	return latest
}
