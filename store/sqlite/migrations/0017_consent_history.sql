-- Every change of a recipient's marketing consent (store.ConsentHistory):
-- one row per channel a profile put changed, written in the put's own
-- transaction. old_consent and new_consent are 1, 0 or NULL (the profile
-- held none for the channel); by_tenant is the tenant of the API key that
-- made the change, by_key its name ('' when it has none). The id orders a
-- recipient's changes (the writer makes one put at a time), and the
-- history is read a page at a time by (tenant, recipient, id) descending.
-- An erasure of the recipient deletes its rows with its profile. Times are
-- Unix milliseconds.
CREATE TABLE consent_history (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant      TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    channel     TEXT NOT NULL,
    old_consent INTEGER,
    new_consent INTEGER,
    changed_at  INTEGER NOT NULL,
    by_tenant   TEXT NOT NULL,
    by_key      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX consent_history_recipient ON consent_history (tenant, recipient, id);
