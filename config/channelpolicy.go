package config

import (
	"fmt"

	"github.com/heraldhq/herald/heraldtype"
)

// The channel policies a kind may name (Kind.Policy; package fallback).
const (
	// PolicyAll sends on every channel the kind lists, at once (seed 003's
	// fraud alert goes by push and SMS). The default.
	PolicyAll = "all"
	// PolicyFirst sends on the first channel of the list the recipient can
	// receive on at send time, and on the next one only after a definite
	// failure of the one before.
	PolicyFirst = "first"
)

// FirstAvailable reports whether the kind's channels are a fallback chain
// (policy first) rather than sends made at once (all, or no policy).
func (k Kind) FirstAvailable() bool { return k.Policy == PolicyFirst }

func (c *Config) validateChannelPolicy() error {
	if err := ValidateChannelPolicies(c.Kinds); err != nil {
		if c.kindsFrom != "" {
			return fmt.Errorf("config: %s: %w", c.kindsFrom, err)
		}
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// ValidateChannelPolicies checks each kind's policy: empty (all), all, or
// first with at least two channels besides the inbox. The inbox is never
// a step of a chain: intake writes the item with the notification, so it
// is there whatever the channels do, and a chain whose first step were
// the inbox would never go on. A first kind may still list it, anywhere:
// the item is written and the other channels form the chain in their
// order. Errors name the key (kinds[2].policy).
func ValidateChannelPolicies(kinds []Kind) error {
	for i, k := range kinds {
		key := fmt.Sprintf("kinds[%d].policy", i)
		switch k.Policy {
		case "", PolicyAll:
		case PolicyFirst:
			steps := 0
			for _, ch := range k.Channels {
				if heraldtype.Channel(ch) != heraldtype.ChannelInbox {
					steps++
				}
			}
			if steps < 2 {
				return fmt.Errorf("%s: first needs at least two channels besides the inbox to choose from (kind %q has %d)", key, k.Name, steps)
			}
		default:
			return fmt.Errorf("%s: %q is not one of all, first", key, k.Policy)
		}
	}
	return nil
}
