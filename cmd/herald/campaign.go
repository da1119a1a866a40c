package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/validate"
)

// Environment of the commands that talk to a running herald over HTTP.
const (
	envURL    = "HERALD_URL"
	envAPIKey = "HERALD_API_KEY"
)

// campaignCommands are the subcommands of herald campaign: a tenant's side
// of campaigns, through the HTTP API of a running herald (DESIGN §8).
var campaignCommands = []*command{
	{name: "send", args: "--kind K --recipients FILE.csv [--params JSON] [--send-at TIME] [--scope S] [--url URL] [--api-key KEY] [--no-wait]",
		summary: "send kind K to every recipient of a CSV file as one campaign, and show its progress until it is DONE", run: campaignSend},
}

// campaignPoll is how often campaign send reads the progress.
var campaignPoll = time.Second

// progressOutage is how long the progress watch waits for a herald that
// does not answer before it gives up (the campaign goes on regardless).
var progressOutage = 2 * time.Minute

// resumable adds to err, when herald was not reached or refused for now
// (transient), that running the same command again resumes: it names the
// same campaign.
func resumable(err error) error {
	if !transient(err) {
		return err
	}
	return fmt.Errorf("%w; run the same command again to resume (it names the same campaign and adds nobody twice)", err)
}

// transient reports whether err is herald not reached or not answering
// (no HTTP answer, a timeout, a 5xx) or refusing for now (408, 429): what
// a later try may get past, as refused says the other 4xx are not.
func transient(err error) bool {
	he := asHTTP(err)
	return he == nil || he.status/100 == 5 || he.status == http.StatusRequestTimeout || he.status == http.StatusTooManyRequests
}

// betweenReadings runs between the two readings of the recipients file
// (recipients.go): a test's seam for a file changed in between.
var betweenReadings = func() {}

// maxProgressWait caps the wait between two reads of the progress.
const maxProgressWait = 30 * time.Second

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// progress shows the campaign's progress line: rewritten in place (\r) on
// a terminal; elsewhere (a file, a pipe) a line each time it changes.
type progress struct {
	w     io.Writer
	tty   bool
	last  string
	tenth int // of the recipients added, as last shown off a terminal
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	tty := false
	if ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty}
}

func (p *progress) show(line string) {
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r%s", line)
	case line != p.last:
		fmt.Fprintln(p.w, line)
	}
	p.last = line
}

// adding shows how many of the file's recipients have been added to the
// draft: on a terminal after each page, elsewhere at each tenth of them (a
// file of a million is a hundred pages).
func (p *progress) adding(added, total int) {
	if !p.tty {
		tenth := added * 10 / total
		if tenth == p.tenth {
			return
		}
		p.tenth = tenth
	}
	p.show(fmt.Sprintf("[%s] DRAFT %d/%d recipients added", progressBar(added, total), added, total))
}

// progressBar is a bar of done out of total, 30 characters wide.
func progressBar(done, total int) string {
	const width = 30
	n := 0
	if total > 0 {
		n = done * width / total
	}
	return strings.Repeat("#", n) + strings.Repeat(".", width-n)
}

// note prints a line of its own beside the progress.
func (p *progress) note(s string) {
	if p.tty {
		fmt.Fprintln(p.w)
	}
	fmt.Fprintln(p.w, s)
}

// done ends the progress line on a terminal, if one is shown.
func (p *progress) done() {
	if p.tty && p.last != "" {
		fmt.Fprintln(p.w)
		p.last = ""
	}
}

func campaignSend(cmd *command, args []string, stdout, stderr io.Writer) error {
	fs := newFlags(cmd)
	kind := fs.String("kind", "", "the kind `K` to send (required)")
	file := fs.String("recipients", "", "the recipients: a CSV `FILE`, one recipient per row in the first column; "+
		"with a header row whose first cell is \"recipient\", the other columns are that recipient's params (required)")
	params := fs.String("params", "", "the campaign's params, a JSON object (each recipient's own columns override them)")
	sendAt := fs.String("send-at", "", "send at `TIME` (RFC 3339) instead of now")
	scope := fs.String("scope", "", "the tenant's scope `S` the notifications belong to (a clinic, a brand), whose sends take turns with its other scopes'")
	url := fs.String("url", envOr(envURL, "http://127.0.0.1:8080"), "herald's base `URL` (or "+envURL+")")
	apiKey := fs.String("api-key", os.Getenv(envAPIKey), "an API key with the send and read scopes (or "+envAPIKey+")")
	noWait := fs.Bool("no-wait", false, "start the campaign and return without waiting for it to be DONE")
	overlap := fs.Bool("allow-overlap", false, "start the campaign even when another campaign of the same kind and scope "+
		"was created in the "+overlapWindow.String()+" before it (without it, such a campaign is left DRAFT, unsent)")
	if err := parseNoArgs(cmd, fs, args); err != nil {
		return err
	}
	switch u, err := neturl.Parse(*url); {
	case *kind == "" || *file == "":
		return usageErrorf(cmd, "%s: --kind and --recipients are required", cmd.path())
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return usageErrorf(cmd, "%s: --url (or %s) %q is not herald's base URL, such as http://127.0.0.1:8080", cmd.path(), envURL, *url)
	case *apiKey == "":
		return usageErrorf(cmd, "%s: an API key is required: --api-key or %s", cmd.path(), envAPIKey)
	}
	req := campaign.Request{Kind: *kind, Scope: *scope}
	if *params != "" {
		req.Params = json.RawMessage(*params)
		var v any
		if !utf8.ValidString(*params) {
			// Said here, in the CLI's words, before herald's 400.
			return usageErrorf(cmd, "%s: --params is not UTF-8 text (the terminal's encoding?)", cmd.path())
		}
		if err := json.Unmarshal(req.Params, &v); err != nil {
			return usageErrorf(cmd, "%s: --params is not JSON: %v", cmd.path(), err)
		}
	}
	if *sendAt != "" {
		t, err := time.Parse(time.RFC3339, *sendAt)
		if err != nil || !validate.ValidOffset(*sendAt) {
			return usageErrorf(cmd, "%s: --send-at: %q is not an RFC 3339 time such as 2030-03-14T09:00:00Z", cmd.path(), *sendAt)
		}
		req.SendAt = &t
	}
	// The same command again (the same kind, params and file) names the
	// same campaign: its key replays the create, and the pages add nobody
	// twice, so a send that was interrupted is resumed by running it again.
	body, _ := json.Marshal(req)
	key := sha256.New()
	key.Write(append(body, 0))
	f, err := os.Open(*file)
	if err != nil {
		// As a mistake in the file: exit 2, in the same words.
		return &cliError{code: 2, err: fmt.Errorf("%s: %s: cannot read it: %w", cmd.path(), *file, errors.Unwrap(err))}
	}
	defer f.Close()
	// The file is read twice (recipients.go). A pipe (--recipients
	// <(command), /dev/stdin) cannot be: what the first reading reads of
	// it is kept in a temporary file for the second.
	again, copied := f, io.Discard
	if _, err := f.Seek(0, io.SeekCurrent); err != nil {
		tmp, err := os.CreateTemp("", "herald-recipients-*.csv")
		if err != nil {
			return fmt.Errorf("%s: %s is a pipe, read twice through a temporary file, and that cannot be made: %w", cmd.path(), *file, err)
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		again, copied = tmp, tmp
	}
	// The survey's memory is its rows (28 bytes each, recipients.go): a
	// tighter GC target keeps the garbage of parsing them from doubling it
	// (a file of five million: 444 MB at the default, 329 MB).
	gc := debug.SetGCPercent(25)
	list, err := surveyRecipients(f, io.MultiWriter(key, copied))
	debug.SetGCPercent(gc)
	if err != nil {
		// The file is wrong, not the command line: no usage text.
		return &cliError{code: 2, err: fmt.Errorf("%s: %s: %w", cmd.path(), *file, err)}
	}
	if _, err := again.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("%s: %s: cannot read it a second time: %w", cmd.path(), *file, err)
	}
	betweenReadings()
	c := &apiClient{base: strings.TrimRight(*url, "/"), key: *apiKey, http: &http.Client{Timeout: 2 * time.Minute}}
	ctx := context.Background()
	c.noteUnusedColumns(ctx, stderr, *kind, list.columns)

	// The first page goes with the create, so a file the kind refuses
	// (a param missing for every recipient, say) creates nothing.
	pages := newPageReader(again, list, len(req.Params))
	first, err := pages.page()
	if err != nil {
		return fmt.Errorf("%s: %w; nothing was sent", *file, err)
	}
	req.Recipients = first.recipients
	var created struct{ ID string }
	if err := c.do(ctx, http.MethodPost, "/v1/campaigns", "cli-"+hex.EncodeToString(key.Sum(nil)[:16]), req, &created); err != nil {
		return resumable(fmt.Errorf("create the campaign with recipients 1..%d: %s%w", len(first.recipients), first.line(err), err))
	}
	repeated := ""
	switch {
	case len(list.repeated) == 1:
		repeated = " (1 row repeating an earlier row, recipient and params, left out)"
	case len(list.repeated) > 1:
		repeated = fmt.Sprintf(" (%d rows repeating earlier rows, recipient and params, left out)", len(list.repeated))
	}
	fmt.Fprintf(stdout, "campaign %s: %s%s\n", created.ID, plural(list.count, "recipient"), repeated)
	path := "/v1/campaigns/" + created.ID
	if !*overlap {
		if err := c.refuseOverlap(ctx, created.ID); err != nil {
			return err
		}
	}
	// The pages take a while for a large file (a million recipients, a
	// hundred pages: half a minute on SQLite), so they are shown too.
	bar := newProgress(stdout)
	defer bar.done() // before the command's error, if it ends in one
	added := len(first.recipients)
	for {
		page, err := pages.page()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// Pages read from another file may be in the draft: it goes.
			return fmt.Errorf("%s: %w; %s", *file, err, c.endChangedDraft(ctx, created.ID))
		}
		err = c.do(ctx, http.MethodPost, path+"/recipients", "", map[string]any{"recipients": page.recipients}, nil)
		if he := asHTTP(err); he != nil && he.status == http.StatusConflict {
			break // started already (an earlier run added the pages), or a draft past its deadline: the start says which
		}
		if err != nil {
			err = fmt.Errorf("add recipients %d..%d: %s%w", page.from+1, page.from+len(page.recipients), page.line(err), err)
			switch {
			case overCap(err):
				// An operator can raise the cap; then the same command
				// resumes the draft.
				err = fmt.Errorf("%w; campaign %s stays DRAFT, never started: with limits.campaign_max_recipients raised, the same command resumes it "+
					"until the draft expires (campaign_draft_ttl after its creation)", err, created.ID)
			case refused(err):
				// The same file would be refused again: running the command
				// again cannot finish this draft, so it goes, unsent.
				err = fmt.Errorf("%w; %s", err, c.cancelDraft(ctx, created.ID))
			default:
				err = resumable(err)
			}
			return err
		}
		added += len(page.recipients)
		bar.adding(added, list.count)
	}
	var st campaignProgress
	if err := c.do(ctx, http.MethodPost, path+"/start", "", nil, &st); err != nil {
		// The same command after its campaign was cancelled (a page refused
		// in an earlier run, or someone cancelled it) names that campaign
		// again: say so, rather than only that it cannot start.
		var now campaignProgress
		if he := asHTTP(err); he != nil && he.status == http.StatusConflict &&
			c.do(ctx, http.MethodGet, path, "", nil, &now) == nil && (now.State == "CANCELLED" || now.State == "DRAFT") {
			// A draft whose start is refused has passed its deadline (by
			// herald's clock, not this machine's); the leader ends it.
			if now.Reason == "DRAFT_EXPIRED" || now.State == "DRAFT" {
				return fmt.Errorf("campaign %s, which this command names, expired as a draft (campaign_draft_ttl) before it was started; nothing was sent: "+
					"change the file or --params to send a new campaign", created.ID)
			}
			return fmt.Errorf("campaign %s, which this command names, was cancelled (%s); change the file or --params to send a new campaign",
				created.ID, now.counts())
		}
		return resumable(fmt.Errorf("start the campaign: %w", err))
	}
	if *noWait {
		bar.done()
		fmt.Fprintf(stdout, "%s\n", st.line())
		return nil
	}
	// The counts are counters (docs/campaigns.md), but a GET under load
	// can still take a while: poll no more often than every four reads'
	// time (at most maxProgressWait apart). herald out of reach (a
	// restart) or refusing for now is waited for up to progressOutage; the
	// campaign goes on in herald meanwhile.
	wait := campaignPoll
	var unreachable time.Time
	for st.State == "DRAFT" || st.State == "RUNNING" {
		bar.show(st.line())
		time.Sleep(wait)
		began := time.Now()
		var now campaignProgress
		err := c.do(ctx, http.MethodGet, path, "", nil, &now)
		if err == nil {
			// Only a read that was answered sets the pace: one that timed
			// out or waited through refusals says nothing of a read's cost.
			wait = min(maxProgressWait, max(campaignPoll, 4*time.Since(began)))
			st, unreachable = now, time.Time{}
			continue
		}
		if transient(err) {
			if unreachable.IsZero() {
				unreachable = time.Now()
				bar.note(fmt.Sprintf("herald did not answer (%v); trying again for %s", err, progressOutage))
				continue
			}
			if time.Since(unreachable) < progressOutage {
				continue
			}
		}
		bar.done()
		return fmt.Errorf("read the campaign's progress: %w; campaign %s goes on in herald: run the same command again to watch it", err, created.ID)
	}
	bar.show(st.line())
	bar.done()
	if st.State != "DONE" {
		return fmt.Errorf("the campaign ended %s", st.State)
	}
	if waiting := st.Enqueued - (st.Sent + st.Suppressed + st.Failed + st.Unknown); waiting > 0 {
		// DONE is the fan-out's end, not the sends'; counts are of sends,
		// so with several a recipient this is a floor.
		verb := "have"
		if waiting == 1 {
			verb = "has"
		}
		fmt.Fprintf(stderr, "herald: note: at least %s %s not ended yet (still queued or sending, or held by quiet hours, retrying or parked); "+
			"GET /v1/campaigns/%s shows the counts as they end\n", plural(int(waiting), "send"), verb, created.ID)
	}
	if st.Suppressed > 0 {
		// All of a first campaign's sends suppressed, for want of consent
		// to marketing, reads like a failure: say why it may be so.
		fmt.Fprintf(stderr, "herald: note: %s suppressed, not sent: no consent to the kind's category, the recipient suppressed, or no address "+
			"or device for the channel; GET /v1/notifications?kind=%s&state=SUPPRESSED gives each one's reason\n",
			plural(int(st.Suppressed), "send"), neturl.QueryEscape(*kind))
	}
	return nil
}

// maxPageBytes bounds the JSON of one page's recipients, well under the
// server's limit on a campaign request's body (16 MiB) with room for the
// rest of the create.
var maxPageBytes = 8 << 20

// refused reports whether err is herald's definite refusal of a request
// (a 4xx that the same request would get again), not an interruption the
// command can resume from: a timeout, a rate limit, a conflict, a 5xx, a
// lost connection.
func refused(err error) bool {
	he := asHTTP(err)
	return he != nil && he.status/100 == 4 &&
		he.status != http.StatusRequestTimeout && he.status != http.StatusConflict && he.status != http.StatusTooManyRequests
}

// overCap reports whether err is a page refused for taking the campaign
// past limits.campaign_max_recipients: the whole page's param, not one
// recipient's.
func overCap(err error) bool {
	he := asHTTP(err)
	return he != nil && he.status == http.StatusUnprocessableEntity && he.param == "recipients"
}

// asHTTP is err's answer from herald outside 2xx, or nil when err is no
// such answer (nil, or the request never got one).
func asHTTP(err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	return nil
}

// noteUnusedColumns says on stderr which of the file's params columns no
// template of the kind reads (GET /v1/kinds): a misspelt column (cupon for
// coupon) is sent along and read by nothing, while the campaign's --params
// fill the template instead. It is a note, not a refusal (a column may be
// there for a template still to come); when the kinds cannot be read, or
// the kind is not among them (the create says so), it says nothing.
func (c *apiClient) noteUnusedColumns(ctx context.Context, stderr io.Writer, kind string, columns []string) {
	if len(columns) == 0 {
		return
	}
	var kinds struct {
		Kinds []struct {
			Name   string
			Params []struct{ Name string }
		}
	}
	if c.do(ctx, http.MethodGet, "/v1/kinds", "", nil, &kinds) != nil {
		return
	}
	for _, k := range kinds.Kinds {
		if k.Name != kind {
			continue
		}
		read := map[string]bool{}
		var names []string
		for _, p := range k.Params {
			top, _, _ := strings.Cut(p.Name, ".")
			if !read[top] {
				read[top] = true
				names = append(names, top)
			}
		}
		for _, col := range columns {
			if !read[col] {
				fmt.Fprintf(stderr, "herald: note: column %q is not a param of kind %s (its templates read: %s); its values are sent, and no template reads it by name\n",
					col, kind, strings.Join(names, ", "))
			}
		}
		return
	}
}

// overlapWindow is how far back refuseOverlap looks for another campaign
// of the same kind and scope.
const overlapWindow = 24 * time.Hour

// refuseOverlap refuses to start the draft id when another campaign of its
// kind and scope, not cancelled, was created in the overlapWindow before it:
// a file changed by a row after a send (or other --params) is a new
// campaign, and everyone in both files would get the kind twice. Only a
// draft is held back: a campaign started already (the same command run
// again after an interruption) is watched as before. The draft is left,
// not cancelled, so the same command with --allow-overlap starts it; left
// alone, it expires unsent (campaign_draft_ttl).
func (c *apiClient) refuseOverlap(ctx context.Context, id string) error {
	// Newest first, a few pages at most: the draft is among the first (an
	// older one is not looked for), then the campaigns before it by
	// herald's clock (its created_at).
	var self *campaignView
	next := ""
	for range 10 {
		var page struct {
			Campaigns  []campaignView `json:"campaigns"`
			NextCursor *string        `json:"next_cursor"`
		}
		q := "/v1/campaigns?limit=100"
		if next != "" {
			q += "&cursor=" + neturl.QueryEscape(next)
		}
		if err := c.do(ctx, http.MethodGet, q, "", nil, &page); err != nil {
			return resumable(fmt.Errorf("look for other campaigns of the kind: %w", err))
		}
		for _, o := range page.Campaigns {
			switch {
			case o.ID == id:
				if o.State != "DRAFT" {
					return nil
				}
				self = &o
				continue
			case self == nil:
				continue
			case o.CreatedAt.Before(self.CreatedAt.Add(-overlapWindow)):
				return nil
			case o.Kind != self.Kind || o.Scope != self.Scope || o.State == "CANCELLED":
				continue
			}
			ago := self.CreatedAt.Sub(o.CreatedAt).Round(time.Second)
			return fmt.Errorf("campaign %s of kind %s%s, created %s before this one (%s), is not cancelled: "+
				"everyone in both would get %s twice (a changed file or --params is a new campaign). "+
				"Campaign %s is left DRAFT, not started, nothing sent: the same command with --allow-overlap starts it; "+
				"to add recipients to %s, send a file of the new ones alone with --allow-overlap",
				o.ID, self.Kind, scopeText(self.Scope), ago, o.counts(), self.Kind, id, o.ID)
		}
		if page.NextCursor == nil {
			return nil
		}
		next = *page.NextCursor
	}
	return nil
}

// scopeText is " in scope S", or "" for no scope.
func scopeText(scope string) string {
	if scope == "" {
		return ""
	}
	return " in scope " + scope
}

// endChangedDraft cancels the campaign id, created by this command from a
// file that changed while it was read, unless an earlier run of the
// command (the file as it was) started it; it says which.
func (c *apiClient) endChangedDraft(ctx context.Context, id string) string {
	var now campaignProgress
	if err := c.do(ctx, http.MethodGet, "/v1/campaigns/"+id, "", nil, &now); err != nil {
		return fmt.Sprintf("campaign %s may hold recipients of the changed file (reading its state: %v): cancel it unless an earlier run started it", id, err)
	}
	if now.State != "DRAFT" {
		return fmt.Sprintf("campaign %s, started by an earlier run of the command with the file as it was, goes on (%s)", id, now.counts())
	}
	return c.cancelDraft(ctx, id)
}

// cancelDraft cancels the never-started campaign id and says what became
// of it.
func (c *apiClient) cancelDraft(ctx context.Context, id string) string {
	if err := c.do(ctx, http.MethodPost, "/v1/campaigns/"+id+"/cancel", "", nil, nil); err != nil {
		return fmt.Sprintf("campaign %s is left DRAFT, never started (cancelling it: %v)", id, err)
	}
	return fmt.Sprintf("campaign %s cancelled before its start: nothing was sent", id)
}

// checkHeader refuses a header row whose params columns cannot name params:
// one without a name, or a name twice.
func checkHeader(header []string) error {
	seen := make(map[string]bool, len(header))
	for j, name := range header[1:] {
		switch {
		case name == "":
			return fmt.Errorf("column %d of the header has no name", j+2)
		case seen[name]:
			return fmt.Errorf("the header names %q twice", name)
		}
		seen[name] = true
	}
	return nil
}

// campaignProgress is GET /v1/campaigns/{id}'s answer.
type campaignProgress struct {
	ID                                                 string
	State                                              string
	Total, Enqueued, Sent, Suppressed, Failed, Unknown int64
	// Reason is DRAFT_EXPIRED on a draft the leader ended.
	Reason string
}

// campaignView is a campaign as GET /v1/campaigns lists it: its progress,
// and what refuseOverlap compares.
type campaignView struct {
	campaignProgress
	Kind      string
	Scope     string
	CreatedAt time.Time `json:"created_at"`
}

// line is the progress line: a bar of the recipients fanned out, then the
// sends by outcome.
func (p campaignProgress) line() string {
	return fmt.Sprintf("[%s] %s", progressBar(int(p.Enqueued), int(p.Total)), p.counts())
}

// counts is the state and the counts, as the progress line shows them.
func (p campaignProgress) counts() string {
	return fmt.Sprintf("%s %d/%d enqueued, %d sent, %d suppressed, %d failed, %d unknown",
		p.State, p.Enqueued, p.Total, p.Sent, p.Suppressed, p.Failed, p.Unknown)
}

// apiClient calls herald's HTTP API with an API key.
type apiClient struct {
	base, key string
	http      *http.Client
}

// httpError is an answer outside 2xx: its status and problem detail.
type httpError struct {
	status int
	detail string // with the param in brackets, when the problem names one
	param  string
}

func (e *httpError) Error() string { return fmt.Sprintf("%d %s", e.status, e.detail) }

// do sends in (JSON; nil for no body) with idempotency key key ("" for
// none) and decodes a 2xx answer into out.
func (c *apiClient) do(ctx context.Context, method, path, key string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, raw, err := c.send(req)
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		var p struct{ Detail, Param string }
		_ = json.Unmarshal(raw, &p)
		if p.Param != "" {
			p.Detail += " (" + p.Param + ")"
		}
		return &httpError{status: res.StatusCode, detail: p.Detail, param: p.Param}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// Retries of a request herald refused for now (429 Too Many Requests, 503
// Service Unavailable): at most busyTries in all, each after the answer's
// Retry-After (in seconds; busyWait when it has none), at most busyMaxWait.
var (
	busyTries   = 6
	busyWait    = time.Second
	busyMaxWait = time.Minute
)

// send sends req, again after a 429 or 503 as its Retry-After says (such
// a refusal changed nothing, so any request may be sent again), and
// returns the last answer with its body read.
func (c *apiClient) send(req *http.Request) (*http.Response, []byte, error) {
	for try := 1; ; try++ {
		res, err := c.http.Do(req)
		if err != nil {
			return nil, nil, err
		}
		raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		if err != nil {
			return nil, nil, err
		}
		if (res.StatusCode != http.StatusTooManyRequests && res.StatusCode != http.StatusServiceUnavailable) || try == busyTries {
			return res, raw, nil
		}
		wait := busyWait
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s >= 0 {
			wait = time.Duration(s) * time.Second
		}
		if req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				return nil, nil, err
			}
		}
		select {
		case <-req.Context().Done():
			return nil, nil, req.Context().Err()
		case <-time.After(min(wait, busyMaxWait)):
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
