package inbox

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"

	"github.com/heraldhq/herald/auth"
)

// A cursor is a place in a recipient's feed, handed to the app and taken
// back: a page's next_cursor (where the next page starts: below item seq
// Seq, with or without archived items) or its read_cursor (POST
// /v1/me/read {"all": true, "up_to_cursor"}: every item up to and
// including seq Seq, the page's newest, so items that arrived after the
// app's sync stay unread). It is opaque to the app and tamper-evident: 26
// bytes in unpadded base64url (35 characters),
//
//	version (1) | flags (bit 0: archived, bit 1: a read cursor) | Seq (8 bytes, big-endian) | MAC (16 bytes)
//
// where MAC is the first 16 bytes of HMAC-SHA256 over the first ten bytes,
// the tenant, a NUL and the recipient, under the tenant's recipient token
// key derived for the purpose "feed-cursor" (auth.RecipientTokens.Sign).
// So a cursor reads only for the tenant and the recipient it was made for,
// only as herald wrote it and only for its own use: one changed, added or
// missing character, a cursor of another recipient or tenant, a read
// cursor given as a page's (or the reverse), or one whose key was dropped
// from the config is refused (400). A cursor signed before a key rotation
// reads while its key is still listed. Cursors are not stored and do not
// expire: the seq they hold is stable (DESIGN §4).
type feedCursor struct {
	// Seq is where the next page reads below (a page cursor) or the seq
	// read marking goes up to (a read cursor); at least 1.
	Seq int64
	// Archived lists archived items too (a page cursor).
	Archived bool
	// Read: a read cursor.
	Read bool
}

const (
	cursorVersion = 1
	cursorPurpose = "feed-cursor"
	cursorMACLen  = 16
	cursorLen     = 2 + 8 + cursorMACLen
	flagArchived  = 1
	flagRead      = 2
)

// cursorEncoding is base64url without padding, refusing the spellings
// that decode to the same bytes (non-zero trailing bits) and line breaks.
var cursorEncoding = base64.RawURLEncoding.Strict()

// errCursor is every reason a cursor is refused; the answer does not say
// which.
var errCursor = errors.New("inbox: not a valid feed cursor")

// encodeCursor returns c as a cursor for recipient of tenant; ok is false
// if the tenant has no keys (it then has no tokens either).
func encodeCursor(tokens *auth.RecipientTokens, tenant, recipient string, c feedCursor) (string, bool) {
	if c.Seq < 1 {
		return "", false
	}
	b := make([]byte, 2+8, cursorLen)
	b[0] = cursorVersion
	if c.Archived {
		b[1] |= flagArchived
	}
	if c.Read {
		b[1] |= flagRead
	}
	binary.BigEndian.PutUint64(b[2:], uint64(c.Seq))
	mac, ok := tokens.Sign(tenant, cursorPurpose, cursorMessage(b, tenant, recipient))
	if !ok {
		return "", false
	}
	return cursorEncoding.EncodeToString(append(b, mac[:cursorMACLen]...)), true
}

// decodeCursor reads a cursor encodeCursor made for recipient of tenant,
// or fails with errCursor.
func decodeCursor(tokens *auth.RecipientTokens, tenant, recipient, s string) (feedCursor, error) {
	if len(s) != cursorEncoding.EncodedLen(cursorLen) {
		return feedCursor{}, errCursor
	}
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion || b[1]&^(flagArchived|flagRead) != 0 {
		return feedCursor{}, errCursor
	}
	seq := binary.BigEndian.Uint64(b[2:10])
	if seq < 1 || seq > math.MaxInt64 {
		return feedCursor{}, errCursor
	}
	if !tokens.Check(tenant, cursorPurpose, cursorMessage(b[:10], tenant, recipient), b[10:]) {
		return feedCursor{}, errCursor
	}
	return feedCursor{Seq: int64(seq), Archived: b[1]&flagArchived != 0, Read: b[1]&flagRead != 0}, nil
}

// cursorMessage is what a cursor's MAC covers: its fields, then whose it
// is. The fields have a fixed length and the key is the tenant's own, so
// within a tenant no two (fields, recipient) give the same message.
func cursorMessage(fields []byte, tenant, recipient string) []byte {
	m := make([]byte, 0, len(fields)+len(tenant)+1+len(recipient))
	m = append(m, fields...)
	m = append(m, tenant...)
	m = append(m, 0)
	return append(m, recipient...)
}
