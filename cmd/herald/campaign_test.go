package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testapp"
	"github.com/heraldhq/herald/store/sqlite"
)

// TestCampaignSend runs herald campaign send against a running herald: a
// CSV with a header row (a params column) goes out as one campaign, the
// progress line ends DONE with every recipient enqueued, and the same
// command again resumes the same campaign instead of sending twice.
func TestCampaignSend(t *testing.T) {
	campaignPoll = 20 * time.Millisecond
	cfg := config.Dev()
	cfg.Database = "sqlite:" + filepath.Join(t.TempDir(), "herald.db")
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
	if err := os.WriteFile(csvPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func() (int, string, string) {
		var out, errb bytes.Buffer
		code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, "--params", `{"date":"May 1"}`,
			"--url", base, "--api-key", config.DevAPIKey}, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errb := send()
	if code != 0 || !strings.Contains(out, "DONE 25/25 enqueued") {
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

	var out2, errb2 bytes.Buffer
	if code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, "--url", base}, &out2, &errb2); code != 2 ||
		!strings.Contains(errb2.String(), "API key is required") {
		t.Fatalf("campaign send without a key: exit %d, %s", code, errb2.String())
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
	dbPath := filepath.Join(t.TempDir(), "herald.db")
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
	if code != 1 || !strings.Contains(out, `create the campaign with recipients 1..3: 422`) || !strings.Contains(out, `needs param`) {
		t.Fatalf("a file missing a param for everyone: exit %d\n%s", code, out)
	}
	if got := campaigns(); len(got) != 0 {
		t.Fatalf("campaigns after a refused create = %v; want none", got)
	}

	params := `{"date":"May 1","coupon":"C1"}`
	refusedAt := fmt.Sprintf("add recipients %d..%d: 422", campaign.MaxPage+1, campaign.MaxPage+1)
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

	code, out = send(campaign.MaxPage+1, "", params)
	if code != 1 || !strings.Contains(out, refusedAt) || !strings.Contains(out, "stays DRAFT") {
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
	rs, err := readRecipients([]byte("u1\nu2\n\nu3\n"))
	if err != nil || len(rs) != 3 || rs[2].Recipient != "u3" || rs[0].Params != nil {
		t.Fatalf("plain list = %+v, %v", rs, err)
	}
	rs, err = readRecipients([]byte("recipient,name\nu1,Ann\n"))
	if err != nil || len(rs) != 1 || string(rs[0].Params) != `{"name":"Ann"}` {
		t.Fatalf("with a header = %+v, %v", rs, err)
	}
	if _, err := readRecipients([]byte("u1,Ann\n")); err == nil {
		t.Fatal("params columns without a header were accepted")
	}
}
