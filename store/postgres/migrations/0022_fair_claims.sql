-- Claims share a lane between its tenants (qOutboxClaim): each tenant's
-- PENDING rows in order, and a loose scan over the lane's tenants.
CREATE INDEX outbox_fair ON outbox (lane, tenant, available_at, id) WHERE state = 'PENDING';
