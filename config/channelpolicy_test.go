package config_test

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/config"
)

// TestChannelPolicy: a kind's policy is all (also when unset) or first,
// and first needs two channels besides the inbox; an error names the key,
// in the config file and in a kinds file.
func TestChannelPolicy(t *testing.T) {
	t.Parallel()
	i := strings.Index(base, "kinds:\n")
	// kindOf is base with one kind on channels, with policy (none when "").
	kindOf := func(policy string, channels ...string) string {
		k := "kinds:\n  - name: payment.approved\n    category: transactional\n    channels: [" + strings.Join(channels, ", ") + "]\n"
		if policy != "" {
			k += "    policy: " + policy + "\n"
		}
		k += "    templates:\n"
		for _, ch := range channels {
			k += "      " + ch + ": {title: \"Paid\", body: \"Paid\"}\n"
		}
		return base[:i] + k
	}
	for _, tc := range []struct {
		name, text string
		err        string // "" for valid
		first      bool
	}{
		{"UnsetIsAll", kindOf("", "webhook", "sms"), "", false},
		{"All", kindOf("all", "webhook", "sms"), "", false},
		{"First", kindOf("first", "webhook", "sms"), "", true},
		{"FirstWithTheInbox", kindOf("first", "inbox", "webhook", "sms"), "", true},
		{"FirstNeedsTwoChannels", kindOf("first", "webhook"), "kinds[0].policy: first needs at least two channels", false},
		{"TheInboxIsNoStep", kindOf("first", "inbox", "webhook"), "kinds[0].policy: first needs at least two channels besides the inbox", false},
		{"Unknown", kindOf("any", "webhook", "sms"), `kinds[0].policy: "any" is not one of all, first`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.Load(writeFile(t, tc.text), noEnv)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Load = %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := c.Kinds[0].FirstAvailable(); got != tc.first {
				t.Fatalf("FirstAvailable = %v, want %v", got, tc.first)
			}
		})
	}
	t.Run("KindsFile", func(t *testing.T) {
		t.Parallel()
		_, kindsPath := writeKinds(t, base, "kinds.yaml", strings.Replace(kindsText, "    channels: [webhook, sms]\n",
			"    channels: [webhook, sms]\n    policy: sometimes\n", 1))
		if _, err := config.LoadKinds(kindsPath); err == nil || !strings.Contains(err.Error(), `kinds[0].policy: "sometimes"`) {
			t.Fatalf("LoadKinds = %v, want the policy refused", err)
		}
	})
}
