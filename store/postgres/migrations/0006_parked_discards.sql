-- The audit of discarded parked messages: one row per discard, written in the
-- same statement as the discard itself (store.Parked.ParkedDiscard). It says
-- when, who ("api:<tenant>" or "cli:<OS user>"), which message, whose
-- (tenant; '' for a message that names none), why it was parked and why the
-- person discarded it. Rows are never updated.
CREATE TABLE parked_discards (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    discarded_at  timestamptz NOT NULL,
    actor         text NOT NULL,
    message_id    text NOT NULL,
    tenant        text NOT NULL,
    parked_reason text NOT NULL,
    reason        text NOT NULL
);
CREATE INDEX parked_discards_message ON parked_discards (message_id);
