package rabbitmq

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/heraldtype"
)

func bundleTestJobs(n int, params string) []heraldtype.Job {
	jobs := make([]heraldtype.Job, n)
	for i := range jobs {
		id := fmt.Sprintf("ntf_%03d", i)
		jobs[i] = heraldtype.Job{
			MessageID: id + ".webhook", OutboxID: int64(i + 1), NotificationID: id, Tenant: fmt.Sprintf("t%d", i%3),
			Recipient: "r", EventID: id, Kind: "pay", Lane: heraldtype.LaneTransactional, Channel: heraldtype.ChannelWebhook,
			Params: json.RawMessage(params),
			Outbox: &heraldtype.Fence{ID: int64(i + 1), NotificationID: id, Channel: heraldtype.ChannelWebhook, Token: int64(100 + i)},
		}
	}
	return jobs
}

// cut is what the bundler makes of jobs: each message and the jobs it carries.
func cut(t *testing.T, b bundler, jobs []heraldtype.Job) (msgs []amqp.Publishing, counts []int, errs []error) {
	t.Helper()
	for i := 0; i < len(jobs); {
		msg, n, err := b.next(jobs[i:])
		if n < 1 {
			t.Fatalf("next took %d jobs", n)
		}
		msgs, counts, errs = append(msgs, msg), append(counts, n), append(errs, err)
		i += n
	}
	return msgs, counts, errs
}

// A bundle read back gives each job the delivery a message of its own
// would have had: its body, id, tenant and outbox token, and the bundle's
// other properties.
func TestBundleCarriesEachJobAsItsOwnMessageWould(t *testing.T) {
	jobs := bundleTestJobs(40, `{"amount":"1,000 원"}`)
	jobs[1].Tenant = "clinic \"서울\"\x01\u2028" // quotes, a control character: still JSON
	now := time.Now()
	msgs, counts, errs := cut(t, bundler{max: 16, now: now}, jobs)
	if fmt.Sprint(counts) != "[16 16 8]" {
		t.Fatalf("jobs a message %v, want [16 16 8]", counts)
	}
	k := 0
	for m, msg := range msgs {
		if errs[m] != nil || msg.Type != TypeBundle || msg.DeliveryMode != amqp.Persistent {
			t.Fatalf("message %d: type %q, mode %d, error %v", m, msg.Type, msg.DeliveryMode, errs[m])
		}
		d := amqp.Delivery{Body: msg.Body, Type: msg.Type, MessageId: msg.MessageId, Headers: msg.Headers,
			Timestamp: msg.Timestamp, Exchange: "herald", RoutingKey: "transactional", DeliveryTag: 7}
		subs, err := bundleJobs(d)
		if err != nil || len(subs) != counts[m] {
			t.Fatalf("message %d read back as %d jobs (%v), want %d", m, len(subs), err, counts[m])
		}
		for _, sub := range subs {
			want, err := JobMessage(jobs[k], now)
			if err != nil {
				t.Fatal(err)
			}
			if string(sub.Body) != string(want.Body) || sub.MessageId != want.MessageId || sub.Type != TypeJob {
				t.Errorf("job %d: %s %q %q, want %s %q", k, sub.Body, sub.MessageId, sub.Type, want.Body, want.MessageId)
			}
			if sub.Headers[HeaderTenant] != jobs[k].Tenant || sub.Headers[HeaderOutboxToken] != jobs[k].Outbox.Token {
				t.Errorf("job %d headers %v", k, sub.Headers)
			}
			if sub.DeliveryTag != 7 || sub.RoutingKey != "transactional" || !sub.Timestamp.Equal(now) {
				t.Errorf("job %d: the bundle's delivery properties not kept: %+v", k, sub)
			}
			k++
		}
	}
}

// One job is a message of one job, as is a bundle of 1; a bundle stops
// before its body passes maxBundleBytes; a job that cannot be encoded
// goes alone, with its error, and the bundle before it ends there.
func TestBundleCuts(t *testing.T) {
	_, counts, _ := cut(t, bundler{max: 16}, bundleTestJobs(1, `{}`))
	if fmt.Sprint(counts) != "[1]" {
		t.Errorf("one job: %v", counts)
	}
	msgs, counts, _ := cut(t, bundler{max: 1}, bundleTestJobs(3, `{}`))
	if fmt.Sprint(counts) != "[1 1 1]" || msgs[0].Type != TypeJob || msgs[0].MessageId != "ntf_000.webhook" {
		t.Errorf("bundles of 1: %v, first %q %q", counts, msgs[0].Type, msgs[0].MessageId)
	}
	big := `{"text":"` + strings.Repeat("가", 20<<10) + `"}` // 60 KiB
	msgs, counts, _ = cut(t, bundler{max: 16}, bundleTestJobs(10, big))
	if fmt.Sprint(counts) != "[4 4 2]" {
		t.Errorf("60 KiB jobs: %v, want [4 4 2]", counts)
	}
	for _, m := range msgs {
		if len(m.Body) > maxBundleBytes {
			t.Errorf("a body of %d bytes", len(m.Body))
		}
	}
	jobs := bundleTestJobs(6, `{}`)
	jobs[3].Params = json.RawMessage(`{not json`)
	msgs, counts, errs := cut(t, bundler{max: 16}, jobs)
	if fmt.Sprint(counts) != "[3 1 2]" || errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("a job that cannot be encoded: %v %v", counts, errs)
	}
	if msgs[0].MessageId != "ntf_000.webhook+2" {
		t.Errorf("bundle id %q", msgs[0].MessageId)
	}
}

// A bundle whose body is not one is no bundle: the consumer parks it.
func TestBundleJobsRefusesWhatIsNotABundle(t *testing.T) {
	for _, body := range []string{``, `[]`, `{"jobs":[]}`, `{"jobs":[{"message_id":"","job":{}}]}`, `{"jobs":[{"message_id":"m"}]}`, `{"message_id":"m"}`} {
		if _, err := bundleJobs(amqp.Delivery{Body: []byte(body), Type: TypeBundle}); !errors.Is(err, errNotBundle) {
			t.Errorf("%q: %v, want errNotBundle", body, err)
		}
	}
}

// appendString's copy of a plain string is what json.Marshal writes, and
// a string that needs escapes (or HTML's) is json.Marshal's own.
func TestAppendStringWritesWhatJSONDoes(t *testing.T) {
	for _, s := range []string{"", "ntf_01M98.webhook", "tenant-1", "a b~", `q"uote`, `back\slash`, "<a>&b", "\x01\x1f\x7f",
		"서울", "\u2028", "\xff"} {
		want, _ := json.Marshal(s)
		if got := appendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendString(%q) = %s, want x%s", s, got, want)
		}
	}
}
