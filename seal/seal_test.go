package seal

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func ring(t testing.TB, ids ...string) *Keyring {
	t.Helper()
	var keys []Key
	for _, id := range ids {
		keys = append(keys, Key{ID: id, Secret: []byte(strings.Repeat(id, 32))})
	}
	k, err := New(keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := ring(t, "k1")
	const phone = "+821012345678"
	s := k.Seal(Address, "t1", phone)
	if !strings.HasPrefix(s, "hs1:k1:") || strings.Contains(s, "1012345678") {
		t.Fatalf("sealed = %q, want hs1:k1:… without the number", s)
	}
	if s2 := k.Seal(Address, "t1", phone); s2 == s {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
	if got, err := k.Open(Address, "t1", s); err != nil || got != phone {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Bound to its purpose and tenant.
	for _, c := range []struct{ purpose, tenant string }{{Device, "t1"}, {Address, "t2"}, {Params, "t1"}} {
		if _, err := k.Open(c.purpose, c.tenant, s); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Open(%s, %s) of a t1 address: err %v, want ErrCorrupt", c.purpose, c.tenant, err)
		}
	}
	// Changed, truncated, garbled.
	for _, bad := range []string{s[:len(s)-2], s[:len(Prefix)+3], s + "A", "hs1:k1:%%%", "hs1:k1", strings.Replace(s, ":k1:", ":k1:A", 1)} {
		if _, err := k.Open(Address, "t1", bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Open(%q): err %v, want ErrCorrupt", bad, err)
		}
	}
	// Plain values pass; empty stays empty.
	if got, err := k.Open(Address, "t1", phone); err != nil || got != phone {
		t.Fatalf("Open(plain) = %q, %v", got, err)
	}
	if k.Seal(Address, "t1", "") != "" {
		t.Fatal("an empty value was sealed")
	}
}

func TestRotation(t *testing.T) {
	old := ring(t, "k1")
	s := old.Seal(Device, "t1", "token-1")
	next := ring(t, "k2", "k1")
	if got, err := next.Open(Device, "t1", s); err != nil || got != "token-1" {
		t.Fatalf("the new ring opens the old key's value: %q, %v", got, err)
	}
	if KeyID(next.Seal(Device, "t1", "x")) != "k2" {
		t.Fatal("the new ring does not seal with its first key")
	}
	only := ring(t, "k2")
	_, err := only.Open(Device, "t1", s)
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("a ring without k1: err %v, want ErrUnknownKey naming k1", err)
	}
	var none *Keyring
	if _, err := none.Open(Device, "t1", s); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("nil ring: err %v, want ErrNoKeys", err)
	}
	if none.Seal(Device, "t1", "x") != "x" {
		t.Fatal("a nil ring sealed")
	}
}

func TestJSON(t *testing.T) {
	k := ring(t, "k1")
	params := json.RawMessage(`{"patient":"김민준","phone":"010-1234-5678"}`)
	sealed := k.SealJSON("t1", params)
	var s string
	if err := json.Unmarshal(sealed, &s); err != nil || !Sealed(s) {
		t.Fatalf("SealJSON = %s: not a JSON string holding a sealed value", sealed)
	}
	if strings.Contains(string(sealed), "1234") || JSONKeyID(sealed) != "k1" {
		t.Fatalf("SealJSON = %s", sealed)
	}
	got, err := k.OpenJSON("t1", sealed)
	if err != nil || string(got) != string(params) {
		t.Fatalf("OpenJSON = %s, %v", got, err)
	}
	if got, err := k.OpenJSON("t2", sealed); err == nil {
		t.Fatalf("another tenant opened the params: %s", got)
	}
	if got, err := (*Keyring)(nil).OpenJSON("t1", params); err != nil || string(got) != string(params) {
		t.Fatalf("plain params through a nil ring: %s, %v", got, err)
	}
	if _, err := k.OpenJSON("t1", json.RawMessage(`"not sealed"`)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a plain JSON string as params: err %v, want ErrCorrupt", err)
	}
}

func TestNewRefuses(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	for _, keys := range [][]Key{
		nil,
		{{ID: "", Secret: secret}},
		{{ID: "K1", Secret: secret}},
		{{ID: "k1:x", Secret: secret}},
		{{ID: strings.Repeat("k", 17), Secret: secret}},
		{{ID: "k1", Secret: secret[:31]}},
		{{ID: "k1", Secret: secret}, {ID: "k1", Secret: secret}},
	} {
		if _, err := New(keys); err == nil {
			t.Errorf("New(%d keys, first %q) accepted", len(keys), firstID(keys))
		} else if strings.Contains(err.Error(), string(secret[:8])) {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
}

func firstID(keys []Key) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0].ID
}

// FuzzOpen: no input makes Open panic, and what opens was sealed.
func FuzzOpen(f *testing.F) {
	k := ring(f, "k1")
	f.Add(k.Seal(Address, "t1", "+821012345678"))
	f.Add("hs1:k1:")
	f.Add("hs1::AAAA")
	f.Add("plain")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := k.Open(Address, "t1", s)
		if err == nil && Sealed(s) && got == "" {
			t.Fatalf("a sealed value opened to nothing: %q", s)
		}
		_, _ = k.OpenJSON("t1", json.RawMessage(s))
	})
}

// BenchmarkParams is what sealing costs one notification: its params
// sealed at intake and opened by the sender.
func BenchmarkParams(b *testing.B) {
	k := ring(b, "k1")
	params := json.RawMessage(`{"amount":12000,"merchant":"서울커피 강남점","patient":"김민준","when":"3월 14일 오후 2시"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.OpenJSON("shop", k.SealJSON("shop", params)); err != nil {
			b.Fatal(err)
		}
	}
}
