-- The audit of discarded parked messages: one row per discard, written in the
-- same transaction as the discard itself (store.Parked.ParkedDiscard). It
-- says when, who ("api:<tenant>" or "cli:<OS user>"), which message, whose
-- (tenant; '' for a message that names none), why it was parked and why the
-- person discarded it. Rows are never updated.
CREATE TABLE parked_discards (
    id            INTEGER PRIMARY KEY,
    discarded_at  INTEGER NOT NULL,
    actor         TEXT NOT NULL,
    message_id    TEXT NOT NULL,
    tenant        TEXT NOT NULL,
    parked_reason TEXT NOT NULL,
    reason        TEXT NOT NULL
);
CREATE INDEX parked_discards_message ON parked_discards (message_id);
