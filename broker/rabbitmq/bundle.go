package rabbitmq

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald/heraldtype"
)

// Bundles: several jobs in one message.
//
// A quorum queue's work is mostly per message, whatever its size: a bare
// client publishing the relay's messages with confirms cost RabbitMQ 32–42
// µs of CPU a message, and the same jobs sixteen to a message 3.4 µs a job.
// At the relay's drain the broker took about half of the two cores, so the
// relay publishes the rows of a claim in bundles (PublisherConfig.Bundle)
// and a bundle is confirmed, delivered and acked as one message.
//
// Only a relay's first publish is a bundle. The consumer hands each of a
// bundle's jobs to the sender on its own (each takes a slot, as a message
// of one job does) and acks the bundle once every job is settled: a retry,
// a park or a backoff is a copy of that one job (TypeJob), published and
// confirmed before the ack, as for a message of one job. If a job's copy
// could not be published, the bundle is nacked back to its queue.
//
// A bundle the broker delivers again (a consumer died holding it, or it
// was nacked back) is split: the consumer republishes each job as a
// message of its own to the queue it came from, marked HeaderRedelivered,
// waits for the confirms and acks the bundle. The jobs that had been sent
// meet the deliveries' claim, which refuses them, as any copy. So a bundle
// is handed to senders at most once as a bundle, and the broker's delivery
// limit, which would park the bundle whole, is met only by single jobs.
//
// The body is JSON, {"jobs": [{"message_id", "tenant", "outbox_token",
// "job"}]}, each "job" the body a message of one job would have. A herald
// built before bundles parks a bundle it reads as MALFORMED_BODY; requeued
// from the parking queue once every process is upgraded, it is sent.
type bundleBody struct {
	Jobs []bundleEntry `json:"jobs"`
}

type bundleEntry struct {
	MessageID   string          `json:"message_id"`
	Tenant      string          `json:"tenant"`
	OutboxToken int64           `json:"outbox_token,omitempty"`
	Job         json.RawMessage `json:"job"`
}

// maxBundleBytes bounds a bundle's body; a job that would take a bundle
// past it starts the next one.
const maxBundleBytes = 256 << 10

// DefaultBundle is how many jobs a relay puts in one message unless
// PublisherConfig.Bundle says otherwise.
const DefaultBundle = 16

// errNotBundle: a TypeBundle message whose body is not a bundle.
var errNotBundle = errors.New("rabbitmq: not a bundle of jobs")

// bundler cuts a relay's batch into messages.
type bundler struct {
	max int // jobs a message
	now time.Time
}

// next returns the message that starts at jobs[0] and how many jobs it
// carries: a message of one job (JobMessage) when only one fits, else a
// bundle of up to b.max. A job that cannot be encoded is returned alone
// with its error.
func (b bundler) next(jobs []heraldtype.Job) (amqp.Publishing, int, error) {
	first, err := json.Marshal(jobs[0])
	if err != nil || b.max < 2 || len(jobs) == 1 {
		msg, err := jobMessage(jobs[0], first, err, b.now)
		return msg, 1, err
	}
	body := make([]byte, 0, min(len(jobs), b.max)*(len(first)+96)+16)
	body = append(body, `{"jobs":[`...)
	n := 0
	for i := range min(len(jobs), b.max) {
		raw, before := first, len(body)
		if i > 0 {
			if raw, err = json.Marshal(jobs[i]); err != nil {
				break // this job goes alone, in the next message
			}
			body = append(body, ',')
		}
		body = appendEntry(body, jobs[i], raw)
		if i > 0 && len(body)+2 > maxBundleBytes {
			body = body[:before] // it starts the next message
			break
		}
		n++
	}
	body = append(body, "]}"...)
	if n == 1 {
		msg, err := jobMessage(jobs[0], first, nil, b.now)
		return msg, 1, err
	}
	return amqp.Publishing{
		Headers:      amqp.Table{HeaderTenant: jobs[0].Tenant},
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    jobs[0].MessageID + "+" + strconv.Itoa(n-1),
		Timestamp:    b.now,
		Type:         TypeBundle,
		Body:         body,
	}, n, nil
}

// appendEntry appends job's bundle entry, raw being its JSON.
func appendEntry(body []byte, job heraldtype.Job, raw []byte) []byte {
	body = append(body, `{"message_id":`...)
	body = appendString(body, job.MessageID)
	body = append(body, `,"tenant":`...)
	body = appendString(body, job.Tenant)
	if job.Outbox != nil && job.Outbox.Token > 0 {
		body = append(body, `,"outbox_token":`...)
		body = strconv.AppendInt(body, job.Outbox.Token, 10)
	}
	body = append(body, `,"job":`...)
	body = append(body, raw...)
	return append(body, '}')
}

// appendString appends s as a JSON string, as encoding/json writes it: a
// string of printable ASCII that needs no escape (message ids and tenants
// as herald makes them) is copied between quotes, without json.Marshal's
// allocation; anything else is left to json.Marshal.
func appendString(body []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(body, q...)
		}
	}
	body = append(body, '"')
	body = append(body, s...)
	return append(body, '"')
}

// bundleJobs returns a bundle's jobs as the deliveries a message of one
// job each would have been: d's properties and headers, with the job's
// body, message id, tenant and outbox token.
func bundleJobs(d amqp.Delivery) ([]amqp.Delivery, error) {
	var b bundleBody
	if err := json.Unmarshal(d.Body, &b); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotBundle, err)
	}
	if len(b.Jobs) == 0 {
		return nil, fmt.Errorf("%w: no jobs", errNotBundle)
	}
	out := make([]amqp.Delivery, len(b.Jobs))
	for i, e := range b.Jobs {
		if e.MessageID == "" || len(e.Job) == 0 {
			return nil, fmt.Errorf("%w: job %d has no message id or body", errNotBundle, i)
		}
		h := make(amqp.Table, len(d.Headers)+2)
		maps.Copy(h, d.Headers)
		h[HeaderTenant] = e.Tenant
		delete(h, HeaderOutboxToken)
		if e.OutboxToken > 0 {
			h[HeaderOutboxToken] = e.OutboxToken
		}
		sub := d
		sub.Headers, sub.Body, sub.MessageId, sub.Type = h, e.Job, e.MessageID, TypeJob
		out[i] = sub
	}
	return out, nil
}
