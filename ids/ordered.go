package ids

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// Ordered returns n ids like New's with now's time part, in ascending
// order: after the time, 16 bits of their position, then 64 random bits,
// so they still cannot be guessed. A campaign names a page of recipients'
// notifications with them: written in that order, their index entries
// land side by side instead of all over the index.
func Ordered(prefix string, now time.Time, n int) []string {
	out := make([]string, n)
	ms := uint64(now.UnixMilli())
	for i := range out {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], ms<<16|uint64(i)&0xffff)
		_, _ = rand.Read(b[8:])
		out[i] = prefix + "_" + encode(b)
	}
	return out
}
