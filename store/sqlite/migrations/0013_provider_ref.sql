-- The provider's own id for a message (Twilio's sid, a vendor's message
-- key), written with the attempt's result when the provider answered one.
-- A status look-up that can only ask by that id (provider.StatusQuery)
-- reads it to settle an UNKNOWN delivery. Nullable, no default: added
-- without rewriting the table, and NULL for every channel that has none.
--
-- The partial index serves the leader's settle rounds, which page through
-- one provider's UNKNOWN deliveries by message id; UNKNOWN rows are few.
ALTER TABLE deliveries ADD COLUMN provider_ref text;
CREATE INDEX deliveries_unknown ON deliveries (provider, message_id) WHERE state = 'UNKNOWN';
