package consumer_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/heraldhq/herald/consumer"
)

func TestPayloadHash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, a, b string }{
		{"KeyOrder", `{"account":"acc-1","amount":100}`, `{"amount":100,"account":"acc-1"}`},
		{"WhiteSpace", "{\"a\": [1, 2]}\n", `{"a":[1,2]}`},
		{"Escapes", `{"a":"\u00e9\u003c"}`, `{"a":"é<"}`},
	} {
		t.Run("Same"+tc.name, func(t *testing.T) {
			t.Parallel()
			if ha, hb := consumer.PayloadHash([]byte(tc.a)), consumer.PayloadHash([]byte(tc.b)); ha != hb {
				t.Errorf("PayloadHash(%s) = %s, PayloadHash(%s) = %s; want equal", tc.a, ha, tc.b, hb)
			}
		})
	}
	for _, tc := range []struct{ name, a, b string }{
		{"Value", `{"amount":100}`, `{"amount":500}`},
		{"NumberAsWritten", `{"amount":100}`, `{"amount":100.0}`},
		{"NotJSON", "points:100", "points:500"},
		{"InvalidUTF8", "\"\xff\"", "\"\xfe\""},
		{"LoneSurrogates", `"\ud800"`, `"\ud801"`},
		{"ReplacementCharacter", `"\ufffd"`, `"\ud800"`},
		{"TrailingData", `{"a":1}`, `{"a":1} {"a":2}`},
	} {
		t.Run("Different"+tc.name, func(t *testing.T) {
			t.Parallel()
			if ha, hb := consumer.PayloadHash([]byte(tc.a)), consumer.PayloadHash([]byte(tc.b)); ha == hb {
				t.Errorf("PayloadHash(%q) = PayloadHash(%q) = %s; want different", tc.a, tc.b, ha)
			}
		})
	}
	t.Run("RawBytesWhenNotJSON", func(t *testing.T) {
		t.Parallel()
		for _, raw := range []string{"", "points:100", "\"\xff\"", `{"a":1} {"a":2}`} {
			sum := sha256.Sum256([]byte(raw))
			if got, want := consumer.PayloadHash([]byte(raw)), hex.EncodeToString(sum[:]); got != want {
				t.Errorf("PayloadHash(%q) = %s, want the raw SHA-256 %s", raw, got, want)
			}
		}
	})
}

// Two encodings of one event are one payload; a changed amount is another.
// The hash is the SHA-256 of the canonical form, {"account":"acc-1","amount":100}
// and a newline, and is stored: it never changes between releases.
func ExamplePayloadHash() {
	sent := consumer.PayloadHash([]byte(`{"account":"acc-1","amount":100}`))
	reencoded := consumer.PayloadHash([]byte("{\n  \"amount\": 100,\n  \"account\": \"acc-1\"\n}"))
	changed := consumer.PayloadHash([]byte(`{"account":"acc-1","amount":500}`))
	fmt.Println(sent == reencoded, sent == changed)
	fmt.Println(sent)
	// Output:
	// true false
	// 7470ed1d67689f74c09a9208475dcc7ce175aa0faf543beb845ac1d95ef56d97
}
