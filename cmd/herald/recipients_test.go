package main

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/heraldhq/herald/campaign"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store/sqlite"
)

// recipientFile is a recipients file read as campaign send reads it: the
// survey, then the pages.
type recipientFile struct {
	recipients []campaign.Recipient
	lines      []int
	repeated   int
	pages      [][]campaign.Recipient
}

// readRecipients reads raw as campaign send does, with base bytes of the
// campaign's params. It reads it whole, a byte at a time and in halves of
// each read, and fails unless all three agree: a character or a line end
// cut by a read is read as in one piece.
func readRecipients(raw []byte, base int) (recipientFile, error) {
	var firstErr error
	var first recipientFile
	for i, wrap := range []func(io.Reader) io.Reader{
		func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader,
	} {
		f, err := readRecipientsThrough(raw, base, wrap)
		if i == 0 {
			first, firstErr = f, err
			continue
		}
		if fmt.Sprint(err) != fmt.Sprint(firstErr) || fmt.Sprint(f) != fmt.Sprint(first) {
			return f, fmt.Errorf("read %d: %v, %+v; read whole: %v, %+v", i, err, f, firstErr, first)
		}
	}
	return first, firstErr
}

func readRecipientsThrough(raw []byte, base int, wrap func(io.Reader) io.Reader) (recipientFile, error) {
	s, err := surveyRecipients(wrap(bytes.NewReader(raw)), nil)
	if err != nil {
		return recipientFile{}, err
	}
	f := recipientFile{repeated: len(s.repeated)}
	pr := newPageReader(wrap(bytes.NewReader(raw)), s, base)
	for {
		p, err := pr.page()
		if errors.Is(err, io.EOF) {
			return f, nil
		}
		if err != nil {
			return f, err
		}
		if p.from != len(f.recipients) || len(p.lines) != len(p.recipients) {
			return f, fmt.Errorf("a page from %d with %d lines for %d recipients, after %d", p.from, len(p.lines), len(p.recipients), len(f.recipients))
		}
		f.pages = append(f.pages, p.recipients)
		f.recipients = append(f.recipients, p.recipients...)
		f.lines = append(f.lines, p.lines...)
	}
}

// A character cut by a read is checked with the next read's bytes, and a
// file that ends inside one is refused.
func TestTextCheckAcrossReads(t *testing.T) {
	t.Parallel()
	f, err := readRecipients([]byte("recipient,shop\n김,카페\n이,\"빵, 집\"\n"), 0)
	if err != nil || len(f.recipients) != 2 || string(f.recipients[1].Params) != `{"shop":"빵, 집"}` {
		t.Fatalf("Korean names and params = %+v, %v", f, err)
	}
	cut := []byte("u1\n김")
	if _, err := readRecipients(cut[:len(cut)-1], 0); err == nil || !strings.Contains(err.Error(), "line 2 is not UTF-8 text") {
		t.Fatalf("a file ending inside a character: %v", err)
	}
}

// A file whose bytes change between the survey and the second reading is
// refused at the second reading's end (or at its first row that no longer
// reads), whatever changed: a byte of a param, a row added, the encoding.
func TestPagesOfAChangedFile(t *testing.T) {
	t.Parallel()
	was := []byte("recipient,coupon\nu1,A\nu2,B\nu1,A\n")
	s, err := surveyRecipients(bytes.NewReader(was), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, now := range []string{
		"recipient,coupon\nu1,A\nu2,C\nu1,A\n",
		"recipient,coupon\nu1,A\nu2,B\nu1,A\nu3,D\n",
		"recipient,coupon\nu1,A\nu2,B\nu1,A\n\n",
		"recipient,coupon\nu1,A\nu2,\xb1\xe8\nu1,A\n",
		"recipient,coupon\nu1,A\nu2,B\n",
	} {
		pr := newPageReader(strings.NewReader(now), s, 0)
		var err error
		for err == nil {
			_, err = pr.page()
		}
		if !errors.Is(err, errFileChanged) {
			t.Errorf("read as %q after the survey of %q: %v; want errFileChanged", now, was, err)
		}
	}
	pr := newPageReader(bytes.NewReader(was), s, 0)
	if p, err := pr.page(); err != nil || len(p.recipients) != 2 {
		t.Fatalf("the same file again: %+v, %v", p, err)
	}
	if _, err := pr.page(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last page: %v; want io.EOF", err)
	}
}

// A file changed between the command's two readings sends nothing: on one
// page, before the create; on several, its draft, which may hold pages of
// the changed file, is cancelled before its start.
func TestCampaignSendFileChangedBetweenReadings(t *testing.T) {
	base, dbPath := smallPagesHerald(t)
	t.Cleanup(func() { betweenReadings = func() {} })
	db, err := sql.Open("sqlite", sqlite.DSN(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	csvPath := filepath.Join(t.TempDir(), "recipients.csv")
	file := func(n int, coupon string) []byte {
		var b strings.Builder
		b.WriteString("recipient,coupon\n")
		for i := range n {
			fmt.Fprintf(&b, "user-%d,%s%d\n", i, coupon, i)
		}
		return []byte(b.String())
	}
	for _, c := range []struct {
		name      string
		n         int
		campaigns string
	}{
		{"one page", 3, ""},
		{"many pages", 400, "CANCELLED 0"},
	} {
		if err := os.WriteFile(csvPath, file(c.n, "A"), 0o600); err != nil {
			t.Fatal(err)
		}
		betweenReadings = func() {
			if err := os.WriteFile(csvPath, file(c.n, "B"), 0o600); err != nil {
				t.Error(err)
			}
		}
		var out, errb bytes.Buffer
		code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", csvPath, "--params", `{"date":"May 1"}`,
			"--url", base, "--api-key", config.DevAPIKey}, &out, &errb)
		msg := errb.String()
		if code != 1 || !strings.Contains(msg, "the file changed while it was being sent") || !strings.Contains(msg, "nothing was sent") {
			t.Fatalf("%s: exit %d\n%s%s", c.name, code, out.String(), msg)
		}
		var got []string
		rows, err := db.Query(`SELECT state, enqueued FROM campaigns ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var state string
			var enqueued int
			if err := rows.Scan(&state, &enqueued); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s %d", state, enqueued))
		}
		rows.Close()
		if strings.Join(got, ", ") != c.campaigns {
			t.Fatalf("%s: campaigns %q; want %q", c.name, got, c.campaigns)
		}
		if _, err := db.Exec(`DELETE FROM campaigns`); err != nil {
			t.Fatal(err)
		}
	}
	var notifications int
	if err := db.QueryRow(`SELECT count(*) FROM notifications`).Scan(&notifications); err != nil || notifications != 0 {
		t.Fatalf("notifications = %d, %v; want none", notifications, err)
	}
}

// A pipe (--recipients <(command), /dev/stdin) cannot be read twice: what
// the first reading read of it is kept in a temporary file for the second,
// and the campaign goes out whole. A directory cannot be read at all.
func TestCampaignSendReadsAPipe(t *testing.T) {
	base, _ := smallPagesHerald(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		defer w.Close()
		fmt.Fprintln(w, "recipient,coupon")
		for i := range 300 {
			fmt.Fprintf(w, "user-%d,C%d\n", i, i)
		}
	}()
	t.Setenv("TMPDIR", t.TempDir()) // os.CreateTemp's folder, to see it emptied
	var out, errb bytes.Buffer
	code := run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", fmt.Sprintf("/dev/fd/%d", r.Fd()), "--params", `{"date":"May 1"}`,
		"--url", base, "--api-key", config.DevAPIKey}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "DONE 300/300 enqueued") || !strings.Contains(out.String(), "DRAFT 300/300 recipients added") {
		t.Fatalf("campaign send from a pipe: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if left, _ := os.ReadDir(os.Getenv("TMPDIR")); len(left) != 0 {
		t.Fatalf("left in the temporary folder: %v", left)
	}

	out.Reset()
	errb.Reset()
	dir := t.TempDir()
	code = run([]string{"campaign", "send", "--kind", "coupon.expiring", "--recipients", dir, "--url", base, "--api-key", config.DevAPIKey}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), dir+": cannot read it: is a directory") {
		t.Fatalf("campaign send of a directory: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
