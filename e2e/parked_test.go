package e2e

// `herald parked` as an operator runs it, and the parked endpoints as a
// tenant calls them, on a running herald: the kind an UNKNOWN_KIND message
// names, discard (CLI and HTTP, audited, with a reason), and the operator's
// view of messages that name no tenant (rabbitmq: a body that is not a job).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/heraldhq/herald"
	"github.com/heraldhq/herald/broker/rabbitmq"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testmq"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/postgres"
	"github.com/heraldhq/herald/store/sqlite"
)

// parkedListRow is one line of `herald parked list`.
type parkedListRow struct{ messageID, tenant, kind, lane, channel, reason, parkedAt string }

// parkedListHeader is the header of `herald parked list`.
var parkedListHeader = []string{"MESSAGE_ID", "TENANT", "KIND", "LANE", "CHANNEL", "REASON", "PARKED_AT"}

// listParked runs `herald parked list` with args and parses its table:
// the line opened (which the CLI prints first: "database …, transport …\n"),
// the header, one row per message, the count.
func listParked(t *testing.T, dir, cfg, opened string, args ...string) []parkedListRow {
	t.Helper()
	r := runCLI(t, dir, append([]string{"parked", "list", "--config", cfg}, args...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) < 3 || !strings.HasPrefix(r.stdout, opened) ||
		!slices.Equal(strings.Fields(lines[1]), parkedListHeader) {
		t.Fatalf("herald parked list %v: want exit 0, the database, a header, rows and a count, got\n%s", args, r)
	}
	var rows []parkedListRow
	for _, line := range lines[2 : len(lines)-1] {
		f := strings.Fields(line)
		if len(f) != len(parkedListHeader) {
			t.Fatalf("herald parked list %v: row %q does not have %d fields\n%s", args, line, len(parkedListHeader), r)
		}
		rows = append(rows, parkedListRow{f[0], f[1], f[2], f[3], f[4], f[5], f[6]})
	}
	if want := fmt.Sprintf("%d parked", len(rows)); lines[len(lines)-1] != want {
		t.Fatalf("herald parked list %v: last line %q, want %q", args, lines[len(lines)-1], want)
	}
	return rows
}

func parkedIDs(rows []parkedListRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.messageID)
	}
	return out
}

// apiParked is GET /v1/parked as apiKey: each entry's fields, raw.
func apiParked(t *testing.T, addr, apiKey string) []map[string]any {
	t.Helper()
	code, out := apiDo(t, http.MethodGet, addr, apiKey, "/v1/parked", "", nil)
	var body struct {
		Parked []map[string]any `json:"parked"`
	}
	if code != http.StatusOK || json.Unmarshal(out, &body) != nil || body.Parked == nil {
		t.Fatalf("GET /v1/parked as %s answered %d %s", apiKey, code, out)
	}
	return body.Parked
}

// apiDiscard is POST /v1/parked/{id}/discard as apiKey with reason; it
// returns the status.
func apiDiscard(t *testing.T, addr, apiKey, id, reason string) int {
	t.Helper()
	code, out := apiDo(t, http.MethodPost, addr, apiKey, "/v1/parked/"+id+"/discard", "", map[string]string{"reason": reason})
	if code == http.StatusOK && strings.TrimSpace(string(out)) != `{"discarded":1}` {
		t.Fatalf("discard %s answered 200 %s, want {\"discarded\":1}", id, out)
	}
	return code
}

// osUser is the user the CLI records as who discarded.
func osUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// discardAudit reads the discard audit rows of database, oldest first.
func discardAudit(t *testing.T, database string) []store.ParkedDiscardEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := openStore(t, ctx, database)
	defer st.Close()
	rows, err := st.ParkedDiscardList(ctx, store.ParkedDiscardListParams{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// wantAudited checks that the audit log (herald audit list's, package
// audit) holds the parked actions want, as "actor action target @tenant"
// in the order they were done, whether done on the command line or over
// HTTP. The tenant is the message's, where the tenant's admin reads it
// (GET /v1/admin/audit), also for the operator's CLI.
func wantAudited(t *testing.T, database string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := openStore(t, ctx, database)
	defer st.Close()
	entries, err := st.AuditList(ctx, store.AuditListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range slices.Backward(entries) { // newest first in the list
		if strings.HasPrefix(e.Action, "parked.") {
			got = append(got, e.ActorName+" "+e.Action+" "+e.Target+" @"+e.Tenant)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the audit log's parked actions %q, want %q", got, want)
	}
}

// openStore opens database (sqlite:… or a PostgreSQL URL), which exists.
func openStore(t *testing.T, ctx context.Context, database string) store.Store {
	t.Helper()
	if path, ok := strings.CutPrefix(database, "sqlite:"); ok {
		s, err := sqlite.Open(ctx, path, sqlite.Options{MustExist: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, err := postgres.Open(ctx, database, postgres.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantAuditRows checks the audit rows' who, what, whose, why (in order).
func wantAuditRows(t *testing.T, got []store.ParkedDiscardEntry, want ...store.ParkedDiscardEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d discard audit rows %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i, w := range want {
		g := got[i]
		if g.Actor != w.Actor || g.MessageID != w.MessageID || g.Tenant != w.Tenant || g.ParkedReason != w.ParkedReason ||
			g.Reason != w.Reason || time.Since(g.DiscardedAt) > 10*time.Minute {
			t.Errorf("audit row %d = %+v, want %+v, discarded now", i, g, w)
		}
	}
}

// TestCLIParkedDiscard parks messages on the db transport (an application
// enqueues a kind herald's configuration lacks), lists them with their
// kind, and discards one with `herald parked discard` and one over HTTP:
// usage mistakes and other tenants' messages are refused, each discard
// ends the delivery SUPPRESSED(DISCARDED) and is audited, and neither a
// second discard nor a requeue brings it back. On SQLite and PostgreSQL.
func TestCLIParkedDiscard(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "herald.db")
		runParkedDiscard(t, "sqlite:"+path, sqliteEnqueue(path))
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		_, readmeURL := readmePostgres(t)
		runParkedDiscard(t, readmeURL, postgresEnqueue(readmeURL))
	})
}

// startParkedHerald writes parkedConfig (with extra appended) for
// database, migrates, starts herald and returns it with its directory and
// config file.
func startParkedHerald(t *testing.T, database, extra string) (srv *server, dir, cfg string) {
	t.Helper()
	_, sinkURL := newScriptedSink(t, func(sinkCall, int) sinkAnswer { return sinkAnswer{status: http.StatusOK} })
	dir = t.TempDir()
	cfg = filepath.Join(dir, "herald.yaml")
	addr := freeAddr(t)
	writeFile(t, cfg, strings.NewReplacer("$LISTEN", addr, "$DATABASE", database, "$SINK", sinkURL).Replace(parkedConfig)+extra)
	if r := runCLI(t, dir, "migrate", "--config", cfg); r.code != 0 {
		t.Fatalf("herald migrate:\n%s", r)
	}
	srv = newServer(t, cfg, addr)
	srv.start()
	return srv, dir, cfg
}

// enqueueUnknown enqueues, per tenant, a followupKind notification that
// the running herald does not know, and waits until each is PARKED
// (UNKNOWN_KIND); it returns their notification ids.
func enqueueUnknown(t *testing.T, srv *server, enqueue enqueueFunc, tenants ...string) []string {
	t.Helper()
	app, err := herald.NewClient(herald.Options{Kinds: []config.Kind{followupKind}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, tenant := range tenants {
		id := enqueue(t, app, herald.Intent{
			Tenant: tenant, Recipient: "patient-7", EventID: fmt.Sprintf("visit-%d", i), Kind: followupKind.Name,
			Params: map[string]any{"n": i}, DedupKey: fmt.Sprintf("visit-%d:followup", i),
		})
		awaitDeliveries(t, srv.addr, map[string]string{"t1": "k1", "t2": "k2"}[tenant], id,
			map[string]string{"webhook": "PARKED/UNKNOWN_KIND"})
		out = append(out, id)
	}
	return out
}

func runParkedDiscard(t *testing.T, database string, enqueue enqueueFunc) {
	srv, dir, cfg := startParkedHerald(t, database, "")
	opened := "database " + database + ", transport db\n"
	ntf := enqueueUnknown(t, srv, enqueue, "t1", "t2")
	m1, m2 := ntf[0]+".webhook", ntf[1]+".webhook"

	rows := listParked(t, dir, cfg, opened)
	if !slices.Equal(parkedIDs(rows), []string{m1, m2}) {
		t.Fatalf("herald parked list shows %v, want [%s %s]", parkedIDs(rows), m1, m2)
	}
	for _, r := range rows {
		if r.kind != followupKind.Name || r.reason != "UNKNOWN_KIND" {
			t.Errorf("herald parked list row %+v, want kind %s and reason UNKNOWN_KIND", r, followupKind.Name)
		}
	}
	for _, e := range apiParked(t, srv.addr, "k1") {
		if e["message_id"] != m1 || e["kind"] != followupKind.Name || e["notification_id"] != ntf[0] {
			t.Errorf("GET /v1/parked as t1: %v, want %s naming kind %s", e, m1, followupKind.Name)
		}
	}
	if got := listParked(t, dir, cfg, opened, "--untenanted"); len(got) != 0 {
		t.Errorf("herald parked list --untenanted on the db transport: %+v, want none", got)
	}

	discard := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, dir, append([]string{"parked", "discard", "--config", cfg}, args...)...)
	}
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{m1}, "herald: parked discard: --reason: reason is required\n"},
		{[]string{m1, "--reason", "  "}, "herald: parked discard: --reason: reason is required\n"},
		{[]string{m1, "--reason", strings.Repeat("x", 501)}, "herald: parked discard: --reason: reason is 501 characters, at most 500 are kept\n"},
		{[]string{"--reason", "x"}, "herald: parked discard: give one MESSAGE_ID\n"},
		{[]string{m1, m2, "--reason", "x"}, "herald: parked discard: give one MESSAGE_ID\n"},
	} {
		r := discard(c.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, c.stderr+"usage: herald parked discard MESSAGE_ID --reason TEXT") || r.stdout != "" {
			t.Errorf("herald parked discard %q: want exit 2, %q and the usage, got\n%s", c.args, c.stderr, r)
		}
	}
	if r := discard(m1, "--tenant", "t2", "--reason", "kind retired"); r.code != 1 || r.stderr != "herald: "+m1+" is not parked\n" {
		t.Errorf("discarding t1's message as --tenant t2: want exit 1 and \"is not parked\", got\n%s", r)
	}
	if r := discard(m1, "--reason", "kind retired in March"); r.code != 0 || r.stdout != opened+"discarded "+m1+"\n" {
		t.Fatalf("herald parked discard %s: want exit 0 and %q, got\n%s", m1, opened+"discarded "+m1+"\n", r)
	}
	awaitDeliveries(t, srv.addr, "k1", ntf[0], map[string]string{"webhook": "SUPPRESSED/DISCARDED"})
	if r := discard(m1, "--reason", "again"); r.code != 1 || r.stderr != "herald: "+m1+" is not parked\n" {
		t.Errorf("discarding %s again: want exit 1 and \"is not parked\", got\n%s", m1, r)
	}
	if r := runCLI(t, dir, "parked", "requeue", m1, "--config", cfg); r.code != 1 || r.stderr != "herald: "+m1+" is not parked\n" {
		t.Errorf("requeueing the discarded %s: want exit 1 and \"is not parked\", got\n%s", m1, r)
	}

	// Over HTTP: another tenant's is 404, one's own is discarded.
	if code := apiDiscard(t, srv.addr, "k1", m2, "not mine"); code != http.StatusNotFound {
		t.Errorf("t1 discarding t2's message: %d, want 404", code)
	}
	if code := apiDiscard(t, srv.addr, "k2", m2, "no such visit"); code != http.StatusOK {
		t.Fatalf("t2 discarding its message: %d, want 200", code)
	}
	awaitDeliveries(t, srv.addr, "k2", ntf[1], map[string]string{"webhook": "SUPPRESSED/DISCARDED"})
	if got := listParked(t, dir, cfg, opened); len(got) != 0 {
		t.Errorf("herald parked list after both discards: %+v", got)
	}
	if r := runCLI(t, dir, "parked", "requeue", "--all", "--config", cfg); r.code != 0 || r.stdout != opened+"requeued 0\n" {
		t.Errorf("herald parked requeue --all after the discards: want %q, got\n%s", opened+"requeued 0\n", r)
	}
	wantAuditRows(t, discardAudit(t, database),
		store.ParkedDiscardEntry{Actor: "cli:" + osUser(t), MessageID: m1, Tenant: "t1", ParkedReason: "UNKNOWN_KIND", Reason: "kind retired in March"},
		store.ParkedDiscardEntry{Actor: "api:t2", MessageID: m2, Tenant: "t2", ParkedReason: "UNKNOWN_KIND", Reason: "no such visit"},
	)
	// The audit log has both discards, the command line's as the API's;
	// the requeues that found nothing are not actions done.
	wantAudited(t, database, "cli:"+osUser(t)+" parked.discard "+m1+" @t1", "config parked.discard "+m2+" @t2")
	if code := srv.stop(60 * time.Second); code != 0 {
		t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
	}
}

// TestCLIParkedUntenantedOverRabbitMQ: with the rabbitmq transport, a body
// that is not a job is parked with no tenant. No tenant's API key sees or
// discards it; the operator's CLI lists it (tenant "-", and alone with
// --untenanted) and discards it, audited. A tenant's own parked message
// names its kind on both sides.
func TestCLIParkedUntenantedOverRabbitMQ(t *testing.T) {
	t.Parallel()
	mq := testmq.VHost(t)
	path := filepath.Join(t.TempDir(), "herald.db")
	database := "sqlite:" + path
	srv, dir, cfg := startParkedHerald(t, database, fmt.Sprintf("transport: rabbitmq\nrabbitmq_url: %s\n", mq))
	opened := "database " + database + ", transport rabbitmq\n"
	ntf := enqueueUnknown(t, srv, sqliteEnqueue(path), "t1")
	m1 := ntf[0] + ".webhook"

	// Someone publishes a body that is not a job to a lane.
	ch := testmq.Channel(t, mq)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, rabbitmq.Topology{}.WithDefaults().Exchange(), "transactional", true, false,
		amqp.Publishing{MessageId: "garbage-1", DeliveryMode: amqp.Persistent, Body: []byte("not a job")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("publish garbage-1: ack %v (%v)", ok, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var untenanted []parkedListRow
	for len(untenanted) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("garbage-1 was not parked within 30 s:\n%s", srv.tail())
		}
		untenanted = listParked(t, dir, cfg, opened, "--untenanted")
	}
	want := parkedListRow{messageID: "garbage-1", tenant: "-", kind: "-", lane: "-", channel: "-", reason: "MALFORMED_BODY"}
	if len(untenanted) != 1 || untenanted[0].parkedAt == "" {
		t.Fatalf("herald parked list --untenanted: %+v, want only %+v", untenanted, want)
	}
	if got := untenanted[0]; got.messageID != want.messageID || got.tenant != want.tenant || got.kind != want.kind ||
		got.lane != want.lane || got.channel != want.channel || got.reason != want.reason {
		t.Fatalf("herald parked list --untenanted: %+v, want %+v", got, want)
	}

	all := listParked(t, dir, cfg, opened)
	if !slices.Equal(parkedIDs(all), []string{m1, "garbage-1"}) || all[0].tenant != "t1" || all[0].kind != followupKind.Name ||
		all[0].lane != "transactional" || all[0].channel != "webhook" {
		t.Fatalf("herald parked list: %+v, want t1's %s (kind %s) and garbage-1", all, m1, followupKind.Name)
	}
	if got := listParked(t, dir, cfg, opened, "--tenant", "t1"); !slices.Equal(parkedIDs(got), []string{m1}) {
		t.Errorf("herald parked list --tenant t1: %v, want [%s]", parkedIDs(got), m1)
	}
	if r := runCLI(t, dir, "parked", "list", "--tenant", "t1", "--untenanted", "--config", cfg); r.code != 2 ||
		!strings.HasPrefix(r.stderr, "herald: parked list: give --tenant or --untenanted, not both\n") {
		t.Errorf("herald parked list --tenant t1 --untenanted: want exit 2 and the reason, got\n%s", r)
	}
	for _, key := range []string{"k1", "k2"} {
		for _, e := range apiParked(t, srv.addr, key) {
			if e["message_id"] != m1 || key != "k1" || e["kind"] != followupKind.Name {
				t.Errorf("GET /v1/parked as %s shows %v, want only t1's %s with its kind", key, e, m1)
			}
		}
	}
	if code := apiDiscard(t, srv.addr, "k1", "garbage-1", "not ours"); code != http.StatusNotFound {
		t.Errorf("a tenant discarding the untenanted message: %d, want 404", code)
	}

	if r := runCLI(t, dir, "parked", "discard", "garbage-1", "--reason", "test publisher junk", "--config", cfg); r.code != 0 ||
		r.stdout != opened+"discarded garbage-1\n" {
		t.Fatalf("herald parked discard garbage-1: want exit 0 and %q, got\n%s", opened+"discarded garbage-1\n", r)
	}
	if r := runCLI(t, dir, "parked", "discard", m1, "--tenant", "t1", "--reason", "kind retired", "--config", cfg); r.code != 0 ||
		r.stdout != opened+"discarded "+m1+"\n" {
		t.Fatalf("herald parked discard %s: want exit 0 and %q, got\n%s", m1, opened+"discarded "+m1+"\n", r)
	}
	awaitDeliveries(t, srv.addr, "k1", ntf[0], map[string]string{"webhook": "SUPPRESSED/DISCARDED"})
	if got := listParked(t, dir, cfg, opened); len(got) != 0 {
		t.Errorf("herald parked list after the discards: %+v", got)
	}
	user := "cli:" + osUser(t)
	wantAuditRows(t, discardAudit(t, database),
		store.ParkedDiscardEntry{Actor: user, MessageID: "garbage-1", ParkedReason: "MALFORMED_BODY", Reason: "test publisher junk"},
		store.ParkedDiscardEntry{Actor: user, MessageID: m1, Tenant: "t1", ParkedReason: "UNKNOWN_KIND", Reason: "kind retired"},
	)
	if code := srv.stop(60 * time.Second); code != 0 {
		t.Fatalf("herald exited %d after SIGTERM:\n%s", code, srv.tail())
	}
}
