-- A campaign never started does not wait for ever (DESIGN §3, "Nothing
-- waits without an owner"): the leader's campaign runner ends a DRAFT
-- campaign CANCELLED once its draft's time (campaign_draft_ttl after its
-- creation) has run out (store.Campaigns.CampaignsExpireDrafts).
-- ended_reason says so (DRAFT_EXPIRED); a client's cancel leaves it NULL.
ALTER TABLE campaigns ADD COLUMN ended_reason text COLLATE "C";
-- The runner's look-up of drafts past their time, the oldest first.
CREATE INDEX campaigns_draft ON campaigns (created_at, id) WHERE state = 'DRAFT';
