package sqlite

import "github.com/heraldhq/herald/store"

// SQLite serves one process, so its inbox signals stay in it: a write that
// changed a recipient's inbox tells this process's watchers once it has
// committed. (A herald command that writes the file from another process,
// such as an operator's recount, signals nobody; the watchers' own periodic
// reads pick its change up.)

// InboxSignals returns this process's inbox signals.
func (s *Store) InboxSignals() *store.InboxSignals { return &s.inboxSignals }

// inboxChanged announces, after its commit, a write that changed these
// recipients' inboxes: a new item, a read mark, an archive, a purge or an
// erasure. Call it only once the write committed, and only for inboxes it
// changed.
func (s *Store) inboxChanged(keys ...store.InboxKey) { s.inboxSignals.Changed(keys...) }
