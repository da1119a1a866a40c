package locale

import "testing"

func TestPick(t *testing.T) {
	cases := []struct {
		available []string
		lang      string
		want      string
	}{
		{[]string{"ko", "en", "default"}, "ko", "ko"},
		{[]string{"ko", "en", "default"}, "ko-KR", "ko"},
		{[]string{"ko", "en", "default"}, "en-US", "en"},
		{[]string{"ko", "en", "en-gb", "default"}, "en-GB", "en-gb"},
		{[]string{"ko", "en", "default"}, "fr", "default"},
		{[]string{"ko", "en", "default"}, "", "default"},
		{[]string{"ko", "en", "default"}, "not a tag!", "default"},
		{[]string{"default", "ko"}, "ja", "default"},
		{[]string{""}, "ko", ""},
		{[]string{"ko", "en"}, "fr", "ko"},
		{[]string{"zh", "zh-hant"}, "zh-TW", "zh-hant"},
		{[]string{"ko", "EN"}, "en", "EN"},
	}
	for _, c := range cases {
		i := Pick(c.available, c.lang)
		if i < 0 || c.available[i] != c.want {
			t.Errorf("Pick(%q, %q) = %d, want %q", c.available, c.lang, i, c.want)
		}
	}
	if Pick(nil, "ko") != -1 {
		t.Error("Pick(nil) != -1")
	}
}

func TestValid(t *testing.T) {
	for _, k := range []string{"ko", "en-gb", "default", "zh-Hant", "en_GB"} {
		if !Valid(k) {
			t.Errorf("Valid(%q) = false", k)
		}
	}
	for _, k := range []string{"", "english!", "x"} {
		if Valid(k) {
			t.Errorf("Valid(%q) = true", k)
		}
	}
}

// BenchmarkPick is Pick for a kind with three locales, as every send and
// inbox write of such a kind calls it.
func BenchmarkPick(b *testing.B) {
	available := []string{"default", "en", "ko"}
	b.ReportAllocs()
	for b.Loop() {
		Pick(available, "ko-KR")
	}
}
