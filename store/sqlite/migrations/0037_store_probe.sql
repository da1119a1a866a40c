-- One row that readiness (Store.Ping) writes on every check: an empty write
-- transaction commits even when the disk is full, since it writes no page,
-- so only a page written and committed shows that the store can take a
-- write. The counter moves by one each time: an UPDATE to the same value
-- would write nothing.
CREATE TABLE store_probe (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    checks INTEGER NOT NULL
);
INSERT INTO store_probe (id, checks) VALUES (1, 0);
