package lookup

import (
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// Fallback is a planned send's place in its notification's fallback chain
// (a kind with policy first; package fallback), and why it was or was not
// used:
//
//	{"step": 1, "decision": "FIRST"}
//	{"step": 2, "decision": "USED", "after": "PERMANENT_FAILURE"}
//	{"step": 3, "decision": "SKIPPED", "after": "PROVIDER_ACCEPTED"}
//	{"step": 2, "decision": "WAITING"}
//
// step is the channel's place in the kind's list, from 1 (the inbox is no
// step; a push step is one entry per device); decision is FIRST (sent
// without waiting), WAITING (waits for the steps before it), USED
// (released after a definite failure of the step before) or SKIPPED (not
// sent: an earlier step ended in a way that is not a definite failure);
// after is how the step before ended when that released or skipped this
// one: its state (PERMANENT_FAILURE, RETRY_EXHAUSTED, PROVIDER_ACCEPTED,
// UNKNOWN…), or its reason when it was SUPPRESSED (DESTINATION_UNAVAILABLE,
// CONSENT_DENIED, QUIET_HOURS, CANCELLED…), or EXPIRED.
type Fallback struct {
	Step     int    `json:"step"`
	Decision string `json:"decision"`
	After    string `json:"after,omitempty"`
}

// fallbackOf is dv's Fallback, nil off a chain.
func fallbackOf(dv store.DeliveryView) *Fallback {
	if dv.Fallback == nil {
		return nil
	}
	return &Fallback{Step: dv.Fallback.Step, Decision: dv.FallbackDecision(), After: dv.Fallback.After}
}

// channelPolicy is the notification's channel_policy: "first" when its
// sends are a fallback chain, else "" (omitted: all, today's behaviour).
func channelPolicy(n Notification) string {
	for _, d := range n.Deliveries {
		if d.Fallback != nil {
			return config.PolicyFirst
		}
	}
	return ""
}
