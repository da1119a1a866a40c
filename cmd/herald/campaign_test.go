package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testapp"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/store/sqlite"
)

// TestCampaignSend runs herald campaign send against a running herald: a
// CSV with a header row (a params column) goes out as one campaign, the
// progress line ends DONE with every recipient enqueued, and the same
// command again resumes the same campaign instead of sending twice.
func TestCampaignSend(t *testing.T) {
	campaignPoll = 20 * time.Millisecond
	cfg := config.Dev()
	cfg.Database = "sqlite:" + testsqlite.Path(t)
	// The kind is marketing: with the default quiet hours (08:00–20:50 in
	// Seoul) the test would wait for the morning whenever it ran at night
	// there, on the real clock.
	off := false
	cfg.QuietHours.Enabled = &off
	cfg = cfg.WithDefaults()
	_, base := testapp.Start(t, cfg)
	api := &apiClient{base: base, key: config.DevAPIKey, http: &http.Client{Timeout: 30 * time.Second}}
	// user-a consents to marketing push; nobody to e-mail.
	if err := api.do(context.Background(), http.MethodPut, "/v1/recipients/user-a/profile", "",
		map[string]any{"addresses": map[string]string{"push": "tok-a"}, "consent": map[string]bool{"push": true}}, nil); err != nil {
		t.Fatal(err)
	}

	csvPath := filepath.Join(t.TempDir(), "recipients.csv")
	var b strings.Builder
	b.WriteString("recipient,coupon\n")
	for i := range 25 {
		b.WriteString("user-" + string(rune('a'+i)) + ",C" + string(rune('a'+i)) + "\n")
	}
	b.WriteString("user-b,Cb\n") // repeated: left out, and said so
	if err := os.WriteFile(csvPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func(flags ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, "--params", `{"date":"May 1"}`,
			"--url", base, "--api-key", config.DevAPIKey}, flags...), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errb := send()
	if code != 0 || !strings.Contains(out, "DONE 25/25 enqueued") || !strings.Contains(out, ": 25 recipients (1 row repeating an earlier row") {
		t.Fatalf("campaign send: exit %d\n%s%s", code, out, errb)
	}
	first := strings.Fields(out)[1]
	// The notifications went through the pipeline and its policies: the
	// one consented push was sent, the other 49 sends suppressed.
	var p campaignProgress
	for deadline := time.Now().Add(30 * time.Second); p.Sent+p.Suppressed+p.Failed+p.Unknown < 50 && time.Now().Before(deadline); {
		time.Sleep(campaignPoll)
		if err := api.do(context.Background(), http.MethodGet, "/v1/campaigns/"+strings.TrimSuffix(first, ":"), "", nil, &p); err != nil {
			t.Fatal(err)
		}
	}
	if p.Sent != 1 || p.Suppressed != 49 {
		t.Fatalf("sends = %+v; want 1 sent (user-a's push), 49 suppressed (no consent)", p)
	}
	code, out, errb = send()
	if code != 0 || strings.Fields(out)[1] != first || !strings.Contains(out, "DONE 25/25 enqueued") {
		t.Fatalf("campaign send again: exit %d\n%s%s; want campaign %s again, DONE", code, out, errb, first)
	}
	// The suppressed sends are said to be so, and where to read why.
	if want := "herald: note: 49 sends suppressed, not sent: no consent to the kind's category, the recipient suppressed, or no address or device " +
		"for the channel; GET /v1/notifications?kind=coupon.expiring&state=SUPPRESSED gives each one's reason\n"; !strings.Contains(errb, want) {
		t.Fatalf("campaign send again: stderr %q, want the note %q", errb, want)
	}

	// The file changed by a row is another campaign, to everyone in it:
	// while the first is not cancelled, it is left DRAFT, unsent, until
	// --allow-overlap starts it.
	b.WriteString("user-z,Cz\n")
	if err := os.WriteFile(csvPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errb = send()
	second := strings.TrimSuffix(strings.Fields(out + " x x")[1], ":")
	if code != 1 || second == strings.TrimSuffix(first, ":") ||
		!strings.Contains(errb, "campaign "+strings.TrimSuffix(first, ":")+" of kind coupon.expiring, created ") ||
		!strings.Contains(errb, "Campaign "+second+" is left DRAFT, not started, nothing sent: the same command with --allow-overlap starts it") {
		t.Fatalf("campaign send of a changed file: exit %d\n%s%s; want exit 1, a new campaign left DRAFT", code, out, errb)
	}
	if err := api.do(context.Background(), http.MethodGet, "/v1/campaigns/"+second, "", nil, &p); err != nil || p.State != "DRAFT" || p.Enqueued != 0 {
		t.Fatalf("the changed file's campaign: %+v, %v; want DRAFT, none enqueued", p, err)
	}
	code, out, errb = send("--allow-overlap")
	if code != 0 || strings.Fields(out)[1] != second+":" || !strings.Contains(out, "DONE 26/26 enqueued") {
		t.Fatalf("campaign send --allow-overlap: exit %d\n%s%s; want campaign %s, DONE", code, out, errb, second)
	}

	var out2, errb2 bytes.Buffer
	if code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, "--url", base}, &out2, &errb2); code != 2 ||
		!strings.Contains(errb2.String(), "API key is required") {
		t.Fatalf("campaign send without a key: exit %d, %s", code, errb2.String())
	}
	// Bad flags say what is wrong with them, in a line.
	for _, c := range []struct{ flag, value, want string }{
		{"--send-at", "tomorrow", `--send-at: "tomorrow" is not an RFC 3339 time such as 2030-03-14T09:00:00Z`},
		{"--send-at", "2030-03-14T09:00:00+24:00", `--send-at: "2030-03-14T09:00:00+24:00" is not an RFC 3339 time such as 2030-03-14T09:00:00Z`},
		{"--params", "{date:1}", "--params is not JSON: invalid character 'd' looking for beginning of object key string"},
		{"--params", "{\"shop\":\"\xc4\xab\xc6\"}", "--params is not UTF-8 text"},
	} {
		var out, errb bytes.Buffer
		if code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, c.flag, c.value, "--url", base,
			"--api-key", "dev-key"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("campaign send %s %s: exit %d, %q; want exit 2 and %q", c.flag, c.value, code, errb.String(), c.want)
		}
	}
}

// A --url without a scheme is a mistake in the command (exit 2), said as
// one; it was an interruption to resume ("run the same command again"),
// which could never help.
func TestCampaignSendRefusesAURLWithoutAScheme(t *testing.T) {
	csvPath := filepath.Join(t.TempDir(), "r.csv")
	if err := os.WriteFile(csvPath, []byte("u1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"127.0.0.1:17081", "ftp://h", "http://"} {
		var out, errb bytes.Buffer
		code := run([]string{"campaign", "send", "--kind", "k", "--recipients", csvPath, "--url", u, "--api-key", "key"}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "is not herald's base URL, such as http://127.0.0.1:8080") || strings.Contains(errb.String(), "resume") {
			t.Errorf("--url %s: exit %d, %q; want exit 2 naming the URL", u, code, errb.String())
		}
	}
}

// A file herald refuses leaves no draft behind: refused with the first page
// (a param the kind needs is missing for everyone), nothing is created;
// refused at a later page (a recipient no store can hold), the draft the
// command created is cancelled before its start, and the error says so.
// Either way nothing is sent, and the error names the recipients refused.
// A page past limits.campaign_max_recipients is the exception: an operator
// can raise the cap, so that draft stays, for the same command to resume.
func TestCampaignSendRefusedLeavesNoDraft(t *testing.T) {
	cfg := config.Dev()
	dbPath := testsqlite.Path(t)
	cfg.Database = "sqlite:" + dbPath
	off := false
	cfg.QuietHours.Enabled = &off
	limit := int64(campaign.MaxPage)
	cfg.Limits.CampaignMaxRecipients = &limit
	cfg = cfg.WithDefaults()
	_, base := testapp.Start(t, cfg)
	db, err := sql.Open("sqlite", sqlite.DSN(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	campaigns := func() (states []string) {
		rows, err := db.Query(`SELECT state FROM campaigns ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			states = append(states, s)
		}
		return states
	}
	// send sends n recipients, the last of them named last when it is set.
	send := func(n int, last, params string) (int, string) {
		csvPath := filepath.Join(t.TempDir(), "recipients.csv")
		var b strings.Builder
		for i := range n {
			if i == n-1 && last != "" {
				fmt.Fprintf(&b, "%s\n", last)
				continue
			}
			fmt.Fprintf(&b, "user-%d\n", i)
		}
		if err := os.WriteFile(csvPath, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, "--params", params,
			"--url", base, "--api-key", config.DevAPIKey}, &out, &errb)
		return code, out.String() + errb.String()
	}

	code, out := send(3, "", `{}`)
	if code != 1 || !strings.Contains(out, `create the campaign with recipients 1..3: line 1 of the file: 422`) || !strings.Contains(out, `needs param`) {
		t.Fatalf("a file missing a param for everyone: exit %d\n%s", code, out)
	}
	if got := campaigns(); len(got) != 0 {
		t.Fatalf("campaigns after a refused create = %v; want none", got)
	}

	params := `{"date":"May 1","coupon":"C1"}`
	// The refusal names the recipient's line of the file (no header: the
	// line is its number), not only its index in the page.
	refusedAt := fmt.Sprintf("add recipients %d..%d: line %d of the file: 422", campaign.MaxPage+1, campaign.MaxPage+1, campaign.MaxPage+1)
	code, out = send(campaign.MaxPage+1, strings.Repeat("x", catalog.MaxRecipientLen+1), params)
	if code != 1 || !strings.Contains(out, refusedAt) || !strings.Contains(out, "recipients[0].recipient") ||
		!strings.Contains(out, "cancelled before its start: nothing was sent") {
		t.Fatalf("a file with a recipient too long on its second page: exit %d\n%s", code, out)
	}
	if got := campaigns(); len(got) != 1 || got[0] != "CANCELLED" {
		t.Fatalf("campaigns after a page refused = %v; want one CANCELLED", got)
	}
	// The same command again names the cancelled campaign, and says so.
	code, out = send(campaign.MaxPage+1, strings.Repeat("x", catalog.MaxRecipientLen+1), params)
	if code != 1 || !strings.Contains(out, "was cancelled") || !strings.Contains(out, "change the file or --params") {
		t.Fatalf("the same refused file again: exit %d\n%s", code, out)
	}

	// Past the cap the whole page is refused (param "recipients"): no line.
	code, out = send(campaign.MaxPage+1, "", params)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("add recipients %d..%d: 422", campaign.MaxPage+1, campaign.MaxPage+1)) || !strings.Contains(out, "stays DRAFT") {
		t.Fatalf("a file past the cap: exit %d\n%s", code, out)
	}
	if got := campaigns(); len(got) != 2 || !slices.Contains(got, "DRAFT") {
		t.Fatalf("campaigns after a page past the cap = %v; want the CANCELLED one and a DRAFT", got)
	}
	var notifications int
	if err := db.QueryRow(`SELECT count(*) FROM notifications`).Scan(&notifications); err != nil || notifications != 0 {
		t.Fatalf("notifications = %d, %v; want none", notifications, err)
	}
	// That draft's deadline passes (herald refuses its start), then the
	// leader's runner ends it (campaign/runner_test.go does that write): the
	// same command says so both times.
	for _, expire := range []string{`UPDATE campaigns SET draft_expires_at = 1000 WHERE state = 'DRAFT'`,
		`UPDATE campaigns SET state = 'CANCELLED', ended_reason = 'DRAFT_EXPIRED' WHERE state = 'DRAFT'`} {
		if _, err := db.Exec(expire); err != nil {
			t.Fatal(err)
		}
		code, out = send(campaign.MaxPage+1, "", params)
		if code != 1 || !strings.Contains(out, "expired as a draft (campaign_draft_ttl) before it was started") {
			t.Fatalf("the same command once its draft expired (%s): exit %d\n%s", expire, code, out)
		}
	}
}

func TestReadRecipients(t *testing.T) {
	t.Parallel()
	f, err := readRecipients([]byte("u1\nu2\n\nu3\n"), 0)
	rs := f.recipients
	if err != nil || len(rs) != 3 || rs[2].Recipient != "u3" || rs[0].Params != nil {
		t.Fatalf("plain list = %+v, %v", rs, err)
	}
	f, err = readRecipients([]byte("recipient,name\nu1,Ann\n"), 0)
	rs = f.recipients
	if err != nil || len(rs) != 1 || string(rs[0].Params) != `{"name":"Ann"}` {
		t.Fatalf("with a header = %+v, %v", rs, err)
	}
	if _, err := readRecipients([]byte("u1,Ann\n"), 0); err == nil {
		t.Fatal("params columns without a header were accepted")
	}
}

// TestReadRecipientsAsSpreadsheetsWriteThem: what Excel and other
// spreadsheets put in a CSV file (a byte-order mark, CRLF, quoted commas,
// rows of empty cells) is read as the recipients and params the sheet
// shows, and a file that cannot be read names the line of the file.
func TestReadRecipientsAsSpreadsheetsWriteThem(t *testing.T) {
	t.Parallel()
	const bom = "\xEF\xBB\xBF"
	for _, c := range []struct {
		name, file string
		want       []campaign.Recipient
	}{
		{"a byte-order mark before the header", bom + "recipient,coupon\r\nu1,A\r\n", []campaign.Recipient{{Recipient: "u1", Params: []byte(`{"coupon":"A"}`)}}},
		{"a byte-order mark before the first recipient", bom + "u1\r\nu2\r\n", []campaign.Recipient{{Recipient: "u1"}, {Recipient: "u2"}}},
		{"a byte-order mark before a lone header", bom + "recipient\nu1\n", []campaign.Recipient{{Recipient: "u1"}}},
		{"rows of empty cells", "recipient,coupon\r\nu1,A\r\n,\r\n , \r\nu2,B\r\n,\r\n", []campaign.Recipient{
			{Recipient: "u1", Params: []byte(`{"coupon":"A"}`)}, {Recipient: "u2", Params: []byte(`{"coupon":"B"}`)}}},
		{"a quoted comma and spaces around the header", "recipient , name\nu1,\"Kim, Ann\"\n", []campaign.Recipient{{Recipient: "u1", Params: []byte(`{"name":"Kim, Ann"}`)}}},
		// An empty cell leaves the campaign's param (--params) to apply.
		{"empty cells", "recipient,coupon,date\nu1,VIP20,\nu2,,\n", []campaign.Recipient{{Recipient: "u1", Params: []byte(`{"coupon":"VIP20"}`)}, {Recipient: "u2"}}},
	} {
		f, err := readRecipients([]byte(c.file), 0)
		got := f.recipients
		if err != nil || len(got) != len(c.want) {
			t.Fatalf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
		for i := range got {
			if got[i].Recipient != c.want[i].Recipient || string(got[i].Params) != string(c.want[i].Params) {
				t.Fatalf("%s: recipient %d = %q %s; want %q %s", c.name, i, got[i].Recipient, got[i].Params, c.want[i].Recipient, c.want[i].Params)
			}
		}
	}
	for _, c := range []struct{ name, file, want string }{
		{"a short row", "recipient,coupon\nu1,A\n\nu2\n", "line 4 has 1 columns, the header 2"},
		{"no recipient", "recipient,coupon\nu1,A\n,B\n", "line 3: no recipient in the first column"},
		{"a params column without a name", "recipient,,coupon\nu1,A,B\n", "line 1: column 2 of the header has no name"},
		{"a params column named twice", "recipient,coupon,coupon\nu1,A,B\n", `line 1: the header names "coupon" twice`},
		{"params without a header", "u1\nu2,A\n", "line 2 has 2 columns; params columns need a header row"},
		{"nothing but empty rows", bom + ",\n,,\n", "no recipients"},
		// Excel's plain "CSV" in a Korean locale: 김 and 이 in CP949.
		{"CP949, not UTF-8", "u1\n\xb1\xe8\n\xc0\xcc\n", "line 2 is not UTF-8 text"},
		{"a CP949 param", "recipient,shop\nu1,cafe\nu2,\xc4\xab\xc6\xe4\n", "line 3 is not UTF-8 text"},
		{"CP949 with old Mac line ends", "u1\ru2\r\xb1\xe8\r", "line 3 is not UTF-8 text"},
		{"UTF-16 without a byte-order mark", "u\x001\x00\n\x00u\x002\x00\n\x00", "line 1 holds a NUL byte: is the file UTF-16?"},
		{"a recipient repeated with other params", "recipient,coupon\nu1,A\nu2,B\n u1 ,C\n", "line 4 repeats the recipient of line 2 with other params"},
	} {
		if _, err := readRecipients([]byte(c.file), 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}
}

// A row that repeats an earlier row's recipient with the same params
// (spaces around a cell are not part of it) is left out and counted: a
// recipient gets one notification, and the command says how many rows it
// left out.
func TestReadRecipientsLeavesOutRepeatedRows(t *testing.T) {
	t.Parallel()
	f, err := readRecipients([]byte("recipient,coupon\nu1,A\nu2,\n  u1  ,A\nu2\t,\nu3,C\nu1,A\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, r := range f.recipients {
		got = append(got, fmt.Sprintf("%s%s@%d", r.Recipient, r.Params, f.lines[i]))
	}
	if want := []string{`u1{"coupon":"A"}@2`, `u2@3`, `u3{"coupon":"C"}@6`}; !slices.Equal(got, want) || f.repeated != 3 {
		t.Fatalf("recipients %q, %d left out; want %q, 3 left out", got, f.repeated, want)
	}
}

// smallPagesHerald starts herald on a SQLite file of its own and returns
// its base URL and the file's path, for campaign send with pages cut at 4
// KiB and its progress read every 20 ms. Quiet hours are off: the kind is
// marketing, and a test run at night in Seoul would wait for the morning.
func smallPagesHerald(t *testing.T) (base, dbPath string) {
	t.Helper()
	campaignPoll, maxPageBytes = 20*time.Millisecond, 4<<10
	t.Cleanup(func() { maxPageBytes = 8 << 20 })
	cfg := config.Dev()
	dbPath = testsqlite.Path(t)
	cfg.Database = "sqlite:" + dbPath
	off := false
	cfg.QuietHours.Enabled = &off
	_, base = testapp.Start(t, cfg.WithDefaults())
	return base, dbPath
}

// Recipients with long params go in pages cut by size, not only by count
// (the server refuses a body over 16 MiB), and the command finishes.
func TestCampaignSendCutsPagesBySize(t *testing.T) {
	base, _ := smallPagesHerald(t)
	csvPath := filepath.Join(t.TempDir(), "recipients.csv")
	var b strings.Builder
	b.WriteString("recipient,coupon\n")
	long := strings.Repeat("x", 300)
	for i := range 120 {
		fmt.Fprintf(&b, "user-%d,%s%d\n", i, long, i)
	}
	if err := os.WriteFile(csvPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := readRecipients([]byte(b.String()), 0)
	if err != nil {
		t.Fatal(err)
	}
	rs, ps := f.recipients, f.pages
	if withBase, err := readRecipients([]byte(b.String()), 300); err != nil || len(withBase.pages) <= len(ps) {
		t.Fatalf("%d pages counting the campaign's 300 bytes of params in each recipient's (%v), %d without; want more with", len(withBase.pages), err, len(ps))
	}
	if len(ps) < 10 {
		t.Fatalf("%d pages of 120 recipients of 340 bytes each; want one per 4 KiB at most", len(ps))
	}
	var again []campaign.Recipient
	for _, p := range ps {
		raw, _ := json.Marshal(p)
		if len(raw) > maxPageBytes+2 {
			t.Fatalf("a page of %d bytes, more than %d", len(raw), maxPageBytes)
		}
		again = append(again, p...)
	}
	if len(again) != len(rs) || again[0].Recipient != rs[0].Recipient || again[len(again)-1].Recipient != rs[len(rs)-1].Recipient {
		t.Fatalf("the pages hold %d recipients; want the file's %d in its order", len(again), len(rs))
	}
	var out, errb bytes.Buffer
	if code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, "--params", `{"date":"May 1"}`,
		"--url", base, "--api-key", config.DevAPIKey}, &out, &errb); code != 0 || !strings.Contains(out.String(), "DONE 120/120 enqueued") {
		t.Fatalf("campaign send: exit %d\n%s%s", code, out.String(), errb.String())
	}
	// The pages are shown as they are added: off a terminal, at each tenth
	// of the recipients, the last when all are.
	if added := strings.Count(out.String(), " recipients added\n"); added < 2 || added > 10 ||
		!strings.Contains(out.String(), "[##############################] DRAFT 120/120 recipients added\n") {
		t.Fatalf("campaign send of %d pages: %d lines of recipients added; want 2..10, the last of 120/120\n%s", len(ps), added, out.String())
	}
}

// A request herald refuses for now (429, 503) is sent again, body and
// all, after the answer's Retry-After; a refusal that lasts ends the
// command with it.
func TestAPIClientWaitsWhenHeraldIsBusy(t *testing.T) {
	busyWait = time.Millisecond
	var calls atomic.Int32
	refuse := atomic.Int32{}
	refuse.Store(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		if string(body) != `{"recipients":["u1"]}` {
			t.Errorf("body %q on call %d", body, calls.Load())
		}
		if refuse.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"detail":"over the tenant's quota"}`))
			return
		}
		_, _ = w.Write([]byte(`{"added":1}`))
	}))
	defer srv.Close()
	c := &apiClient{base: srv.URL, key: "k", http: srv.Client()}
	var got struct{ Added int }
	if err := c.do(context.Background(), http.MethodPost, "/v1/campaigns/c/recipients", "", map[string]any{"recipients": []string{"u1"}}, &got); err != nil ||
		got.Added != 1 || calls.Load() != 3 {
		t.Fatalf("after two 429s: %+v, %v, %d calls; want added 1 on the third", got, err, calls.Load())
	}
	calls.Store(0)
	refuse.Store(100)
	err := c.do(context.Background(), http.MethodPost, "/v1/campaigns/c/recipients", "", map[string]any{"recipients": []string{"u1"}}, nil)
	if he := asHTTP(err); he == nil || he.status != http.StatusTooManyRequests || int(calls.Load()) != busyTries {
		t.Fatalf("refused every time: %v after %d calls; want the 429 after %d", err, calls.Load(), busyTries)
	}
}

// herald out of reach while the command watches (a restart) is waited
// for, and the watch goes on to DONE; one that stays away ends the
// command saying the campaign goes on and how to watch it again. Output
// that is not a terminal gets a line per change, no carriage returns.
func TestCampaignSendWatchesThroughAnOutage(t *testing.T) {
	poll := campaignPoll
	campaignPoll = time.Millisecond
	defer func() { campaignPoll = poll }()
	var gets, down atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/campaigns":
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id":"cmp_1"}`))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/campaigns":
			_, _ = w.Write([]byte(`{"campaigns":[{"id":"cmp_1","state":"DRAFT","kind":"k"}],"next_cursor":null}`))
		case r.Method == http.MethodPost && r.URL.Path == "/v1/campaigns/cmp_1/start":
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id":"cmp_1","state":"RUNNING","total":1}`))
		case r.Method == http.MethodGet:
			if down.Add(-1) >= 0 {
				hj, _ := w.(http.Hijacker)
				conn, _, _ := hj.Hijack()
				conn.Close() // no answer at all
				return
			}
			state := "RUNNING"
			if gets.Add(1) > 1 {
				state = "DONE"
			}
			_, _ = w.Write([]byte(`{"id":"cmp_1","state":"` + state + `","total":1,"enqueued":1}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	csvPath := filepath.Join(t.TempDir(), "r.csv")
	if err := os.WriteFile(csvPath, []byte("u1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func() (int, string, string) {
		var out, errb bytes.Buffer
		code := run([]string{"campaign", "send", "--kind", "k", "--recipients", csvPath, "--url", srv.URL, "--api-key", "key"}, &out, &errb)
		return code, out.String(), errb.String()
	}
	down.Store(3)
	if code, out, errb := send(); code != 0 || !strings.Contains(out, "herald did not answer") || !strings.Contains(out, "DONE") ||
		strings.Contains(out, "\r") || !strings.Contains(out, "campaign cmp_1: 1 recipient\n") ||
		!strings.Contains(errb, "herald: note: at least 1 send has not ended yet (still queued or sending, or held by quiet hours, retrying or parked)") {
		// DONE with its one send in no count: the note says it waits.
		t.Fatalf("through an outage of three reads: exit %d\n%q\n%s", code, out, errb)
	}
	progressOutage = 10 * time.Millisecond
	defer func() { progressOutage = 2 * time.Minute }()
	gets.Store(-1 << 20)
	down.Store(1 << 20)
	if code, _, errb := send(); code != 1 || !strings.Contains(errb, "campaign cmp_1 goes on in herald: run the same command again to watch it") {
		t.Fatalf("herald away for good: exit %d, %q", code, errb)
	}
	// herald not reached at all: the command says the same command resumes.
	srv.Close()
	if code, _, errb := send(); code != 1 || !strings.Contains(errb, "run the same command again to resume") {
		t.Fatalf("herald down at the create: exit %d, %q", code, errb)
	}
	// A file that cannot be read is a mistake in the command: exit 2.
	var out, errb bytes.Buffer
	if code := run([]string{"campaign", "send", "--kind", "k", "--recipients", csvPath + ".missing", "--url", srv.URL, "--api-key", "key"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "cannot read it") {
		t.Fatalf("a missing file: exit %d, %q", code, errb.String())
	}
}

// A params column no template of the kind reads (a misspelt cupon) is
// named in a note on stderr; the campaign is sent as asked.
func TestCampaignSendNotesAColumnNoTemplateReads(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/kinds":
			_, _ = w.Write([]byte(`{"kinds":[{"name":"other","params":[{"name":"cupon"}]},` +
				`{"name":"coupon.expiring","params":[{"name":"coupon","required":true},{"name":"date","required":true}]}]}`))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/campaigns":
			_, _ = w.Write([]byte(`{"campaigns":[],"next_cursor":null}`))
		case r.Method == http.MethodPost && r.URL.Path == "/v1/campaigns":
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id":"cmp_2"}`))
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id":"cmp_2","state":"DONE","total":1,"enqueued":1,"sent":1}`)) // every send ended: no note
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for file, note := range map[string]bool{"recipient,cupon\nu1,C1\n": true, "recipient,coupon\nu1,C1\n": false} {
		csvPath := filepath.Join(t.TempDir(), "r.csv")
		if err := os.WriteFile(csvPath, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, "--params", `{"coupon":"D","date":"May 1"}`,
			"--url", srv.URL, "--api-key", "key"}, &out, &errb)
		said := strings.Contains(errb.String(), `column "cupon" is not a param of kind coupon.expiring (its templates read: coupon, date)`)
		if code != 0 || said != note || (!note && errb.Len() > 0) {
			t.Errorf("%q: exit %d, note %v, stderr %q; want exit 0, note %v", file, code, said, errb.String(), note)
		}
	}
}
