package main

// A recipients file is read twice, row by row, and never held whole: a
// campaign of five million recipients is a file of hundreds of megabytes,
// and as parsed rows several times that. The first reading (survey) checks
// every row before anything is sent, as a file refused halfway would leave
// a draft behind, and keeps of each row only digests (surveyRow): its
// recipient's, to leave out a row repeating an earlier one, and its
// params', to tell a repeat from a clash. The second reading (pageReader)
// cuts the rows the survey kept into pages, one page in memory at a time,
// and ends by comparing the file's digest with the first reading's: a file
// changed in between would have its pages added under the key of what it
// was. A pipe is copied to a temporary file by the first (campaignSend).

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/heraldhq/herald/campaign"
)

// recipientRows reads a recipients file (campaignSend's --recipients help)
// row by row. A leading UTF-8 byte-order mark (Excel's "CSV UTF-8" writes
// one) is not part of the first cell, and rows with nothing in any cell (a
// trailing ",," a spreadsheet leaves) are skipped. Cells are trimmed of the
// spaces around them. A file that is not UTF-8 (Excel's plain "CSV" in a
// Korean locale writes CP949) is refused, never read as something else. An
// error names the file's line.
type recipientRows struct {
	csv    *csv.Reader
	header []string
	first  bool
}

func newRecipientRows(r io.Reader) *recipientRows {
	b := bufio.NewReader(&textCheck{r: r})
	if bom, _ := b.Peek(3); bytes.Equal(bom, []byte("\xEF\xBB\xBF")) {
		_, _ = b.Discard(3)
	}
	c := csv.NewReader(b)
	c.FieldsPerRecord = -1
	c.TrimLeadingSpace = true
	c.ReuseRecord = true
	return &recipientRows{csv: c, first: true}
}

// columns are the header's params columns (none without a header).
func (rr *recipientRows) columns() []string {
	if rr.header == nil {
		return nil
	}
	return rr.header[1:]
}

// next is the next row's recipient and the line of the file it is on;
// io.EOF after the last row.
func (rr *recipientRows) next() (campaign.Recipient, int, error) {
	for {
		row, err := rr.csv.Read()
		var bad *textError
		var parse *csv.ParseError
		var path *fs.PathError
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.As(err, &bad), errors.As(err, &parse):
			return campaign.Recipient{}, 0, err
		case errors.As(err, &path):
			return campaign.Recipient{}, 0, fmt.Errorf("cannot read it: %w", path.Err) // the path is in the command's error
		default:
			return campaign.Recipient{}, 0, fmt.Errorf("cannot read it: %w", err)
		}
		line, _ := rr.csv.FieldPos(0)
		for i := range row {
			row[i] = strings.TrimSpace(row[i])
		}
		first := rr.first
		rr.first = false
		if first && strings.EqualFold(row[0], "recipient") {
			if err := checkHeader(row); err != nil {
				return campaign.Recipient{}, 0, fmt.Errorf("line %d: %w", line, err)
			}
			rr.header = slices.Clone(row)
			continue
		}
		if !slices.ContainsFunc(row, func(c string) bool { return c != "" }) {
			continue
		}
		rc := campaign.Recipient{Recipient: row[0]}
		switch {
		case rc.Recipient == "":
			return rc, 0, fmt.Errorf("line %d: no recipient in the first column", line)
		case len(row) > 1 && rr.header == nil:
			return rc, 0, fmt.Errorf("line %d has %d columns; params columns need a header row (recipient,name,…) of as many", line, len(row))
		case rr.header != nil && len(row) != len(rr.header):
			return rc, 0, fmt.Errorf("line %d has %d columns, the header %d", line, len(row), len(rr.header))
		}
		if len(row) > 1 {
			// An empty cell is no param of the recipient's own: the
			// campaign's (--params) applies, as a sheet's blank reads.
			p := make(map[string]string, len(row)-1)
			for j := 1; j < len(row); j++ {
				if row[j] != "" {
					p[rr.header[j]] = row[j]
				}
			}
			if len(p) > 0 {
				rc.Params, _ = json.Marshal(p) // keys sorted: equal params marshal alike
			}
		}
		return rc, line, nil
	}
}

// recipientSurvey is what the first reading of a recipients file found. A
// recipient gets one notification: a row repeating an earlier row's
// recipient with the same params is left out (its line in repeated), with
// other params it is refused, since no choice between them would be the
// sender's.
type recipientSurvey struct {
	count    int          // recipients, each once
	repeated map[int]bool // lines of the rows left out
	columns  []string     // the header's params columns
	sum      [sha256.Size]byte
}

// surveyRow is a row as the survey keeps it: 28 bytes, whatever the
// recipient's id and params (16 bytes of the id's SHA-256, no two alike in
// any file; 8 of the params', compared only between rows of one id).
type surveyRow struct {
	id     [16]byte
	params [8]byte
	line   int32
}

// surveyRecipients reads a recipients file through once, checking every
// row, and writes its bytes to also (the command's key; nil for none). Its
// rows are kept as surveyRows and sorted by id once read: a map of them
// took three times the memory (95 MB for a million).
func surveyRecipients(r io.Reader, also io.Writer) (recipientSurvey, error) {
	s := recipientSurvey{repeated: map[int]bool{}}
	sum := sha256.New()
	w := io.Writer(sum)
	if also != nil {
		w = io.MultiWriter(sum, also)
	}
	rows := newRecipientRows(io.TeeReader(r, w))
	var kept []surveyRow
	for {
		rc, line, err := rows.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, err
		}
		if line > math.MaxInt32 {
			return s, fmt.Errorf("line %d: a file of more than %d lines is not read", line, math.MaxInt32)
		}
		id, params := sha256.Sum256([]byte(rc.Recipient)), sha256.Sum256(rc.Params)
		kept = append(kept, surveyRow{[16]byte(id[:16]), [8]byte(params[:8]), int32(line)})
	}
	slices.SortFunc(kept, func(a, b surveyRow) int {
		if c := bytes.Compare(a.id[:], b.id[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.line, b.line)
	})
	// A recipient's first row is kept; of the rows repeating it with other
	// params, the first in the file is named.
	var clash, of int32
	for i := 0; i < len(kept); {
		first := kept[i]
		s.count++
		for i++; i < len(kept) && kept[i].id == first.id; i++ {
			switch {
			case kept[i].params == first.params:
				s.repeated[int(kept[i].line)] = true
			case clash == 0 || kept[i].line < clash:
				clash, of = kept[i].line, first.line
			}
		}
	}
	if clash != 0 {
		return s, fmt.Errorf("line %d repeats the recipient of line %d with other params: a recipient gets one notification; keep one of the rows",
			clash, of)
	}
	if s.count == 0 {
		return s, errors.New("no recipients")
	}
	s.columns = rows.columns()
	copy(s.sum[:], sum.Sum(nil))
	return s, nil
}

// errFileChanged is the second reading of a file finding other rows (or
// other bytes) than the survey did.
var errFileChanged = errors.New("the file changed while it was being sent (it was read once to check it, then again to send it)")

// recipientPage is a page of a campaign's recipients as the file gave
// them: from is the campaign's index of the first.
type recipientPage struct {
	recipients []campaign.Recipient
	lines      []int
	from       int
}

// line is "line N of the file: " for a refusal of one recipient of the
// page (the problem's param "recipients[i]…"), or "" for any other error.
func (p recipientPage) line(err error) string {
	he := asHTTP(err)
	if he == nil {
		return ""
	}
	rest, ok := strings.CutPrefix(he.param, "recipients[")
	if !ok {
		return ""
	}
	i, err := strconv.Atoi(rest[:max(0, strings.IndexByte(rest, ']'))])
	if err != nil || i < 0 || i >= len(p.lines) {
		return ""
	}
	return fmt.Sprintf("line %d of the file: ", p.lines[i])
}

// pageReader reads a surveyed file again as pages of at most
// campaign.MaxPage recipients and maxPageBytes of JSON (each at least one
// recipient), so recipients with long params go in smaller pages. A
// recipient with params of its own counts the campaign's too (base bytes):
// the server keeps its params merged over them, and bounds a page's merged
// params (campaign.MaxPageParams). The same file always gives the same
// pages.
type pageReader struct {
	survey recipientSurvey
	rows   *recipientRows
	sum    hash.Hash
	base   int
	next   recipientPage // filling
	size   int
	count  int // recipients read
	done   bool
}

func newPageReader(r io.Reader, s recipientSurvey, base int) *pageReader {
	sum := sha256.New()
	return &pageReader{survey: s, rows: newRecipientRows(io.TeeReader(r, sum)), sum: sum, base: base}
}

// page is the next page; io.EOF after the last, errFileChanged when the
// file is not what the survey read.
func (pr *pageReader) page() (recipientPage, error) {
	for !pr.done {
		rc, line, err := pr.rows.next()
		if errors.Is(err, io.EOF) {
			// csv's io.EOF is its source's: the whole file went through
			// the digest.
			pr.done = true
			if pr.count != pr.survey.count || !bytes.Equal(pr.sum.Sum(nil), pr.survey.sum[:]) {
				return recipientPage{}, errFileChanged
			}
			break
		}
		if err != nil {
			return recipientPage{}, fmt.Errorf("%w: %w", errFileChanged, err)
		}
		if pr.survey.repeated[line] {
			continue
		}
		pr.count++
		b, _ := json.Marshal(rc)
		n := len(b) + 1 // and its comma
		if rc.Params != nil {
			n += pr.base
		}
		var full recipientPage
		if k := len(pr.next.recipients); k > 0 && (k == campaign.MaxPage || pr.size+n > maxPageBytes) {
			full = pr.next
			pr.next, pr.size = recipientPage{from: full.from + k}, 0
		}
		pr.next.recipients = append(pr.next.recipients, rc)
		pr.next.lines = append(pr.next.lines, line)
		pr.size += n
		if full.recipients != nil {
			return full, nil
		}
	}
	if len(pr.next.recipients) == 0 {
		return recipientPage{}, io.EOF
	}
	last := pr.next
	pr.next = recipientPage{from: last.from + len(last.recipients)}
	return last, nil
}

// textCheck passes a file's bytes through and fails the read at the first
// that cannot be UTF-8 text: a NUL (UTF-16, which is valid UTF-8 byte by
// byte where it is ASCII, a NUL beside each letter), or bytes that are no
// UTF-8 character.
type textCheck struct {
	r      io.Reader
	lf, cr int    // line ends read so far
	carry  []byte // the start of a character the last read cut
	err    error
}

// textError is a file refused for its encoding.
type textError struct{ msg string }

func (e *textError) Error() string { return e.msg }

func (c *textCheck) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	b := p[:n]
	if len(c.carry) > 0 {
		b = append(c.carry, b...)
		c.carry = nil
	}
	for i := 0; i < len(b); {
		switch x := b[i]; {
		case x == 0:
			c.err = &textError{fmt.Sprintf("line %d holds a NUL byte: is the file UTF-16? save it as UTF-8 (in Excel, \"CSV UTF-8\")", 1+c.lf)}
			return 0, c.err
		case x < utf8.RuneSelf:
			if x == '\n' {
				c.lf++
			} else if x == '\r' {
				c.cr++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			if err == nil && !utf8.FullRune(b[i:]) {
				// Checked with the next read's bytes (a file ending
				// here is refused then).
				c.carry = append([]byte(nil), b[i:]...)
				break
			}
			line := c.lf
			if line == 0 && !c.lfAhead(b[i:]) {
				line = c.cr // a file with old Mac line ends
			}
			c.err = &textError{fmt.Sprintf("line %d is not UTF-8 text: save the file as UTF-8 (in Excel, \"CSV UTF-8\"); its encoding is not guessed", 1+line)}
			return 0, c.err
		}
		i += size
	}
	return n, err
}

// lfAhead reports whether a line feed comes in rest or in what is left of
// the file.
func (c *textCheck) lfAhead(rest []byte) bool {
	if bytes.IndexByte(rest, '\n') >= 0 {
		return true
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := c.r.Read(buf)
		if bytes.IndexByte(buf[:n], '\n') >= 0 {
			return true
		}
		if err != nil {
			return false
		}
	}
}
