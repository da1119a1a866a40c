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
	// of the event that comes later is a new event. The purge deletes a
	// key by its age alone, whatever its owner's sends are doing, so the
	// ttl must outlast the longest a send can stay SENDING after its check
	// (its claim comes within the lease; the stale sweep ends it
	// stale_claim_after later): at least stale_claim_after. Defaults to
	// idempotency_ttl (24 hours), or stale_claim_after if that is longer.
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
		e.TTL = max(c.IdempotencyTTL, c.StaleClaimAfter)
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
	// A key purged while its owner's send may still be in flight would
	// let a second notification of the event take it and send too.
	if e.TTL.D() < c.StaleClaimAfter.D() {
		return fmt.Errorf("config: event_suppression.ttl: must be at least stale_claim_after (%s), the longest a send stays SENDING, got %s",
			c.StaleClaimAfter.D(), e.TTL.D())
	}
	return nil
}
