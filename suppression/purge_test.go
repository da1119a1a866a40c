package suppression_test

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/suppression"
)

// due is a store with n keys due for the purge.
type due struct {
	n     int
	calls []store.EventKeyPurgeParams
}

func (d *due) EventKeyPurge(_ context.Context, p store.EventKeyPurgeParams) (int, error) {
	d.calls = append(d.calls, p)
	n := min(d.n, p.Limit)
	d.n -= n
	return n, nil
}

// A round deletes in batches until one comes back short, and stops at
// MaxBatches: a backlog is worked off over several rounds.
func TestPurgeDeletesInBatchesUpToTheCap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		due, max       int
		deleted, stmts int
	}{
		{"Empty", 0, 10, 0, 1},
		{"ShortBatchEndsTheRound", 25, 10, 25, 3},
		{"FullBatchesUpToTheCap", 100, 4, 40, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := &due{n: c.due}
			p := suppression.NewPurger(suppression.PurgeConfig{Store: st, TTL: 24 * time.Hour, Batch: 10, MaxBatches: c.max})
			n, err := p.Purge(context.Background())
			if err != nil || n != c.deleted || len(st.calls) != c.stmts {
				t.Fatalf("Purge = %d, %v in %d statements; want %d in %d", n, err, len(st.calls), c.deleted, c.stmts)
			}
			for _, call := range st.calls {
				if call.Keep != 24*time.Hour || call.Limit != 10 {
					t.Fatalf("statement %+v, want keep 24h and limit 10", call)
				}
			}
		})
	}
}
