package cursor_test

import (
	"errors"
	"testing"
	"time"

	"github.com/heraldhq/herald/cursor"
	"github.com/heraldhq/herald/store"
)

// A cursor decodes to its position in its own listing only: another
// listing's domain, or the same listing bound to other parts (a tenant,
// a filter, or parts shifted into each other), refuses it.
func TestACursorBelongsToItsListing(t *testing.T) {
	t.Parallel()
	pos := store.ListPosition{CreatedAt: time.Date(2030, 3, 14, 9, 0, 0, 123456000, time.UTC), ID: "cmp_01KJMA0FM3Q3DACF41EV4Z5WRA"}
	c := cursor.Encode("campaigns", []string{"t1", "DONE"}, pos)
	if got, err := cursor.Decode("campaigns", []string{"t1", "DONE"}, c); err != nil || got.ID != pos.ID || !got.CreatedAt.Equal(pos.CreatedAt) {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", pos, got, err)
	}
	for name, listing := range map[string]struct {
		domain string
		parts  []string
	}{
		"AnotherListing": {"notifications", []string{"t1", "DONE"}},
		"AnotherTenant":  {"campaigns", []string{"t2", "DONE"}},
		"AnotherState":   {"campaigns", []string{"t1", ""}},
		"Shifted":        {"campaigns", []string{"t1DONE", ""}},
	} {
		if _, err := cursor.Decode(listing.domain, listing.parts, c); !errors.Is(err, cursor.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
}
