package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/store"
)

// unknownDelivery writes a notification of tenant with a webhook send
// whose call ended UNKNOWN, and returns its message id.
func (db recountDB) unknownDelivery(t *testing.T, tenant string) string {
	t.Helper()
	ctx := context.Background()
	id := ids.New("ntf", time.Now())
	if _, err := db.Store.NotificationCreate(ctx, store.NotificationCreateParams{
		Tenant: tenant, ID: id, Recipient: "r1", EventID: id, Kind: "order.shipped", Lane: heraldtype.LaneTransactional,
		Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
	}); err != nil {
		t.Fatal(err)
	}
	mid := store.MessageID(id, heraldtype.ChannelWebhook)
	if res, err := db.Store.DeliveryClaim(ctx, store.DeliveryClaimParams{MessageID: mid, NotificationID: id, Tenant: tenant,
		Channel: heraldtype.ChannelWebhook, Provider: "hooks", Owner: "w"}); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if res, err := db.Store.DeliveryRecord(ctx, store.DeliveryRecordParams{MessageID: mid, Attempt: 1, State: heraldtype.DeliveryUnknown,
		Reason: "TIMEOUT_AFTER_WRITE", Owner: "w", Class: "unknown", StartedAt: time.Now()}); err != nil || !res.Recorded {
		t.Fatalf("record: %+v %v", res, err)
	}
	return mid
}

// herald unknown settle moves one UNKNOWN delivery as the operator says,
// refuses what it may not move with a one-line reason, and writes its
// audit entry under the delivery's tenant.
func TestUnknownSettleCommand(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := openRecountDB(t, driver)
			herald := func(args ...string) (int, string, string) { return cli(append(args, "--config", db.config)...) }
			mid := db.unknownDelivery(t, "t1")
			other := db.unknownDelivery(t, "t2")
			if code, out, errb := herald("unknown", "list"); code != 0 || !strings.Contains(out, mid+"  t1") ||
				!strings.Contains(out, other+"  t2") || !strings.Contains(out, "TIMEOUT_AFTER_WRITE") || !strings.Contains(out, "2 unknown\n") {
				t.Fatalf("unknown list: exit %d\n%s%s", code, out, errb)
			}
			if code, out, _ := herald("unknown", "list", "--tenant", "t2", "--limit", "1"); code != 0 || strings.Contains(out, mid) ||
				!strings.Contains(out, other) || !strings.Contains(out, "1 unknown\n") {
				t.Fatalf("t2's: exit %d\n%s", code, out)
			}
			if code, out, _ := herald("unknown", "list", "--limit", "1"); code != 0 || !strings.Contains(out, "there are more") {
				t.Fatalf("a page short of them: exit %d\n%s", code, out)
			}
			for _, c := range []struct {
				args []string
				code int
				says string
			}{
				{[]string{"unknown", "settle", mid}, 2, "--as is delivered or failed"},
				{[]string{"unknown", "settle", mid, "--as", "maybe"}, 2, `not "maybe"`},
				{[]string{"unknown", "settle", "--as", "failed"}, 2, "give one MESSAGE_ID"},
				{[]string{"unknown", "settle", mid + "x", "--as", "failed"}, 1, "no delivery has that message id"},
				{[]string{"unknown", "settle", mid, "--as", "failed", "--tenant", "t2"}, 1, "no delivery of tenant t2"},
			} {
				if code, _, errb := herald(c.args...); code != c.code || !strings.Contains(errb, c.says) || strings.Count(strings.TrimSpace(errb), "\n") > 2 {
					t.Errorf("herald %s: exit %d, %q; want %d saying %q", strings.Join(c.args, " "), code, errb, c.code, c.says)
				}
			}
			code, out, errb := herald("unknown", "settle", mid, "--as", "failed")
			if code != 0 || !strings.Contains(out, mid+": PERMANENT_FAILURE(SETTLED_FAILED), was UNKNOWN (tenant t1)") {
				t.Fatalf("settle: exit %d\n%s%s", code, out, errb)
			}
			d, err := db.Store.DeliveryGet(context.Background(), mid)
			if err != nil || d.State != heraldtype.DeliveryPermanentFailure || d.Reason != "SETTLED_FAILED" {
				t.Fatalf("delivery after the settle: %+v %v", d, err)
			}
			if code, out, _ := herald("unknown", "settle", mid, "--as", "failed"); code != 0 || !strings.Contains(out, mid+": already PERMANENT_FAILURE(SETTLED_FAILED)") {
				t.Errorf("the same settle again: exit %d, %q", code, out)
			}
			if code, _, errb := herald("unknown", "settle", mid, "--as", "delivered"); code != 1 || !strings.Contains(errb, "this one is PERMANENT_FAILURE") {
				t.Errorf("a second settle: exit %d, %q", code, errb)
			}
			if code, out, _ := herald("unknown", "list", "--tenant", "t1"); code != 0 || strings.Contains(out, mid) || !strings.Contains(out, "0 unknown\n") {
				t.Fatalf("t1's after the settle: exit %d\n%s", code, out)
			}
			entries, err := db.Store.AuditList(context.Background(), store.AuditListParams{Tenant: "t1", Limit: 10})
			if err != nil || len(entries) != 1 || entries[0].Action != "delivery.settle" || entries[0].Target != mid ||
				entries[0].Detail != `{"failed":1}` || !strings.HasPrefix(entries[0].ActorKey, "cli:") {
				t.Fatalf("audit entries of t1: %+v %v; want one delivery.settle", entries, err)
			}
		})
	}
}

// A database named by HERALD_DATABASE without --config or
// HERALD_TRANSPORT: herald parked, on the default transport db, says what
// it cannot see on a rabbitmq deployment; with --config it does not.
func TestParkedWithoutConfigSaysWhatDBMeans(t *testing.T) {
	db := openRecountDB(t, "sqlite")
	t.Setenv("HERALD_DATABASE", db.Database)
	const note = "on a rabbitmq deployment they are in the broker"
	if code, _, errb := cli("parked", "list"); code != 0 || !strings.Contains(errb, note) {
		t.Fatalf("parked list without --config: exit %d, %q", code, errb)
	}
	if code, _, errb := cli("parked", "list", "--config", db.config); code != 0 || strings.Contains(errb, note) {
		t.Fatalf("parked list with --config: exit %d, %q", code, errb)
	}
}
