-- A campaign never started does not wait for ever; see the PostgreSQL
-- migration 29. Times are Unix milliseconds.
ALTER TABLE campaigns ADD COLUMN draft_expires_at INTEGER;
ALTER TABLE campaigns ADD COLUMN ended_reason TEXT;
UPDATE campaigns SET draft_expires_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) + 7 * 86400000 WHERE state = 'DRAFT';
CREATE INDEX campaigns_draft ON campaigns (draft_expires_at, id) WHERE state = 'DRAFT';
