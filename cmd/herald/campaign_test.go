package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/internal/testapp"
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
