-- A campaign never started does not wait for ever; see the PostgreSQL
-- migration 29. Times are Unix milliseconds; 604800000 is the default TTL
-- (168 hours).
ALTER TABLE campaigns ADD COLUMN draft_expires_at INTEGER;
ALTER TABLE campaigns ADD COLUMN ended_reason TEXT;
UPDATE campaigns SET draft_expires_at = CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER) + 604800000
WHERE state = 'DRAFT';
-- A draft an older herald creates beside the migrated schema (which does
-- not write the column) gets the default TTL from its creation.
CREATE TRIGGER campaigns_draft_deadline AFTER INSERT ON campaigns
WHEN NEW.draft_expires_at IS NULL AND NEW.state = 'DRAFT'
BEGIN
    UPDATE campaigns SET draft_expires_at = NEW.created_at + 604800000 WHERE id = NEW.id;
END;
CREATE INDEX campaigns_draft ON campaigns (draft_expires_at, id) WHERE state = 'DRAFT';
