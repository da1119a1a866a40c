package inbox

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"

	"github.com/heraldhq/herald/auth"
)

// A feed cursor says where the next page of a feed starts: below item seq
// Before, with or without archived items. It is opaque to the app and
// tamper-evident: 26 bytes in unpadded base64url (35 characters),
//
//	version (1) | flags (bit 0: archived) | Before (8 bytes, big-endian) | MAC (16 bytes)
//
// where MAC is the first 16 bytes of HMAC-SHA256 over the first ten bytes,
// the tenant, a NUL and the recipient, under the tenant's recipient token
// key derived for the purpose "feed-cursor" (auth.RecipientTokens.Sign).
// So a cursor reads only for the tenant and the recipient it was made for,
// and only as herald wrote it: one changed, added or missing character,
// a cursor of another recipient or tenant, or one whose key was dropped
// from the config is refused (400). A cursor signed before a key rotation
// reads while its key is still listed. Cursors are not stored and do not
// expire: the seq they hold is stable (DESIGN §4).
type feedCursor struct {
	// Before is the seq the next page reads below; at least 1.
	Before int64
	// Archived lists archived items too.
	Archived bool
}

const (
	cursorVersion = 1
	cursorPurpose = "feed-cursor"
	cursorMACLen  = 16
	cursorLen     = 2 + 8 + cursorMACLen
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
	if c.Before < 1 {
		return "", false
	}
	b := make([]byte, 2+8, cursorLen)
	b[0] = cursorVersion
	if c.Archived {
		b[1] = 1
	}
	binary.BigEndian.PutUint64(b[2:], uint64(c.Before))
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
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion || b[1] > 1 {
		return feedCursor{}, errCursor
	}
	before := binary.BigEndian.Uint64(b[2:10])
	if before < 1 || before > math.MaxInt64 {
		return feedCursor{}, errCursor
	}
	if !tokens.Check(tenant, cursorPurpose, cursorMessage(b[:10], tenant, recipient), b[10:]) {
		return feedCursor{}, errCursor
	}
	return feedCursor{Before: int64(before), Archived: b[1] == 1}, nil
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
