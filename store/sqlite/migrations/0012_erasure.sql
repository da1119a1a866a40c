-- A recipient's erasure (store.Erasure, DELETE /v1/recipients/{recipient})
-- sets erased_at on each of the recipient's notifications when it empties
-- their params: the time of the erasure, kept with the ids, states and
-- reason codes for accounting. The sender reads it before it claims a
-- retry (store.Erasure.NotificationErased), so a send that was in flight
-- during the erasure and came back RETRY_WAIT ends SUPPRESSED(ERASED)
-- instead of rendering the emptied params. NULL for every existing row;
-- nothing else reads it, so it needs no index.
ALTER TABLE notifications ADD COLUMN erased_at INTEGER;
