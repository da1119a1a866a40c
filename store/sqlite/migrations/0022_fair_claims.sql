-- Claims share a lane between its tenants (qOutboxClaim): each tenant's
-- PENDING rows in order, and a loose scan over the lane's tenants. It
-- replaces outbox_due (lane, available_at, id): the claim no longer walks
-- the lane oldest first across tenants, and a planner offered both could
-- walk outbox_due filtering a small tenant's rows out of a big one's.
CREATE INDEX outbox_fair ON outbox (lane, tenant, available_at, id) WHERE state = 'PENDING';
DROP INDEX outbox_due;
