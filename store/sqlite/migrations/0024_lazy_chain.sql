-- A lazy fallback chain (store/sqlite/fallback.go): intake writes only the
-- first step's rows, and on them the later steps' channels in order, as a
-- JSON array ('["alimtalk","sms"]'). Their rows are written, WAITING, by
-- the write that first needs them (a definite failure of the first step,
-- a cancel, an erasure, a report that moves an ended first step), and the
-- read API shows them from the plan until then. NULL on every other row,
-- and on the rows of a chain intake wrote whole.
ALTER TABLE outbox ADD COLUMN fallback_plan TEXT;
