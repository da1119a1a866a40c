-- A recipient's erasure clears its own params in every campaign of its
-- tenant: the recipients that have params of their own, by recipient.
CREATE INDEX campaign_recipients_recipient ON campaign_recipients (recipient) WHERE params IS NOT NULL;
