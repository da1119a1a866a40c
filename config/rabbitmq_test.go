package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/heraldtype"
)

const rabbitBase = "transport: rabbitmq\nrabbitmq_url: amqp://guest:guest@127.0.0.1:5672/herald\n"

func TestRabbitMQBlockDefaultsAndOverrides(t *testing.T) {
	t.Parallel()
	text := strings.Replace(base, "transport: db\n", rabbitBase, 1) +
		"lanes:\n  alert: {concurrency: 5}\nrabbitmq:\n  prefetch: {transactional: 99}\n  relay_batch: 200\n  single_active_consumer: true\n"
	c, err := config.Load(writeFile(t, text), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	r := c.RabbitMQ
	if r.RelayBatch != 200 || !r.SingleActiveConsumer || r.RelayInFlight != 4 || r.ConfirmTimeout.D() != 5*time.Second ||
		r.DeliveryLimit != 20 || r.Prefix != "herald" {
		t.Fatalf("rabbitmq block %+v", r)
	}
	if c.LanePrefetch(heraldtype.LaneTransactional) != 99 || c.LanePrefetch(heraldtype.LaneAlert) != 5 {
		t.Fatalf("prefetch %v, want transactional 99 and alert = its concurrency 5", r.Prefetch)
	}
	// The publish window, unless set: four times the lane's prefetch, at
	// least 256, with a reserve (transactional's default, 2 of 32); twice,
	// at least 128, without (alert's 5 / 16 rounds to none).
	if w, a := c.LanePublishWindow(heraldtype.LaneTransactional), c.LanePublishWindow(heraldtype.LaneAlert); w != 396 || a != 128 {
		t.Fatalf("publish windows transactional %d, alert %d; want 396 and 128", w, a)
	}
	c.Lanes[string(heraldtype.LaneAlert)] = config.Lane{Concurrency: 5, Reserve: new(1)}
	if a := c.LanePublishWindow(heraldtype.LaneAlert); a != 256 {
		t.Fatalf("publish window of alert with a reserve %d, want 256", a)
	}
	for _, tc := range []struct {
		set  string
		want int
	}{{"-1", 0}, {"500", 500}} {
		c, err := config.Load(writeFile(t, text+"  publish_window: "+tc.set+"\n"), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if w := c.LanePublishWindow(heraldtype.LaneTransactional); w != tc.want {
			t.Errorf("publish_window %s: window %d, want %d", tc.set, w, tc.want)
		}
	}
	if _, err := config.Load(writeFile(t, text+"  publish_window: -2\n"), noEnv); err == nil || !strings.Contains(err.Error(), "rabbitmq.publish_window") {
		t.Errorf("publish_window -2: %v, want an error naming rabbitmq.publish_window", err)
	}
}

func TestRabbitMQBlockErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	rb := strings.Replace(base, "transport: db\n", rabbitBase, 1)
	for _, tc := range []struct {
		name string
		text string
		want []string
	}{
		{"PrefetchOfNoLane", rb + "rabbitmq:\n  prefetch: {bulk: 4}\n", []string{"rabbitmq.prefetch.bulk", "not a lane"}},
		{"PrefetchZeroIsDefaultButNegativeIsNot", rb + "rabbitmq:\n  prefetch: {alert: -1}\n", []string{"rabbitmq.prefetch.alert"}},
		{"RelayBatchTooBig", rb + "rabbitmq:\n  relay_batch: 20000\n", []string{"rabbitmq.relay_batch"}},
		{"ConfirmTimeoutNotShorterThanLease", rb + "lease: 5s\nrabbitmq:\n  confirm_timeout: 5s\n", []string{"rabbitmq.confirm_timeout", "lease"}},
		{"PrefixWithSpaces", rb + "rabbitmq:\n  prefix: my herald\n", []string{"rabbitmq.prefix"}},
		{"UnknownKey", rb + "rabbitmq:\n  prefetch_count: 4\n", []string{"rabbitmq.prefetch_count"}},
		{"ConfirmTimeoutInWords", rb + "rabbitmq:\n  confirm_timeout: soon\n", []string{"rabbitmq.confirm_timeout", "not a duration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(writeFile(t, tc.text), noEnv)
			if err == nil {
				t.Fatalf("Load accepted:\n%s", tc.text)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
