-- Every change of a recipient's marketing consent (store.ConsentHistory):
-- one row per channel a profile put changed, written in the put's own
-- transaction. old_consent and new_consent are NULL when the profile held
-- none for the channel; by_tenant is the tenant of the API key that made
-- the change, by_key its name ('' when it has none). A put locks the
-- recipient's profile row before it takes ids, so a recipient's ids
-- increase in the order its changes commit; the history is read a page at
-- a time by (tenant, recipient, id) descending. An erasure of the
-- recipient deletes its rows with its profile.
CREATE TABLE consent_history (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text NOT NULL,
    recipient   text NOT NULL,
    channel     text NOT NULL,
    old_consent boolean,
    new_consent boolean,
    changed_at  timestamptz NOT NULL,
    by_tenant   text NOT NULL,
    by_key      text NOT NULL DEFAULT ''
);
CREATE INDEX consent_history_recipient ON consent_history (tenant, recipient, id);
