package sqlite

import (
	"context"
	"errors"

	"github.com/heraldhq/herald/store"
)

// errInboxPending: the driver's inbox lands in the next commits (issue 9).
var errInboxPending = errors.New("sqlite: inbox: not implemented yet")

// InboxFeed is not implemented yet.
func (s *Store) InboxFeed(ctx context.Context, p store.InboxFeedParams) (store.InboxPage, error) {
	return store.InboxPage{}, errInboxPending
}

// InboxItemsAfter is not implemented yet.
func (s *Store) InboxItemsAfter(ctx context.Context, tenant, recipient string, afterSeq int64, limit int) ([]store.InboxItem, error) {
	return nil, errInboxPending
}

// InboxBadge is not implemented yet.
func (s *Store) InboxBadge(ctx context.Context, tenant, recipient string) (store.InboxBadge, error) {
	return store.InboxBadge{}, errInboxPending
}

// InboxMarkRead is not implemented yet.
func (s *Store) InboxMarkRead(ctx context.Context, p store.InboxMarkReadParams) (store.InboxBadge, error) {
	return store.InboxBadge{}, errInboxPending
}

// InboxArchive is not implemented yet.
func (s *Store) InboxArchive(ctx context.Context, tenant, recipient, messageID string) (bool, error) {
	return false, errInboxPending
}

// InboxRecount is not implemented yet.
func (s *Store) InboxRecount(ctx context.Context, p store.InboxRecountParams) (store.InboxRecountResult, error) {
	return store.InboxRecountResult{}, errInboxPending
}

// InboxPurge is not implemented yet.
func (s *Store) InboxPurge(ctx context.Context, p store.InboxPurgeParams) (int, error) {
	return 0, errInboxPending
}
