-- A push token belongs to an app install, not to a person: when a second
-- customer logs in on a shared phone and the app registers the same token
-- for them, the first customer's row must go, or their pushes reach the
-- phone the second now holds. token_digest is store.TokenDigest (the
-- tenant and the token, hashed; tokens themselves may be sealed, with a
-- random nonce, so they cannot be compared), and DevicePut deletes the
-- tenant's other recipients' rows of that digest. Rows registered before
-- this migration have none until they are registered again.
ALTER TABLE devices ADD COLUMN token_digest text COLLATE "C";
CREATE INDEX devices_token_digest ON devices (tenant, token_digest) WHERE token_digest IS NOT NULL;
