package canonical_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/heraldhq/herald/canonical"
)

func TestJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, a, b string }{
		{"KeyOrder", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"NestedKeyOrder", `{"p":{"y":[1,{"d":1,"c":2}],"x":"s"}}`, `{"p":{"x":"s","y":[1,{"c":2,"d":1}]}}`},
		{"WhiteSpace", " {\n\t\"a\" : [ 1 , 2 ] }\n", `{"a":[1,2]}`},
		{"HTMLNotEscaped", `{"a":"<b>&</b>"}`, `{"a":"\u003cb\u003e\u0026\u003c/b\u003e"}`},
		{"EscapesResolved", `{"a":"\u0041"}`, `{"a":"A"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ca, err := canonical.JSON([]byte(tc.a))
			if err != nil {
				t.Fatal(err)
			}
			cb, err := canonical.JSON([]byte(tc.b))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ca, cb) {
				t.Errorf("JSON(%s) = %s, JSON(%s) = %s; want equal", tc.a, ca, tc.b, cb)
			}
		})
	}

	t.Run("NumbersKeptAsWritten", func(t *testing.T) {
		t.Parallel()
		for _, n := range []string{"12000", "12000.0", "1.2e4", "-0", "12345678901234567890", "1E400"} {
			c, err := canonical.JSON([]byte(`{"n":` + n + `}`))
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if want := `{"n":` + n + "}\n"; string(c) != want {
				t.Errorf("JSON(%s) = %q, want %q", n, c, want)
			}
		}
	})

	t.Run("InvalidJSONRefused", func(t *testing.T) {
		t.Parallel()
		for _, in := range []string{``, `{`, `{"a":}`, `nul`} {
			if _, err := canonical.JSON([]byte(in)); err == nil {
				t.Errorf("JSON(%q) accepted invalid JSON", in)
			}
		}
	})

	t.Run("DataAfterTheValueRefused", func(t *testing.T) {
		t.Parallel()
		for _, in := range []string{`{"a":1} {"b":2}`, `{"a":1}}`, `[1]]`, `1 2`, `{"a":1} x`} {
			if _, err := canonical.JSON([]byte(in)); err == nil {
				t.Errorf("JSON(%q) accepted data after the first value", in)
			}
		}
	})

	// Stored idempotency-key hashes depend on these exact bytes.
	t.Run("OutputIsStable", func(t *testing.T) {
		t.Parallel()
		in := ` {"z":[3,{"y":"<&>","x":null}],"a":"\u00e9t\u00e9","m":1.50} `
		want := "{\"a\":\"été\",\"m\":1.50,\"z\":[3,{\"x\":null,\"y\":\"<&>\"}]}\n"
		got, err := canonical.JSON([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("JSON(%s) = %q, want %q", in, got, want)
		}
	})
}

// FuzzCanonical checks that, for any valid JSON document, JSON does not
// panic, answers valid JSON with the same meaning, and is idempotent.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"recipient":"user-1","event_id":"evt-1","kind":"payment.approved","params":{"amount":12000,"merchant":"Cafe Mori"}}`,
		`{"b":1,"a":{"d":[1,2,{"f":null,"e":true}],"c":"x"}}`,
		`{"a":1,"a":2}`,
		`[1, 1.0, 1e3, -0, 1E400, 12345678901234567890]`,
		`"\u2028\u2029<>&\ud800"`,
		"\"\xff\xfe\"",
		`{"\u00e9":"é","e\u0301":1}`,
		`  null  `,
		`{}`,
		`[[[[[[[[[[]]]]]]]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c1, err := canonical.JSON(raw)
		if !json.Valid(raw) {
			return // JSON may refuse it; it must only not panic
		}
		if err != nil {
			t.Fatalf("JSON(%q) refused valid JSON: %v", raw, err)
		}
		if !json.Valid(c1) {
			t.Fatalf("JSON(%q) = %q, not valid JSON", raw, c1)
		}
		c2, err := canonical.JSON(c1)
		if err != nil {
			t.Fatalf("JSON(Canonical(%q)) = %v", raw, err)
		}
		if !bytes.Equal(c1, c2) {
			t.Fatalf("not idempotent:\n input  %q\n once   %q\n twice  %q", raw, c1, c2)
		}
		// The canonical form means what the input meant.
		if a, b := decodeAny(t, raw), decodeAny(t, c1); !reflect.DeepEqual(a, b) {
			t.Fatalf("JSON(%q) = %q changes the value: %#v vs %#v", raw, c1, a, b)
		}
	})
}

func decodeAny(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	return v
}
