-- A tenant's campaigns in one state, newest first (GET /v1/campaigns?state=):
-- without it the listing walked campaigns_tenant_created through every
-- campaign of the tenant in other states to fill a page of the few running
-- ones. A campaign's row changes state a few times in its life, so the
-- index costs its writes little.
CREATE INDEX campaigns_tenant_state_created ON campaigns (tenant, state, created_at, id);
