-- A campaign never started does not wait for ever (DESIGN §3, "Nothing
-- waits without an owner"): a DRAFT campaign has a deadline, fixed when it
-- is created (its creation + campaign_draft_ttl, by the database's clock,
-- draft_expires_at, which GET shows). A start or a page past it is refused,
-- and the leader's campaign runner ends a draft past it CANCELLED
-- (store.Campaigns.CampaignsExpireDrafts). ended_reason says so
-- (DRAFT_EXPIRED); a client's cancel leaves it NULL.
--
-- Drafts created before this migration were promised no deadline: theirs
-- is the default TTL from now. So is the deadline of a draft an older
-- herald still running beside the migrated schema creates (the column's
-- default; this build always writes its own).
ALTER TABLE campaigns ADD COLUMN draft_expires_at timestamptz, ADD COLUMN ended_reason text COLLATE "C";
UPDATE campaigns SET draft_expires_at = now() + interval '168 hours' WHERE state = 'DRAFT';
ALTER TABLE campaigns ALTER COLUMN draft_expires_at SET DEFAULT now() + interval '168 hours';
-- The runner's look-up of drafts past their deadline, the earliest first.
CREATE INDEX campaigns_draft ON campaigns (draft_expires_at, id) WHERE state = 'DRAFT';
