package ids

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOrderedAscendUniqueAndKeepTheTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	a := Ordered("ntf", now, 10_000)
	b := Ordered("ntf", now, 10_000)
	if !slices.IsSorted(a) || len(slices.Compact(slices.Clone(a))) != len(a) {
		t.Fatal("Ordered's ids do not strictly ascend")
	}
	prefix := New("ntf", now)[:len("ntf_")+10]
	for _, id := range []string{a[0], a[9_999], b[0]} {
		if len(id) != len("ntf_")+26 || !strings.HasPrefix(id, prefix) {
			t.Fatalf("id %q: want ntf_ and 26 characters, with New's time part %s", id, prefix)
		}
	}
	if a[0] == b[0] || a[0][:len("ntf_")+13] != b[0][:len("ntf_")+13] {
		t.Fatalf("two calls: %s and %s; want the same time and position, other random bits", a[0], b[0])
	}
}
