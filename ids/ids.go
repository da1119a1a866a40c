// Package ids makes notification ids: a prefix and 26 characters of
// Crockford base32 over 48 bits of milliseconds and 80 random bits, so ids
// sort by creation time and cannot be guessed.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// New returns prefix + "_" + a time-ordered random id.
func New(prefix string, now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return prefix + "_" + encode(b)
}

// encode writes 128 bits as 26 base32 characters (the top two bits are zero).
func encode(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
