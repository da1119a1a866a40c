package lookup

import (
	"time"

	"github.com/heraldhq/herald/cursor"
	"github.com/heraldhq/herald/store"
)

// cursorDomain names the notifications' listing in its cursors (package
// cursor), which are bound to its tenant and filters.
const cursorDomain = "herald/v1/notifications cursor"

// filters are the parts of a listing a cursor is bound to (limit is not:
// pages of one walk may differ in size).
type filters struct {
	tenant, recipient, kind, state string
	since                          *time.Time
}

func (f filters) parts() []string {
	since := ""
	if f.since != nil {
		since = f.since.UTC().Format(time.RFC3339Nano)
	}
	return []string{f.tenant, f.recipient, f.kind, f.state, since}
}

// encodeCursor returns the cursor of the page after pos.
func encodeCursor(f filters, pos store.ListPosition) string {
	return cursor.Encode(cursorDomain, f.parts(), pos)
}

// decodeCursor checks a cursor against the listing f and returns its position.
func decodeCursor(f filters, s string) (store.ListPosition, error) {
	return cursor.Decode(cursorDomain, f.parts(), s)
}
