-- Event-level suppression's keys (store.EventKeys, package suppression):
-- at most one send per (tenant, recipient, event_id, kind), channel '' for
-- a key across channels or one channel for a kind that sends on each of
-- its channels. owner is the notification that holds the key; its lease
-- runs until lease_until, and after it for as long as one of its sends
-- under the key went out, may have, or waits for a retry. A takeover
-- (another notification took the key after the lease ran out with nothing
-- held) sets taken_from, the owner before it. Times are Unix milliseconds.
--
--   event_keys_lease       the leader's purge, oldest lease first
--   event_keys_taken_over  reconciliation's count of takeovers; few rows
CREATE TABLE event_keys (
    tenant      TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    kind        TEXT NOT NULL,
    channel     TEXT NOT NULL,
    owner       TEXT NOT NULL,
    lease_until INTEGER NOT NULL,
    taken_at    INTEGER NOT NULL,
    taken_from  TEXT,
    PRIMARY KEY (tenant, recipient, event_id, kind, channel)
) WITHOUT ROWID;
CREATE INDEX event_keys_lease ON event_keys (lease_until);
CREATE INDEX event_keys_taken_over ON event_keys (taken_at) WHERE taken_from IS NOT NULL;
