// Package cursor makes the opaque cursors of herald's paged listings
// (GET /v1/notifications, GET /v1/campaigns): where the next page of a
// walk starts, newest first by (created_at, id); and reads what every such
// listing's query shares (Query, Limit).
//
// A cursor is base64url (no padding) of
//
//	version (1 byte, 1) | created_at (int64 Unix microseconds) |
//	len(id) (1 byte) | id | check (8 bytes)
//
// where check is the first 8 bytes of SHA-256 over the listing's domain
// string, each of its bound parts (the tenant and the filters, each
// length-prefixed, so one cannot shift into the next) and the bytes before
// it. A cursor is valid only for the listing that issued it: a changed
// byte, another tenant or other filters make it fail the check. The check
// is not keyed: it catches corruption and mix-ups, not a forger — who
// gains nothing, since a cursor only says where a walk over the caller's
// own rows resumes.
package cursor

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
)

const (
	version  = 1
	checkLen = 8
)

// ErrInvalid is a cursor that is not one of the listing it was given to.
var ErrInvalid = errors.New("cursor is not a cursor of this listing")

// Encode returns the cursor of the page after pos in the listing named
// domain, bound to parts.
func Encode(domain string, parts []string, pos store.ListPosition) string {
	b := make([]byte, 0, 1+8+1+len(pos.ID)+checkLen)
	b = append(b, version)
	b = binary.BigEndian.AppendUint64(b, uint64(pos.CreatedAt.UnixMicro()))
	b = append(b, byte(len(pos.ID)))
	b = append(b, pos.ID...)
	b = append(b, sum(domain, parts, b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode checks s against the listing named domain, bound to parts, and
// returns its position; ErrInvalid when it is not one of its cursors.
func Decode(domain string, parts []string, s string) (store.ListPosition, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	// The decoder skips \r and \n: only the one encoding of a cursor is it.
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != s || len(b) < 1+8+1+checkLen || b[0] != version {
		return store.ListPosition{}, ErrInvalid
	}
	idLen := int(b[9])
	if len(b) != 1+8+1+idLen+checkLen {
		return store.ListPosition{}, ErrInvalid
	}
	body, check := b[:len(b)-checkLen], b[len(b)-checkLen:]
	id := string(b[10 : 10+idLen])
	if !bytes.Equal(check, sum(domain, parts, body)) || id == "" || !catalog.Printable(id) {
		return store.ListPosition{}, ErrInvalid
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	return store.ListPosition{CreatedAt: at, ID: id}, nil
}

func sum(domain string, parts []string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(domain))
	for _, s := range parts {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	h.Write(body)
	return h.Sum(nil)[:checkLen]
}

// Limits of a listing's page (limit=).
const (
	DefaultLimit = 50
	MaxLimit     = 100
)

// Query reads a listing's query string: each parameter at most once and
// one of known. A malformed query, an unknown or a repeated parameter is
// a 400 problem naming it.
func Query(r *http.Request, known ...string) (url.Values, *problem.Problem) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, bad("", "the query string is malformed: %v", err)
	}
	for name, vs := range q {
		switch {
		case !slices.Contains(known, name):
			return nil, bad(name, "unknown query parameter %q; known: %s", name, strings.Join(known, ", "))
		case len(vs) > 1:
			return nil, bad(name, "query parameter %q is given %d times", name, len(vs))
		}
	}
	return q, nil
}

// Limit is q's limit, DefaultLimit when not given; anything but an
// integer from 1 to MaxLimit is a 400 problem.
func Limit(q url.Values) (int, *problem.Problem) {
	s := q.Get("limit")
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, bad("limit", "limit must be an integer from 1 to %d", MaxLimit)
	}
	return n, nil
}

// Page cuts rows, read with a limit one above limit (one more than the
// page tells whether another page follows), to the page, and reports
// whether another follows; its last row is then where the next begins.
func Page[T any](rows []T, limit int) (page []T, more bool) {
	if len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}

func bad(param, format string, args ...any) *problem.Problem {
	return &problem.Problem{Status: http.StatusBadRequest, Detail: fmt.Sprintf(format, args...), Param: param}
}
