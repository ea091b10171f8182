-- Monthly journal partitions, so retention is a DROP of whole months. Execution ids are UUIDv7,
-- whose first 48 bits are the creation time in milliseconds: the uuid whose time bits are a
-- month's first millisecond and whose other bits are zero sorts before every id minted in that
-- month, which makes it the month's partition bound.
--
-- The function is SECURITY DEFINER (it runs as the owner, who may create and drop tables) so
-- that the scheduler's role, which owns nothing, can call it from retention. It creates the
-- partitions of the next months (never the current one: the default partition may already
-- hold rows of the current month, and a partition over them cannot be attached) and drops
-- month partitions that ended before the retention horizon.
CREATE FUNCTION journal_month_bound(month_start timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$
    SELECT (substr(hex, 1, 8) || '-' || substr(hex, 9, 4) || '-0000-0000-000000000000')::uuid
      FROM (SELECT lpad(to_hex((extract(epoch FROM month_start) * 1000)::bigint), 12, '0') AS hex) h
$$;

CREATE FUNCTION manage_journal_partitions(as_of timestamptz, months_ahead integer,
                                          keep_days integer)
RETURNS TABLE (created text[], dropped text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    month_start timestamptz;
    name text;
    made text[] := '{}';
    gone text[] := '{}';
    part record;
BEGIN
    -- Schedulers run side by side; one of them at a time manages the partitions.
    PERFORM pg_advisory_xact_lock(hashtext('tickwork.journal_partitions'));
    FOR i IN 1..months_ahead LOOP
        month_start := date_trunc('month', as_of AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                       + make_interval(months => i);
        name := 'run_events_' || to_char(month_start AT TIME ZONE 'UTC', 'YYYY_MM');
        IF to_regclass(name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF run_events FOR VALUES FROM (%L) TO (%L)',
                           name, journal_month_bound(month_start),
                           journal_month_bound(month_start + interval '1 month'));
            made := made || name;
        END IF;
    END LOOP;
    IF keep_days > 0 THEN
        FOR part IN
            SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'run_events'::regclass AND c.relname ~ '^run_events_\d{4}_\d{2}$'
        LOOP
            month_start := to_timestamp(substr(part.relname, 12), 'YYYY_MM') AT TIME ZONE 'UTC';
            -- A month goes only when all of it is older than the horizon.
            IF month_start + interval '1 month' < as_of - make_interval(days => keep_days) THEN
                EXECUTE format('DROP TABLE %I', part.relname);
                gone := gone || part.relname::text;
            END IF;
        END LOOP;
    END IF;
    RETURN QUERY SELECT made, gone;
END;
$$;

REVOKE ALL ON FUNCTION manage_journal_partitions(timestamptz, integer, integer) FROM PUBLIC;
