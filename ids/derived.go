package ids

import (
	"crypto/sha256"
	"encoding/binary"
)

// Derived returns prefix + "_" + an id that sorts with id (an id New made):
// id's time part and, in place of the random bits, 80 bits of the SHA-256
// of parts (each length-prefixed, so no two lists hash the same input). The
// same id and parts always give the same result: a campaign names each
// recipient's notification this way, so writing it twice writes one row.
// An id that is not New's gives a zero time part.
func Derived(prefix, id string, parts ...string) string {
	h := sha256.New()
	for _, s := range parts {
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		h.Write([]byte(s))
	}
	var b [16]byte
	copy(b[6:], h.Sum(nil)[:10])
	out := encode(b)
	// The first 10 characters carry the 48 bits of milliseconds; the last
	// 16 the 80 other bits.
	if i := len(id) - 26; i > 0 && id[i-1] == '_' {
		out = id[i:i+10] + out[10:]
	}
	return prefix + "_" + out
}
