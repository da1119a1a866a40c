package lookup

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"

	"github.com/heraldhq/herald/catalog"
	"github.com/heraldhq/herald/store"
)

// A list cursor is opaque to clients: base64url (no padding) of
//
//	version (1 byte, 1) | created_at (int64 Unix microseconds) |
//	len(id) (1 byte) | id | check (8 bytes)
//
// where check is the first 8 bytes of SHA-256 over a domain string, the
// listing's tenant and filters, and the bytes before it. A cursor is valid
// only for the listing that issued it: a changed byte, another tenant or
// other filters make it fail the check (400). The check is not keyed: it
// catches corruption and mix-ups, not a forger — who gains nothing, since a
// cursor only says where a walk over the caller's own notifications resumes.

const (
	cursorVersion = 1
	cursorDomain  = "herald/v1/notifications cursor"
	checkLen      = 8
)

var errBadCursor = errors.New("cursor is not a cursor of this listing")

// filters are the parts of a listing a cursor is bound to (limit is not:
// pages of one walk may differ in size).
type filters struct {
	tenant, recipient, kind, state string
	since                          *time.Time
}

func (f filters) sum(body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(cursorDomain))
	since := ""
	if f.since != nil {
		since = f.since.UTC().Format(time.RFC3339Nano)
	}
	for _, s := range []string{f.tenant, f.recipient, f.kind, f.state, since} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	h.Write(body)
	return h.Sum(nil)[:checkLen]
}

// encodeCursor returns the cursor of the page after pos.
func encodeCursor(f filters, pos store.ListPosition) string {
	b := make([]byte, 0, 1+8+1+len(pos.ID)+checkLen)
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(pos.CreatedAt.UnixMicro()))
	b = append(b, byte(len(pos.ID)))
	b = append(b, pos.ID...)
	b = append(b, f.sum(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor checks a cursor against the listing f and returns its position.
func decodeCursor(f filters, s string) (store.ListPosition, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	// The decoder skips \r and \n: only the one encoding of a cursor is it.
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != s || len(b) < 1+8+1+checkLen || b[0] != cursorVersion {
		return store.ListPosition{}, errBadCursor
	}
	idLen := int(b[9])
	if len(b) != 1+8+1+idLen+checkLen {
		return store.ListPosition{}, errBadCursor
	}
	body, check := b[:len(b)-checkLen], b[len(b)-checkLen:]
	id := string(b[10 : 10+idLen])
	if !bytes.Equal(check, f.sum(body)) || id == "" || !catalog.Printable(id) {
		return store.ListPosition{}, errBadCursor
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	return store.ListPosition{CreatedAt: at, ID: id}, nil
}
