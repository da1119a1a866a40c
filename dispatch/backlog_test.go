package dispatch

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/sender"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
)

// blockedSends holds every send until release is closed.
type blockedSends struct{ release chan struct{} }

func (s blockedSends) Send(ctx context.Context, job heraldtype.Job) sender.Result {
	<-s.release
	return sender.Result{Verdict: sender.Done}
}

// TestABacklogOutlivesALookWithNoSlotFree: after a claim that came back
// full, the loop's next look finds every slot held and claims nothing;
// the backlog it knew of is still there, so intake's offers stay refused
// (a look that claimed nothing once cleared it, and offers then took the
// slots as they freed, ahead of the outbox's older rows).
func TestABacklogOutlivesALookWithNoSlotFree(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 5 {
		id := ids.New("ntf", time.Now())
		if _, err := s.NotificationCreate(context.Background(), store.NotificationCreateParams{
			Tenant: "t1", ID: id, Recipient: "r1", EventID: id, Kind: "pay", Lane: heraldtype.LaneTransactional,
			Params: json.RawMessage(`{}`), Channels: []heraldtype.Channel{heraldtype.ChannelWebhook},
		}); err != nil {
			t.Fatal(err)
		}
	}
	sends := blockedSends{release: make(chan struct{})}
	c := NewClaimer(ClaimerConfig{Lane: heraldtype.LaneTransactional, Store: s, Wake: make(chan struct{}), Sender: sends,
		Owner: "c", Concurrency: 2, Lease: time.Minute, PollInterval: 5 * time.Millisecond})
	stop := testenv.Start(t, c.Run)
	defer stop()
	defer close(sends.release)
	testenv.WaitFor(t, "both slots held", testenv.Patience, func() bool { return c.free() == 0 })
	// The polls come every 5 ms and find no slot free.
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		backlog := c.backlog
		c.mu.Unlock()
		if !backlog {
			t.Fatal("the backlog was forgotten by a look that claimed nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
