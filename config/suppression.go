package config

import (
	"fmt"
	"time"
)

// EventSuppression is the at-most-one-send-per-event rule (package
// suppression): one send per (tenant, recipient, event_id, kind), whatever
// idempotency or dedup keys the event came under.
//
//	event_suppression:
//	  enabled: true
//	  lease: 10m
//	  ttl: 24h
type EventSuppression struct {
	// Enabled checks each send's event key before its claim; false sends
	// every notification of an event. Defaults to true.
	Enabled *bool `yaml:"enabled"`
	// Lease is how long a notification holds its event's key on the
	// strength of its check alone, before a send of it is claimed,
	// accepted, unknown or waiting for a retry (each of which holds the
	// key as long as it stands). It must outlast the wait between the
	// check and the claim (the rate limit's, 30 seconds at most), and
	// bounds how long an event whose owner died before its claim, or
	// ended without a call, waits before another notification of it may
	// send. At least 1 minute. Defaults to 10 minutes.
	Lease Duration `yaml:"lease"`
	// TTL is how long a key is kept after its lease ended: a notification
	// of the event that comes later is a new event. Defaults to
	// idempotency_ttl (24 hours).
	TTL Duration `yaml:"ttl"`
}

// MinEventSuppressionLease bounds event_suppression.lease from below.
const MinEventSuppressionLease = time.Minute

// On reports whether the rule is on.
func (e EventSuppression) On() bool { return e.Enabled == nil || *e.Enabled }

func (c *Config) eventSuppressionDefaults() {
	e := &c.EventSuppression
	if e.Enabled == nil {
		on := true
		e.Enabled = &on
	}
	if e.Lease == 0 {
		e.Lease = Duration(10 * time.Minute)
	}
	if e.TTL == 0 {
		e.TTL = c.IdempotencyTTL
	}
}

func (c *Config) validateEventSuppression() error {
	e := c.EventSuppression
	if e.Lease.D() < MinEventSuppressionLease {
		return fmt.Errorf("config: event_suppression.lease: must be at least %s (the wait between the check and the claim), got %s",
			MinEventSuppressionLease, e.Lease.D())
	}
	if e.TTL <= 0 {
		return fmt.Errorf("config: event_suppression.ttl: must be positive, got %s", e.TTL.D())
	}
	return nil
}
