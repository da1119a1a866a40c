-- The parked deliveries (store.Parked), oldest first: the list and the
-- requeue walk this index in (updated_at, message_id) order and stop at
-- their limit, instead of scanning every delivery for state 'PARKED'.
-- Few rows: a message is parked only until a person requeues or discards
-- it. The requeue's pages are bounded by updated_at (rows parked before
-- the requeue began), which this order serves too.
CREATE INDEX deliveries_parked ON deliveries (updated_at, message_id) WHERE state = 'PARKED';
