package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/store"
)

// Profile reads waiting in one batch run as one merged statement, and each
// gets what it would have got alone: the profile, or ErrNotFound for a
// recipient without one (between two that have one, and one tenant's
// recipient under another tenant's name).
func TestMergedProfileReadsMatchSingleOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t, "", Options{PipelineWorkers: 1})
	for _, p := range []store.Profile{
		{Tenant: "t1", Recipient: "ann", Language: "ko", Consent: map[heraldtype.Channel]bool{heraldtype.ChannelSMS: true}},
		{Tenant: "t1", Recipient: "bob", Language: "en"},
		{Tenant: "t2", Recipient: "ann", Language: "ja"},
	} {
		if err := s.ProfilePut(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	reads := []struct{ tenant, recipient, language string }{
		{"t1", "ann", "ko"}, {"t1", "nobody", ""}, {"t1", "bob", "en"}, {"t2", "bob", ""}, {"t2", "ann", "ja"}, {"t1", "ann", "ko"},
	}
	var merged []int
	var mu sync.Mutex
	s.pipe.merged = func(n int) { mu.Lock(); merged = append(merged, n); mu.Unlock() }
	s.pipe.rerun = func(n int) { t.Errorf("a batch of %d was rerun statement by statement", n) }
	queued, release := hold(t, s.pipe, s.pool, 4344)
	got := make([]store.Profile, len(reads))
	errs := make([]error, len(reads))
	wait := queue(t, queued, len(reads), func(i int) { got[i], errs[i] = s.ProfileGet(ctx, reads[i].tenant, reads[i].recipient) })
	release()
	wait()
	mu.Lock()
	if len(merged) != 1 || merged[0] != len(reads) {
		t.Fatalf("merged statements stood for %v reads, want one for %d", merged, len(reads))
	}
	mu.Unlock()
	for i, r := range reads {
		alone, aloneErr := s.ProfileGet(ctx, r.tenant, r.recipient)
		switch {
		case r.language == "":
			if !errors.Is(errs[i], store.ErrNotFound) || !errors.Is(aloneErr, store.ErrNotFound) {
				t.Errorf("read %d (%s/%s): %v merged, %v alone; want ErrNotFound", i, r.tenant, r.recipient, errs[i], aloneErr)
			}
		case errs[i] != nil || got[i].Language != r.language || !got[i].UpdatedAt.Equal(alone.UpdatedAt) ||
			fmt.Sprint(got[i]) != fmt.Sprint(alone):
			t.Errorf("read %d (%s/%s): %+v (%v) merged, %+v alone", i, r.tenant, r.recipient, got[i], errs[i], alone)
		}
	}
}
