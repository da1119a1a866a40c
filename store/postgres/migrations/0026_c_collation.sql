-- Every text column of herald's tables compares byte by byte (COLLATE "C").
-- Under the database's own collation (often C.UTF-8 or en_US.UTF-8) every
-- comparison of two keys in a b-tree calls the C library's strcoll: a
-- profile of a million-recipient fan-out put about 15% of PostgreSQL's
-- samples there, on ids, tenants, keys and channels that no person reads
-- in collation order. Equality is the same either way, and so is order
-- under C.UTF-8; under another collation a listing or walk by a text key
-- may, once, repeat or skip a row around a cursor given out before. A column
-- compared with a value of another collation (a parameter, a jsonb field,
-- a user's column) takes the column's "C", never an error.
-- Changing a column's collation keeps its rows where they are and rebuilds
-- the indexes that use it, each table's once, under that table's lock
-- (4.2 s for a database of a million notifications with one send each on
-- the 2-core development machine). New tables write COLLATE "C" on their
-- text columns (TestEveryTextColumnIsCollatedC).
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN
        SELECT c.relname,
               string_agg(format('ALTER COLUMN %I TYPE %s COLLATE "C"', a.attname,
                                 format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum) AS alters
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
          AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND c.relname <> 'schema_migrations'
          AND a.attnum > 0 AND NOT a.attisdropped
          AND a.atttypid IN ('text'::regtype, 'text[]'::regtype)
          AND a.attcollation <> 'pg_catalog."C"'::regcollation
        GROUP BY c.relname
    LOOP
        EXECUTE format('ALTER TABLE %I %s', t.relname, t.alters);
    END LOOP;
END
$$;
