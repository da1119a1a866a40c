-- A tenant's campaigns, newest first (GET /v1/campaigns): the listing
-- walks this index backwards from its cursor, so a page costs its own
-- rows, however many campaigns the tenant and the others have.
CREATE INDEX campaigns_tenant_created ON campaigns (tenant, created_at, id);
