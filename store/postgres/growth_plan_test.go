package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/store"
)

// A herald started on a new database prepares its statements while the
// tables are empty, and a pooled connection keeps each statement's generic
// plan for as long as it lives (up to an hour) while the tables grow, until
// an ANALYZE (autovacuum's, a minute or more away) invalidates it. The hot
// writes (intake's creates, the sender's and the relay's writes of claimed
// rows) must find their rows by key in a plan made then: a plan that
// scanned the outbox, cheap while it was empty, marked a relay batch
// published in 3.5 ms at 20,000 rows and in 600 ms at 100,000
// (BenchmarkEndToEndRabbitMQ, pg_stat_statements).
func TestHotWritesPlannedOnAnEmptyDatabaseFindRowsByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := planConn(t)
	// The outbox claims ("claim…") are planned on a connection of the
	// claim pool, under its settings (claimPoolConfig); the rest, the
	// delivery claims among them, on the pool's.
	claimConn, err := s.claims.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(claimConn.Release)
	connFor := func(name string) *pgxpool.Conn {
		if strings.HasPrefix(name, "claim") {
			return claimConn
		}
		return conn
	}
	now := time.Now()
	title, body, locale, mid := "t", "b", "", "n8.inbox"
	create := &createArgs{tenant: "t", key: "k", hash: "h", ttl: time.Hour, response: []byte("{}"), id: "n8", recipient: "r", event: "e",
		kind: "k", lane: "transactional", params: "{}", channels: []string{"push", "sms"}, messageIDs: []string{"n8.push", "n8.sms"},
		steps: []int32{0, 0}, inbox: inboxArgs{title: &title, body: &body, locale: &locale, messageID: &mid}, inboxAt: 1}
	other := *create
	other.id, other.key = "n9", "k9"
	settle := recordArgs{p: store.DeliveryRecordParams{MessageID: "n7.webhook", Attempt: 1, State: "UNKNOWN", Owner: "o", Class: "x",
		StartedAt: now, Outbox: &store.Fence{NotificationID: "n7", Channel: "webhook", Token: 1}}}
	settle2 := settle
	settle2.p.MessageID, settle2.p.Outbox = "n9.webhook", &store.Fence{NotificationID: "n9", Channel: "webhook", Token: 1}
	statements := map[string]struct {
		sql  string
		args []any
		want []string
	}{
		"published": {qOutboxPublished, []any{nil, []string{"n7", "n9"}, []string{"webhook", "webhook"}, []int64{1, 1}}, []string{"outbox_pkey"}},
		"extend":    {qOutboxExtend, []any{nil, time.Hour, []string{"n7"}, []string{"webhook"}, []int64{1}}, []string{"outbox_pkey"}},
		"complete":  {qOutboxComplete, []any{nil, "DONE", "", "n7", "webhook", int64(1)}, []string{"outbox_pkey"}},
		"retry":     {qOutboxRetry, []any{nil, time.Second, "", 0, "n7", "webhook", int64(1)}, []string{"outbox_pkey"}},
		"record":    {qDeliveryRecord, []any{nil, "UNKNOWN", "", nil, "n7.webhook", 1, "o", now, now, "x", 1, ""}, []string{"deliveries_message_id"}},
		"chainsettle": {qDeliveryRecordSettle, []any{nil, "UNKNOWN", "", nil, "n7.webhook", 1, "o", now, now, "x", 1, "", "n7", "webhook", int64(1)},
			[]string{"deliveries_message_id", "outbox_pkey"}},
		"create": {qNotificationCreate, create.list(), nil},
		"enqueue": {qEnqueue, []any{"t", "n10", "r5", "e", "k", "transactional", "{}", nil, nil, nil, "push,sms", "n10.push,n10.sms",
			"t", "b", "", "n10.inbox", "0,0", true, "", int16(1), ""}, nil},
		"enqueueplain": {qEnqueuePlain, []any{"t", "n11", "r5", "e", "k", "transactional", "{}", "d11", nil, nil, "sms,webhook",
			"n11.sms,n11.webhook", "0,0", true, "", ""}, nil},
		"fail":   {qOutboxFail, []any{nil, "FAILED", "", "n7", "webhook", int64(1)}, []string{"outbox_pkey"}},
		"defer":  {qOutboxDefer, []any{nil, time.Second, "", "n7", "webhook", int64(1)}, []string{"outbox_pkey"}},
		"fanout": {qCampaignFanOut, []any{"c1", int64(0), 10000, "t", "k", "marketing", "{}", nil, nil, []string{"push", "sms"}, []int32{0, 0}, ""}, nil},
		"fanoutrange": {qCampaignFanOutRange, []any{"c1", int64(0), int64(10000), "t", "k", "marketing", "{}", nil, nil, []string{"push", "sms"},
			[]int32{0, 0}, ""}, nil},
		"batches":             {qCampaignBatches, []any{"t", "c1", 10000, 2, nil}, []string{"campaigns_pkey"}},
		"peek":                {qCampaignFanOutPeek, []any{"t", "c1"}, []string{"campaigns_pkey"}},
		"lock":                {qCampaignLock, []any{"t", "c1", nil}, []string{"campaigns_pkey"}},
		"head":                {qCampaignFanOutHead, []any{"t", "c1"}, []string{"campaigns_pkey"}},
		"get":                 {qCampaignGet, []any{"t", "c1"}, []string{"campaigns_pkey"}},
		"start":               {qCampaignStart, []any{"t", "c1", nil}, []string{"campaigns_pkey"}},
		"expiredrafts":        {qCampaignsExpireDrafts, []any{100, nil}, []string{"campaigns_draft"}},
		"advanceto":           {qCampaignAdvanceTo, []any{"c1", int64(10000), 10000, nil}, nil},
		"retried":             {qDeliveryClaimRetry, []any{nil, "n7.webhook", "sim", "w"}, []string{"deliveries_message_id"}},
		"creates":             {qNotificationCreateMany, createMerge.args([]*pipeOp{{in: create}, {in: &other}}), nil},
		"claim":               {qOutboxClaim, []any{nil, "transactional", 12, "w", time.Minute, "CLAIMED", nil, "t", []string{"t"}, []string{"s"}, nil, nil}, []string{"outbox_pkey", "outbox_fair", "outbox_leased"}},
		"claimskip":           {qOutboxClaim, []any{nil, "transactional", 12, "w", time.Minute, "CLAIMED", "t", "", []string{}, []string{}, nil, nil}, []string{"outbox_pkey", "outbox_fair", "outbox_leased"}},
		"claimpublishing":     {qOutboxClaimPublishing, []any{nil, "transactional", 500, "w", time.Minute, "PUBLISHING", nil, "", []string{}, []string{}, nil, nil}, []string{"outbox_pkey", "outbox_fair", "outbox_leased"}},
		"claimpublishinggate": {qOutboxClaimPublishingProfiles, []any{nil, "transactional", 500, "w", time.Minute, "PUBLISHING", nil, "", []string{}, []string{}, nil, nil}, []string{"outbox_pkey", "outbox_fair", "outbox_leased"}},
		"claimpromote":        {qOutboxPromote, []any{"transactional", nil, store.PromoteBatch}, []string{"outbox_deferred"}},
		"backlog":             {qOutboxBacklog, []any{nil, []string{"transactional", "marketing"}}, nil},
		// The delivery claims read their notification's campaign and
		// cancel mark by its key.
		"deliveryclaims": {qDeliveryClaimMany, claimMerge.args([]*pipeOp{{in: &claimArgs{p: store.DeliveryClaimParams{MessageID: "n7.webhook",
			NotificationID: "n7", Tenant: "t", Channel: "webhook", Provider: "p", Owner: "w"}}}}), []string{"notifications_pkey"}},
		"deliveryclaimtakes": {qDeliveryClaimTakeMany, claimTakeMerge.args([]*pipeOp{{in: &claimArgs{p: store.DeliveryClaimParams{MessageID: "n7.webhook",
			NotificationID: "n7", Tenant: "t", Channel: "webhook", Provider: "p", Owner: "w",
			Event: &store.EventKeyTakeParams{Key: store.EventKey{Tenant: "t", Recipient: "r", EventID: "e7", Kind: "k"}, Owner: "n7", Lease: time.Minute}}}}}),
			[]string{"notifications_pkey"}},
		"deliveryclaim": {qDeliveryClaim, []any{nil, "n7.webhook", "n7", "t", "webhook", "p", "w"}, []string{"notifications_pkey"}},
		"deliveryclaimtake": {qDeliveryClaimTake, []any{nil, "t", "r", "e7", "k", "", "n7", time.Minute, "n7.webhook", "n7", "t", "webhook", "p", "w"},
			[]string{"notifications_pkey"}},
		"settles": {qDeliveryRecordOffChainMany, recordMerge.args([]*pipeOp{{in: &settle}, {in: &settle2}}),
			[]string{"deliveries_message_id", "outbox_pkey"}},
		"settlesnochain": {qDeliveryRecordNoChainMany, recordNoChainMerge.args([]*pipeOp{{in: &recordArgs{p: store.DeliveryRecordParams{
			MessageID: "n7.webhook", Attempt: 1, State: "UNKNOWN", Owner: "o", Class: "x", StartedAt: now, OffChain: true}}}}),
			[]string{"deliveries_message_id"}},
		"nochain": {qDeliveryRecordNoChain, []any{nil, "UNKNOWN", "", nil, "n7.webhook", 1, "o", now, now, "x", 1, ""}, []string{"deliveries_message_id"}},
		"settle": {qDeliveryRecordOffChain, []any{nil, "UNKNOWN", "", nil, "n7.webhook", 1, "o", now, now, "x", 1, "", "n7", "webhook", int64(1)},
			[]string{"deliveries_message_id", "outbox_pkey"}},
	}
	for name, q := range statements {
		prepare(t, connFor(name), "growth_"+name, q.sql)
		explainPrepared(t, connFor(name), "EXPLAIN", "growth_"+name, q.args) // its generic plan, made on the empty tables
	}
	for _, fill := range []string{
		`INSERT INTO notifications (id, tenant, recipient, event_id, kind, lane, params, created_at)
SELECT 'n' || g, 't', 'r', 'e' || g, 'k', 'transactional', '{}', now() FROM generate_series(1, 100000) g`,
		`INSERT INTO outbox (notification_id, message_id, tenant, lane, channel, state, available_at, created_at, updated_at, token, claimed_until)
SELECT id, id || '.webhook', 't', 'transactional', 'webhook', 'PUBLISHING', now(), now(), now(), 1, now() + interval '1 hour' FROM notifications`,
		`INSERT INTO deliveries (message_id, notification_id, tenant, channel, state, attempts, created_at, updated_at)
SELECT message_id, notification_id, 't', 'webhook', 'SENDING', 1, now(), now() FROM outbox`,
		`INSERT INTO profiles (tenant, recipient, data, updated_at) SELECT 't', 'r' || g, '{}', now() FROM generate_series(1, 100000) g`,
		`INSERT INTO devices (tenant, recipient, device_id, token, platform, active, created_at, updated_at)
SELECT 't', 'r' || g, 'd' || g, 'tok' || g, 'fcm', true, now(), now() FROM generate_series(1, 100000) g`,
		`INSERT INTO campaigns (id, tenant, kind, lane, channels, steps, params, state, idempotency_key, request_hash, created_at) VALUES ('c1', 't', 'k', 'marketing', '{push,sms}', '{0,0}', '{}', 'RUNNING', 'c1', 'h', now())`,
		`INSERT INTO campaign_recipients (campaign_id, recipient, notification_id) SELECT 'c1', 'r' || g, 'c1n' || g FROM generate_series(1, 100000) g`,
		`INSERT INTO inbox_counters (tenant, recipient, seq, unread) SELECT 't', 'r' || g, 1, 1 FROM generate_series(1, 100000) g`,
		`INSERT INTO idempotency_keys (tenant, key, request_hash, notification_id, response, created_at, expires_at)
SELECT 't', 'k' || g, 'h', 'n' || g, '', now(), now() + interval '1 hour' FROM generate_series(1, 100000) g`,
	} {
		if _, err := conn.Exec(ctx, fill); err != nil {
			t.Fatal(err)
		}
	}
	for name, q := range statements {
		plan := explainPrepared(t, connFor(name), "EXPLAIN", "growth_"+name, q.args)
		if strings.Contains(plan, "Seq Scan on ") {
			t.Errorf("%s, planned on the empty tables, scans a table now:\n%s", name, plan)
			continue
		}
		for _, index := range q.want {
			if !strings.Contains(plan, "Index Scan using "+index+" on ") {
				t.Errorf("%s, planned on the empty tables, does not find its rows by %s:\n%s", name, index, plan)
			}
		}
	}
}
