-- The read API lists a tenant's notifications newest first, optionally for one
-- recipient (GET /v1/notifications): each listing walks one of these indexes
-- backwards from its cursor, the row value (created_at, id), and stops after
-- a page, instead of scanning and sorting the tenant's rows. id breaks ties
-- between rows created at the same instant.
--
-- Each index costs an entry per notification on intake's path; notification
-- rows are written once, so that is all they cost.
CREATE INDEX notifications_tenant_created ON notifications (tenant, created_at, id);
CREATE INDEX notifications_tenant_recipient_created ON notifications (tenant, recipient, created_at, id);
