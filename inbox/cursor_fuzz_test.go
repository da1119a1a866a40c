package inbox

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/auth"
)

// FuzzFeedCursor holds the feed cursor's decoder to its promises on any
// input: it never panics, and only a cursor herald made decodes, for the
// tenant and the recipient it was made for.
//
// raw is decoded as it is, for the tenant tsel picks and recipient:
// whatever decodes must be, byte for byte, the cursor herald makes from
// what it says (no other spelling of a cursor reads, and no cursor herald
// did not make). Then a cursor is made from before and flags (bit 0
// archived, bit 1 a read cursor): it must
// read back as made, and never for another tenant (b lists the same key
// id and secret as a, c another) or another recipient, nor with its
// character at flip changed.
func FuzzFeedCursor(f *testing.F) {
	tokens, err := auth.NewRecipientTokens(auth.RecipientTokensConfig{Keys: map[string][]auth.RecipientKey{
		"a": {{ID: "k1", Secret: []byte("fuzz-cursor-secret-one-0123456789abcdef")}},
		"b": {{ID: "k1", Secret: []byte("fuzz-cursor-secret-one-0123456789abcdef")}},
		"c": {{ID: "k2", Secret: []byte("fuzz-cursor-secret-two-0123456789abcdef")}},
	}, TTL: time.Hour, MaxTTL: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	tenants := []string{"a", "b", "c"}
	for _, s := range []struct {
		tenant, recipient string
		c                 feedCursor
	}{
		{"a", "user-1", feedCursor{Seq: 5}}, {"a", "user-1", feedCursor{Seq: 1 << 40, Archived: true}},
		{"b", "user-1", feedCursor{Seq: 1}}, {"c", "", feedCursor{Seq: 1<<63 - 1}}, {"a", "user-2", feedCursor{Seq: 7, Read: true}},
	} {
		raw, ok := encodeCursor(tokens, s.tenant, s.recipient, s.c)
		if !ok {
			f.Fatalf("no cursor for %+v", s)
		}
		flags := uint8(0)
		if s.c.Archived {
			flags |= flagArchived
		}
		if s.c.Read {
			flags |= flagRead
		}
		f.Add(raw, uint8(0), s.recipient, s.c.Seq, flags, uint16(0))
		f.Add(raw, uint8(1), s.recipient, s.c.Seq, flags, uint16(34))
	}
	f.Add("", uint8(0), "user-1", int64(0), uint8(0), uint16(0))
	f.Add("AQAAAAAAAAAFAAAAAAAAAAAAAAAAAAAAAAAAAA", uint8(0), "user-1", int64(-1), uint8(1), uint16(7))
	f.Fuzz(func(t *testing.T, raw string, tsel uint8, recipient string, before int64, flags uint8, flip uint16) {
		tenant := tenants[int(tsel)%len(tenants)]
		if c, err := decodeCursor(tokens, tenant, recipient, raw); err == nil {
			again, ok := encodeCursor(tokens, tenant, recipient, c)
			if !ok || again != raw {
				t.Fatalf("decoded %q as %+v for %s/%q; herald writes %q (%v) for that", raw, c, tenant, recipient, again, ok)
			}
		}

		want := feedCursor{Seq: before, Archived: flags&flagArchived != 0, Read: flags&flagRead != 0}
		made, ok := encodeCursor(tokens, tenant, recipient, want)
		if ok != (before >= 1) {
			t.Fatalf("encode %+v: ok %v", want, ok)
		}
		if !ok {
			return
		}
		if got, err := decodeCursor(tokens, tenant, recipient, made); err != nil || got != want {
			t.Fatalf("made %q from %+v; it decodes as %+v, %v", made, want, got, err)
		}
		for _, other := range tenants {
			if other != tenant {
				if got, err := decodeCursor(tokens, other, recipient, made); err == nil {
					t.Fatalf("%s's cursor %q decodes for %s as %+v", tenant, made, other, got)
				}
			}
		}
		for _, other := range []string{recipient + "x", "x" + recipient, recipient[:len(recipient)/2]} {
			if other == recipient {
				continue
			}
			if got, err := decodeCursor(tokens, tenant, other, made); err == nil {
				t.Fatalf("%q's cursor %q decodes for %q as %+v", recipient, made, other, got)
			}
		}
		b := []byte(made)
		i := int(flip) % len(b)
		b[i] = cursorAlphabet[(indexOf(b[i])+1+int(flip>>8)%63)%64]
		if got, err := decodeCursor(tokens, tenant, recipient, string(b)); err == nil {
			t.Fatalf("cursor %q with character %d changed (%q) decodes as %+v", made, i, b, got)
		}
	})
}

const cursorAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func indexOf(c byte) int {
	for i := range len(cursorAlphabet) {
		if cursorAlphabet[i] == c {
			return i
		}
	}
	return 0
}
