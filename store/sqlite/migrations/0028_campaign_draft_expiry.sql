-- A campaign never started does not wait for ever; see the PostgreSQL
-- migration 29.
ALTER TABLE campaigns ADD COLUMN ended_reason TEXT;
CREATE INDEX campaigns_draft ON campaigns (created_at, id) WHERE state = 'DRAFT';
