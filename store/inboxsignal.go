package store

import "sync"

// InboxKey names one recipient's inbox.
type InboxKey struct {
	Tenant, Recipient string
}

// InboxWatch lets a process hear that a recipient's inbox changed.
type InboxWatch interface {
	// InboxSignals carries "this recipient's inbox changed" signals: from
	// this process's own inbox writes, after they commit, and (PostgreSQL)
	// from every other process on the database, through LISTEN/NOTIFY.
	InboxSignals() *InboxSignals
}

// InboxWatcher hears inbox signals. Its methods run on the goroutine that
// signals (a writer after its commit, the store's listener) and must
// return at once.
type InboxWatcher interface {
	// InboxChanged says these recipients' inboxes changed: an item came,
	// was read or archived, or went.
	InboxChanged(keys []InboxKey)
	// InboxMissed says changes may have gone unannounced (PostgreSQL: the
	// listener was disconnected for a while), so any inbox may have
	// changed.
	InboxMissed()
}

// InboxSignals fans inbox signals out to the watchers of this process. A
// signal only says "look": the store's rows are the truth, and a watcher
// reads them again. So a lost signal costs latency, never an item, as
// long as each watcher also reads now and then on its own. The zero value
// is ready to use.
type InboxSignals struct {
	mu       sync.RWMutex
	watchers map[*inboxWatcher]struct{}
}

// inboxWatcher makes every Watch a distinct entry, even of one watcher.
type inboxWatcher struct{ w InboxWatcher }

// Watch adds w until stop is called.
func (s *InboxSignals) Watch(w InboxWatcher) (stop func()) {
	e := &inboxWatcher{w: w}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchers == nil {
		s.watchers = map[*inboxWatcher]struct{}{}
	}
	s.watchers[e] = struct{}{}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.watchers, e)
	}
}

// Changed tells every watcher that these inboxes changed. A driver calls
// it once the change committed.
func (s *InboxSignals) Changed(keys ...InboxKey) {
	if len(keys) == 0 {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for e := range s.watchers {
		e.w.InboxChanged(keys)
	}
}

// Missed tells every watcher that any inbox may have changed unannounced.
func (s *InboxSignals) Missed() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for e := range s.watchers {
		e.w.InboxMissed()
	}
}
