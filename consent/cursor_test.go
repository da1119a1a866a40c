package consent

import "testing"

// FuzzCursor: a cursor reads back as the id it was made of, for its own
// tenant and recipient only, and any string that decodes is exactly the
// cursor herald would have written for that id.
func FuzzCursor(f *testing.F) {
	f.Add("t1", "r1", int64(1), encodeCursor("t1", "r1", 42))
	f.Add("t1", "r1", int64(1<<62), "")
	f.Add("", "", int64(7), "AQAAAAAAAAAE8M8xfAcMmHs")
	f.Fuzz(func(t *testing.T, tenant, recipient string, id int64, s string) {
		if id > 0 {
			c := encodeCursor(tenant, recipient, id)
			if got, err := decodeCursor(tenant, recipient, c); err != nil || got != id {
				t.Fatalf("decode(encode(%d)) = %d, %v", id, got, err)
			}
			if _, err := decodeCursor(tenant+"x", recipient, c); err == nil {
				t.Fatal("a cursor read for another tenant")
			}
			if _, err := decodeCursor(tenant, recipient+"x", c); err == nil {
				t.Fatal("a cursor read for another recipient")
			}
		}
		if got, err := decodeCursor(tenant, recipient, s); err == nil && (got <= 0 || encodeCursor(tenant, recipient, got) != s) {
			t.Fatalf("%q decoded to %d, whose cursor is %q", s, got, encodeCursor(tenant, recipient, got))
		}
	})
}
