package parked_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/parked"
)

func TestScopeSees(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		scope parked.Scope
		sees  map[string]bool // message tenant → seen
	}{
		{"TenantSeesOnlyItsOwn", parked.Tenant("t1"), map[string]bool{"t1": true, "t2": false, "": false}},
		{"EmptyTenantSeesNothing", parked.Tenant(""), map[string]bool{"t1": false, "": false}},
		{"ZeroScopeSeesNothing", parked.Scope{}, map[string]bool{"t1": false, "": false}},
		{"OperatorSeesEverything", parked.Operator(""), map[string]bool{"t1": true, "t2": true, "": true}},
		{"OperatorOfATenant", parked.Operator("t2"), map[string]bool{"t1": false, "t2": true, "": false}},
		{"UntenantedOnly", parked.Untenanted(), map[string]bool{"t1": false, "": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for tenant, want := range c.sees {
				if got := c.scope.Sees(tenant); got != want {
					t.Errorf("Sees(%q) = %v, want %v", tenant, got, want)
				}
			}
		})
	}
}

func TestDiscardReason(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, reason, want string
	}{
		{"Missing", "", "reason is required"},
		{"Blank", " \t\n", "reason is required"},
		{"TooLong", strings.Repeat("x", parked.MaxReasonLen+1), "501 characters, at most 500"},
		{"TooLongInCharactersNotBytes", strings.Repeat("가", parked.MaxReasonLen+1), "501 characters"},
		{"NotUTF8", "bad \xff", "not valid UTF-8"},
		{"LongestKept", strings.Repeat("가", parked.MaxReasonLen), ""},
		{"Plain", "kind retired in March", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := parked.Discard{MessageID: "m", Reason: c.reason}.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case c.want != "" && (!errors.Is(err, parked.ErrReason) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate: %v, want ErrReason saying %q", err, c.want)
			}
		})
	}
}

// Every field of the listing is present: what a message does not say is
// null, and the tenant is never shown.
func TestEntryJSONHasEveryField(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name  string
		entry parked.Entry
		want  string
	}{
		{"Job", parked.Entry{MessageID: "n1.sms", NotificationID: "n1", Tenant: "t1", Kind: "visit.followup",
			Lane: heraldtype.LaneTransactional, Channel: heraldtype.ChannelSMS, Reason: "UNKNOWN_KIND", ParkedAt: at},
			`{"message_id":"n1.sms","notification_id":"n1","kind":"visit.followup","lane":"transactional","channel":"sms","reason":"UNKNOWN_KIND","parked_at":"2030-01-02T03:04:05Z"}`},
		{"NotAJob", parked.Entry{MessageID: "garbage-1", Tenant: "t1", Reason: "MALFORMED_BODY", ParkedAt: at},
			`{"message_id":"garbage-1","notification_id":null,"kind":null,"lane":null,"channel":null,"reason":"MALFORMED_BODY","parked_at":"2030-01-02T03:04:05Z"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.entry)
			if err != nil || string(b) != c.want {
				t.Fatalf("json %s (%v), want %s", b, err, c.want)
			}
		})
	}
}
