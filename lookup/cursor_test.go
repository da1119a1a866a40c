package lookup

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

var (
	since  = time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	listed = filters{tenant: "a", recipient: "user-1", kind: "payment.approved", state: "PENDING", since: &since}
	pos    = store.ListPosition{CreatedAt: time.Date(2030, 3, 14, 9, 0, 0, 123456000, time.UTC), ID: "ntf_01KJMA0FM3Q3DACF41EV4Z5WRA"}
)

func TestCursorRoundTrips(t *testing.T) {
	t.Parallel()
	got, err := decodeCursor(listed, encodeCursor(listed, pos))
	if err != nil || got.ID != pos.ID || !got.CreatedAt.Equal(pos.CreatedAt) {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", pos, got, err)
	}
}

func TestCursorIsBoundToItsListing(t *testing.T) {
	t.Parallel()
	c := encodeCursor(listed, pos)
	other := since.Add(time.Second)
	for name, f := range map[string]filters{
		"OtherTenant":    {tenant: "b", recipient: listed.recipient, kind: listed.kind, state: listed.state, since: listed.since},
		"OtherRecipient": {tenant: "a", recipient: "user-2", kind: listed.kind, state: listed.state, since: listed.since},
		"NoRecipient":    {tenant: "a", kind: listed.kind, state: listed.state, since: listed.since},
		"OtherKind":      {tenant: "a", recipient: listed.recipient, state: listed.state, since: listed.since},
		"OtherState":     {tenant: "a", recipient: listed.recipient, kind: listed.kind, state: "SENDING", since: listed.since},
		"OtherSince":     {tenant: "a", recipient: listed.recipient, kind: listed.kind, state: listed.state, since: &other},
		"NoSince":        {tenant: "a", recipient: listed.recipient, kind: listed.kind, state: listed.state},
		// Fields cannot be shifted into each other.
		"Shifted": {tenant: "a", recipient: "user-1payment.approved", state: listed.state, since: listed.since},
	} {
		if _, err := decodeCursor(f, c); err == nil {
			t.Errorf("%s: a cursor of another listing was accepted", name)
		}
	}
}

func TestTamperedCursorIsRefused(t *testing.T) {
	t.Parallel()
	raw, err := base64.RawURLEncoding.DecodeString(encodeCursor(listed, pos))
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		for _, bit := range []byte{1, 0x80} {
			b := append([]byte(nil), raw...)
			b[i] ^= bit
			if _, err := decodeCursor(listed, base64.RawURLEncoding.EncodeToString(b)); err == nil {
				t.Errorf("byte %d xor %#x: accepted", i, bit)
			}
		}
	}
	for _, s := range []string{"", "x", "AAAA", encodeCursor(listed, pos) + "A", encodeCursor(listed, pos) + "=", "!!!!"} {
		if _, err := decodeCursor(listed, s); err == nil {
			t.Errorf("%q: accepted", s)
		}
	}
}

func FuzzCursor(f *testing.F) {
	f.Add(encodeCursor(listed, pos))
	f.Add(encodeCursor(filters{tenant: "a"}, store.ListPosition{CreatedAt: time.Unix(0, 0), ID: "x"}))
	f.Add("")
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := decodeCursor(listed, s)
		if err != nil {
			return
		}
		// Whatever is accepted encodes back to itself: nothing but what
		// encodeCursor writes is a cursor.
		if again := encodeCursor(listed, got); again != s {
			t.Errorf("accepted %q, which encodes back as %q", s, again)
		}
	})
}
