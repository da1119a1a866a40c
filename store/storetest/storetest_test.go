package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/clock"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/internal/testsqlite"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/store/sqlite"
	"github.com/heraldhq/herald/store/storetest"
)

// The suite holds the drivers to the promise only if none of its checks can
// pass when the store fails. TestSuiteFailsWhenAStoreCallFails runs it, in a
// child process where failing is the expected outcome, against SQLite
// wrapped so that the store calls made from one place in the suite (a line
// of storetest) do their work and then report an error with zero results,
// as a store whose connection dropped after the commit would; once for each
// such place. Every test that reaches that place must fail: one that passes
// has a check that discards an error.

// erringMethods are the methods the suite calls; a method the suite stops
// calling fails the test, so the list cannot go stale unnoticed.
var erringMethods = []string{
	"NotificationCreate", "NotificationGet", "NotificationCancelled", "IdempotencyKeysSweep",
	"OutboxClaim", "OutboxComplete", "OutboxRetry", "OutboxMarkPublished", "OutboxExtend", "OutboxReclaimExpired", "OutboxExpire", "OutboxBacklog",
	"DeliveryGet", "DeliveryClaim", "DeliveryRecord", "DeliveryDecide", "DeliverySweepStale",
	"ProfileGet", "ProfilePut", "ParkedList", "ParkedRequeue", "ParkedRestore", "ParkedDiscard", "ParkedDiscardList",
	"NotificationList", "AttemptList",
	"InboxFeed", "InboxItemsAfter", "InboxBadge", "InboxMarkRead", "InboxArchive", "InboxRecount", "InboxPurge",
}

const helperEnv = "STORETEST_ERRING_HELPER"

func TestSuiteFailsWhenAStoreCallFails(t *testing.T) {
	t.Parallel()
	// The child runs the whole suite once per call site; what it checks
	// (each test fails when a store call fails) the race detector does not
	// bear on, and under it the child took three minutes of CI's fifteen.
	// The suite itself runs under -race in store/sqlite and store/postgres.
	if testenv.WithoutRace(t) {
		return
	}
	// The child runs the whole suite once per call site: give it the
	// test binary's own deadline (less a minute to report), not a fixed
	// five minutes, which a loaded machine came within two seconds of.
	limit := 10 * time.Minute
	if d, ok := t.Deadline(); ok {
		limit = time.Until(d) - time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperErringStore$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the suite against erring stores did not finish in %s:\n%s", limit.Round(time.Second), lastLines(out, 40))
	case !strings.Contains(string(out), "--- PASS: TestHelperErringStore/record "):
		t.Fatalf("the suite did not pass against the store passed through unchanged:\n%s", lastLines(out, 40))
	case err == nil:
		t.Fatalf("the suite passed against stores whose calls fail:\n%s", lastLines(out, 40))
	}
	erred := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^ERRED \S+ (\w+)$`).FindAllStringSubmatch(string(out), -1) {
		erred[m[1]] = true
	}
	for _, m := range erringMethods {
		if !erred[m] {
			t.Errorf("no test of the suite called %s:\n%s", m, lastLines(out, 40))
		}
	}
	holes := regexp.MustCompile(`(?m)^HOLE .*$`).FindAllString(string(out), -1)
	slices.Sort(holes)
	if len(holes) > 0 {
		t.Errorf("%d tests passed although a store call they made failed:\n%s", len(holes), strings.Join(holes, "\n"))
	}
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestHelperErringStore is the child of TestSuiteFailsWhenAStoreCallFails:
// its tests are meant to fail. It first runs the suite through the wrapper
// without failing anything ("record"), noting the places each test calls
// the store from; then, per place, the tests that reached it: until they
// reach it again they do what they did in the record run.
func TestHelperErringStore(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("run by TestSuiteFailsWhenAStoreCallFails")
	}
	var mu sync.Mutex
	reached := map[string]map[string]bool{} // place → tests
	harness := func(place string) storetest.Harness {
		return storetest.Harness{Open: func(t *testing.T, clk clock.Clock) store.Store {
			// The suite's own name for the test, the same in every run.
			test := strings.Join(strings.Split(t.Name(), "/")[2:], "/")
			mu.Lock()
			skip := place != "" && !reached[place][test]
			mu.Unlock()
			if skip {
				t.Skip("does not reach " + place)
			}
			s, err := sqlite.Open(context.Background(), testsqlite.Path(t), sqlite.Options{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			e := &erring{Store: s, place: place, reached: func(p string) {
				mu.Lock()
				defer mu.Unlock()
				if reached[p] == nil {
					reached[p] = map[string]bool{}
				}
				reached[p][test] = true
			}}
			t.Cleanup(func() {
				if !e.erred.Load() {
					return
				}
				fmt.Printf("ERRED %s\n", place)
				if !t.Failed() {
					fmt.Printf("HOLE %s passed though the store call at %s failed\n", test, place)
				}
			})
			return e
		}}
	}
	t.Run("record", func(t *testing.T) { storetest.Run(t, harness("")) })
	mu.Lock()
	places := slices.Sorted(maps.Keys(reached))
	mu.Unlock()
	for _, place := range places {
		t.Run(place, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, harness(place))
		})
	}
}

var errInjected = errors.New("storetest: injected failure")

// erring is a store whose calls from place (a line of the suite and the
// method: "parked.go:99 OutboxComplete") report errInjected after doing
// their work. It tells reached every place it is called from.
type erring struct {
	store.Store
	place   string
	reached func(place string)
	erred   atomic.Bool
}

// fail passes v and err through, unless the call came from the erring
// place: then it returns the zero value and errInjected.
func fail[T any](e *erring, method string, v T, err error) (T, error) {
	place := callPlace(method)
	e.reached(place)
	if place != e.place {
		return v, err
	}
	e.erred.Store(true)
	var zero T
	return zero, errInjected
}

// callPlace names the line of the suite (package storetest) that called the
// store, with the method called.
func callPlace(method string) string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/heraldhq/herald/store/storetest.") && !strings.HasSuffix(f.File, "_test.go") {
			return fmt.Sprintf("%s:%d %s", filepath.Base(f.File), f.Line, method)
		}
		if !more {
			return "outside-the-suite " + method
		}
	}
}

func (e *erring) NotificationCreate(ctx context.Context, p store.NotificationCreateParams) (store.NotificationCreateResult, error) {
	v, err := e.Store.NotificationCreate(ctx, p)
	return fail(e, "NotificationCreate", v, err)
}

func (e *erring) NotificationGet(ctx context.Context, tenant, id string) (store.NotificationView, error) {
	v, err := e.Store.NotificationGet(ctx, tenant, id)
	return fail(e, "NotificationGet", v, err)
}

func (e *erring) IdempotencyKeysSweep(ctx context.Context) (int, error) {
	v, err := e.Store.IdempotencyKeysSweep(ctx)
	return fail(e, "IdempotencyKeysSweep", v, err)
}

func (e *erring) OutboxClaim(ctx context.Context, p store.OutboxClaimParams) ([]store.Claimed, error) {
	v, err := e.Store.OutboxClaim(ctx, p)
	return fail(e, "OutboxClaim", v, err)
}

func (e *erring) OutboxComplete(ctx context.Context, f store.Fence, state heraldtype.OutboxState, reason string) (bool, error) {
	v, err := e.Store.OutboxComplete(ctx, f, state, reason)
	return fail(e, "OutboxComplete", v, err)
}

func (e *erring) OutboxRetry(ctx context.Context, p store.OutboxRetryParams) (bool, error) {
	v, err := e.Store.OutboxRetry(ctx, p)
	return fail(e, "OutboxRetry", v, err)
}

func (e *erring) OutboxMarkPublished(ctx context.Context, fences []store.Fence) (int, error) {
	v, err := e.Store.OutboxMarkPublished(ctx, fences)
	return fail(e, "OutboxMarkPublished", v, err)
}

func (e *erring) OutboxExtend(ctx context.Context, fences []store.Fence, lease time.Duration) (int, error) {
	v, err := e.Store.OutboxExtend(ctx, fences, lease)
	return fail(e, "OutboxExtend", v, err)
}

func (e *erring) OutboxReclaimExpired(ctx context.Context) (int, error) {
	v, err := e.Store.OutboxReclaimExpired(ctx)
	return fail(e, "OutboxReclaimExpired", v, err)
}

func (e *erring) OutboxExpire(ctx context.Context, limit int) ([]store.Expired, error) {
	v, err := e.Store.OutboxExpire(ctx, limit)
	return fail(e, "OutboxExpire", v, err)
}

func (e *erring) OutboxBacklog(ctx context.Context) (map[heraldtype.Lane]int, error) {
	v, err := e.Store.OutboxBacklog(ctx)
	return fail(e, "OutboxBacklog", v, err)
}

func (e *erring) DeliveryGet(ctx context.Context, messageID string) (store.Delivery, error) {
	v, err := e.Store.DeliveryGet(ctx, messageID)
	return fail(e, "DeliveryGet", v, err)
}

func (e *erring) DeliveryClaim(ctx context.Context, p store.DeliveryClaimParams) (store.DeliveryClaimResult, error) {
	v, err := e.Store.DeliveryClaim(ctx, p)
	return fail(e, "DeliveryClaim", v, err)
}

func (e *erring) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	v, err := e.Store.DeliveryRecord(ctx, p)
	return fail(e, "DeliveryRecord", v, err)
}

func (e *erring) DeliveryDecide(ctx context.Context, p store.DeliveryDecideParams) (bool, error) {
	v, err := e.Store.DeliveryDecide(ctx, p)
	return fail(e, "DeliveryDecide", v, err)
}

func (e *erring) DeliverySweepStale(ctx context.Context, olderThan time.Duration) ([]store.StaleClaim, error) {
	v, err := e.Store.DeliverySweepStale(ctx, olderThan)
	return fail(e, "DeliverySweepStale", v, err)
}

func (e *erring) ProfileGet(ctx context.Context, tenant, recipient string) (store.Profile, error) {
	v, err := e.Store.ProfileGet(ctx, tenant, recipient)
	return fail(e, "ProfileGet", v, err)
}

func (e *erring) ProfilePut(ctx context.Context, p store.Profile) error {
	_, err := fail(e, "ProfilePut", struct{}{}, e.Store.ProfilePut(ctx, p))
	return err
}

func (e *erring) ParkedList(ctx context.Context, p store.ParkedListParams) ([]store.ParkedEntry, error) {
	v, err := e.Store.ParkedList(ctx, p)
	return fail(e, "ParkedList", v, err)
}

func (e *erring) ParkedRequeue(ctx context.Context, p store.ParkedRequeueParams) ([]store.ParkedEntry, error) {
	v, err := e.Store.ParkedRequeue(ctx, p)
	return fail(e, "ParkedRequeue", v, err)
}

func (e *erring) ParkedRestore(ctx context.Context, p store.ParkedRestoreParams) (bool, error) {
	v, err := e.Store.ParkedRestore(ctx, p)
	return fail(e, "ParkedRestore", v, err)
}

func (e *erring) NotificationCancelled(ctx context.Context, id string) (bool, error) {
	v, err := e.Store.NotificationCancelled(ctx, id)
	return fail(e, "NotificationCancelled", v, err)
}

func (e *erring) ParkedDiscard(ctx context.Context, p store.ParkedDiscardParams) (store.ParkedDiscarded, error) {
	v, err := e.Store.ParkedDiscard(ctx, p)
	return fail(e, "ParkedDiscard", v, err)
}

func (e *erring) ParkedDiscardList(ctx context.Context, p store.ParkedDiscardListParams) ([]store.ParkedDiscardEntry, error) {
	v, err := e.Store.ParkedDiscardList(ctx, p)
	return fail(e, "ParkedDiscardList", v, err)
}

func (e *erring) NotificationList(ctx context.Context, p store.NotificationListParams) ([]store.NotificationView, error) {
	v, err := e.Store.NotificationList(ctx, p)
	return fail(e, "NotificationList", v, err)
}

func (e *erring) AttemptList(ctx context.Context, messageIDs []string) ([]store.Attempt, error) {
	v, err := e.Store.AttemptList(ctx, messageIDs)
	return fail(e, "AttemptList", v, err)
}

func (e *erring) InboxFeed(ctx context.Context, p store.InboxFeedParams) (store.InboxPage, error) {
	v, err := e.Store.InboxFeed(ctx, p)
	return fail(e, "InboxFeed", v, err)
}

func (e *erring) InboxItemsAfter(ctx context.Context, tenant, recipient string, afterSeq int64, limit int) ([]store.InboxItem, error) {
	v, err := e.Store.InboxItemsAfter(ctx, tenant, recipient, afterSeq, limit)
	return fail(e, "InboxItemsAfter", v, err)
}

func (e *erring) InboxBadge(ctx context.Context, tenant, recipient string) (store.InboxBadge, error) {
	v, err := e.Store.InboxBadge(ctx, tenant, recipient)
	return fail(e, "InboxBadge", v, err)
}

func (e *erring) InboxMarkRead(ctx context.Context, p store.InboxMarkReadParams) (store.InboxBadge, error) {
	v, err := e.Store.InboxMarkRead(ctx, p)
	return fail(e, "InboxMarkRead", v, err)
}

func (e *erring) InboxArchive(ctx context.Context, tenant, recipient, messageID string) (bool, error) {
	v, err := e.Store.InboxArchive(ctx, tenant, recipient, messageID)
	return fail(e, "InboxArchive", v, err)
}

func (e *erring) InboxRecount(ctx context.Context, p store.InboxRecountParams) (store.InboxRecountResult, error) {
	v, err := e.Store.InboxRecount(ctx, p)
	return fail(e, "InboxRecount", v, err)
}

func (e *erring) InboxPurge(ctx context.Context, p store.InboxPurgeParams) (int, error) {
	v, err := e.Store.InboxPurge(ctx, p)
	return fail(e, "InboxPurge", v, err)
}
