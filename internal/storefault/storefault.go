// Package storefault gives tests a store whose writes can commit and still
// fail, as they do when a database connection drops after the commit and
// before the answer: the case where the caller cannot know what it wrote.
package storefault

import (
	"context"
	"errors"
	"sync"

	"github.com/heraldhq/herald/store"
)

// ErrConnReset is the error a lost answer reports.
var ErrConnReset = errors.New("connection reset by peer")

// Options say what fails once the first result write has lost its answer.
type Options struct {
	// RecordDown fails every later result write of attempt 1, until Heal.
	RecordDown bool
	// ReadFailures fails that many reads of a delivery row (the sender's
	// read-back and peek), until Heal; -1 fails every one.
	ReadFailures int
}

// Unknown are the ways a result write's outcome stays unknown to its
// writer, by name: the write committed and lost its answer, and then every
// later try failed, or the row could not be read back.
var Unknown = []struct {
	Name string
	Options
}{
	{"AnswerLostForGood", Options{RecordDown: true}},
	{"ReadBackFails", Options{ReadFailures: -1}},
}

// LostRecord is a store whose first result write (DeliveryRecord) commits
// and then reports ErrConnReset.
type LostRecord struct {
	store.Store
	mu                     sync.Mutex
	opts                   Options
	lost                   bool
	recordFails, readFails int
}

// LoseRecord wraps st.
func LoseRecord(st store.Store, opts Options) *LostRecord {
	return &LostRecord{Store: st, opts: opts}
}

// DeliveryRecord commits the first write and loses its answer, then fails
// as the options say.
func (l *LostRecord) DeliveryRecord(ctx context.Context, p store.DeliveryRecordParams) (store.RecordResult, error) {
	l.mu.Lock()
	first, down := !l.lost, l.lost && l.opts.RecordDown && p.Attempt == 1
	l.lost = true
	if down {
		l.recordFails++
	}
	l.mu.Unlock()
	switch {
	case first:
		if _, err := l.Store.DeliveryRecord(ctx, p); err != nil {
			return store.RecordResult{}, err
		}
		return store.RecordResult{}, ErrConnReset
	case down:
		return store.RecordResult{}, ErrConnReset
	}
	return l.Store.DeliveryRecord(ctx, p)
}

// DeliveryGet fails as the options say once the answer was lost.
func (l *LostRecord) DeliveryGet(ctx context.Context, messageID string) (store.Delivery, error) {
	l.mu.Lock()
	fail := l.lost && l.opts.ReadFailures != 0
	if fail {
		l.readFails++
		if l.opts.ReadFailures > 0 {
			l.opts.ReadFailures--
		}
	}
	l.mu.Unlock()
	if fail {
		return store.Delivery{}, ErrConnReset
	}
	return l.Store.DeliveryGet(ctx, messageID)
}

// Heal makes every call work again.
func (l *LostRecord) Heal() {
	l.mu.Lock()
	l.opts = Options{}
	l.mu.Unlock()
}

// Failures reports how many result writes and reads failed after the lost
// answer: a test whose seam failed nothing proves nothing.
func (l *LostRecord) Failures() (records, reads int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recordFails, l.readFails
}
