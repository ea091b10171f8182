-- Retention in a young database drops months too. Until now the month tickwork was installed in
-- (and the first minutes before the first upkeep) had no partition of its own: its journal sat
-- in the default partition and retention deleted it row by row, about twice an old database's
-- cost per run (bench/retention.py). Worse, every month created while the default held those
-- rows scanned the whole default under the ACCESS EXCLUSIVE lock that stops every append
-- (480 ms for 2M rows). manage_journal_partitions (same signature, same result) now:
--
-- * makes the current month too, not only the months ahead, when the default holds none of its
--   rows (a fresh install's first upkeep: the default is empty and nothing is scanned);
-- * adopts a default that holds the journal of months without a partition (an install made
--   before this migration, or runs created before the first upkeep): the default table
--   itself becomes the partition of everything below the lowest month partition, named after
--   the last month it covers, and an empty default takes its place. No row moves. Postgres
--   accepts the range without scanning the table when a validated CHECK constraint proves it,
--   so the adoption is three steps over two calls, none of which blocks appends for longer
--   than a catalog change:
--     1. ADD CONSTRAINT ... CHECK (execution_id < bound) NOT VALID: a catalog change under a
--        short exclusive lock on the default (new rows are checked from here on; the bound is
--        the lowest month partition's, so only an id no partition covers could be refused);
--     2. (the next call) VALIDATE CONSTRAINT: one scan of the default under SHARE UPDATE
--        EXCLUSIVE, which appends and reads do not wait for;
--     3. in the same call, in one transaction: DETACH the default, rename it and its indexes,
--        ATTACH it FROM (MINVALUE) TO (bound) (no scan: the constraint proves it), CREATE an
--        empty default. Catalog changes only (15 ms with 2M rows in the default).
--   Each step waits at most lock_timeout for its lock and is otherwise tried at the next call,
--   as creates and drops are. The adopted partition is dropped whole like a month (its upper
--   bound past the horizon, and no live run below it: 0028's rule with the real bounds).
--   A default that also holds rows at or above that bound (an id from a clock months ahead)
--   is not adopted: its rows are deleted row by row as before.
-- * reads each partition's bounds from the catalog (journal_partitions) instead of its name,
--   so the live-run rule sees an adopted partition's whole range, and a month is created only
--   where no partition covers it.

-- The time a journal bound (or any UUIDv7) stands for: its first 48 bits, in milliseconds.
CREATE FUNCTION journal_bound_time(bound uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_timestamp(('x' || substr(replace(bound::text, '-', ''), 1, 12))::bit(48)::bigint
                        / 1000.0)
$$;

-- The journal's partitions with their bounds (NULL: MINVALUE or MAXVALUE), from the catalog.
CREATE FUNCTION journal_partitions()
RETURNS TABLE (name text, lower_bound uuid, upper_bound uuid, is_default boolean)
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
    SELECT c.relname::text, b[1]::uuid, b[2]::uuid, b IS NULL
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
           '^FOR VALUES FROM \((?:''([0-9a-f-]{36})''|MINVALUE)\) TO \((?:''([0-9a-f-]{36})''|MAXVALUE)\)$') b
     WHERE i.inhparent = 'run_events'::regclass
       AND (b IS NOT NULL OR pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT')
$$;

-- Step 1 of an adoption: when the default holds rows below every partition (and none above
-- the lowest one), mark the bound it will be adopted below. Returns what could not get its
-- lock ('run_events_default'), else NULL.
CREATE FUNCTION journal_begin_adoption() RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = public, pg_temp AS $$
DECLARE
    lowest uuid;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'run_events_default'::regclass
                                             AND conname = 'run_events_default_adoption')
       OR EXISTS (SELECT 1 FROM journal_partitions() p
                   WHERE NOT p.is_default AND p.lower_bound IS NULL) THEN
        RETURN NULL;  -- under way, or done (what lies below the adopted range is its own)
    END IF;
    SELECT p.lower_bound INTO lowest FROM journal_partitions() p   -- (no min(uuid) before 16)
     WHERE NOT p.is_default ORDER BY p.lower_bound LIMIT 1;
    -- Both probes go down the default's primary key: nothing here scans the table.
    IF lowest IS NULL
       OR NOT EXISTS (SELECT 1 FROM run_events_default WHERE execution_id < lowest)
       OR EXISTS (SELECT 1 FROM run_events_default WHERE execution_id >= lowest) THEN
        RETURN NULL;
    END IF;
    BEGIN
        EXECUTE format('ALTER TABLE run_events_default ADD CONSTRAINT run_events_default_adoption'
                       ' CHECK (execution_id < %L) NOT VALID', lowest);
        -- A row at or above the bound committed between the probe and the lock: give up.
        IF EXISTS (SELECT 1 FROM run_events_default WHERE execution_id >= lowest) THEN
            RAISE EXCEPTION 'the default partition holds rows past %', lowest
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
    EXCEPTION
        WHEN lock_not_available THEN RETURN 'run_events_default';
        WHEN object_not_in_prerequisite_state THEN RETURN NULL;
    END;
    RETURN NULL;
END;
$$;

-- An adoption that cannot finish drops its mark, so that the mark refuses nothing, and the
-- next call starts again. Returns 'run_events_default' when the lock was not free.
CREATE FUNCTION journal_forget_adoption() RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = public, pg_temp AS $$
BEGIN
    ALTER TABLE run_events_default DROP CONSTRAINT run_events_default_adoption;
    RETURN NULL;
EXCEPTION WHEN lock_not_available THEN
    RETURN 'run_events_default';
END;
$$;

-- Steps 2 and 3: validate the mark (one scan that blocks no append), then swap the default
-- for an empty one and attach it below the bound. Returns (made, passed): the adopted
-- partition's name once attached; 'run_events_default' when a lock was not free.
CREATE FUNCTION journal_finish_adoption(OUT made text, OUT passed text)
LANGUAGE plpgsql VOLATILE SET search_path = public, pg_temp AS $$
DECLARE
    valid boolean;
    bound uuid;
    name text;
    idx record;
BEGIN
    SELECT c.convalidated, (regexp_match(pg_get_constraintdef(c.oid), '''([0-9a-f-]{36})'''))[1]::uuid
      INTO valid, bound
      FROM pg_constraint c
     WHERE c.conrelid = 'run_events_default'::regclass AND c.conname = 'run_events_default_adoption';
    IF NOT FOUND THEN
        RETURN;
    END IF;
    name := 'run_events_' || to_char((journal_bound_time(bound) AT TIME ZONE 'UTC')
                                     - interval '1 month', 'YYYY_MM');
    IF to_regclass(name) IS NOT NULL
       OR EXISTS (SELECT 1 FROM journal_partitions() p
                   WHERE NOT p.is_default AND coalesce(p.lower_bound < bound, true)) THEN
        -- The range below the bound is no longer free (not expected): forget the mark.
        passed := journal_forget_adoption();
        RETURN;
    END IF;
    IF NOT valid THEN
        BEGIN
            ALTER TABLE run_events_default VALIDATE CONSTRAINT run_events_default_adoption;
        EXCEPTION
            WHEN lock_not_available THEN
                passed := 'run_events_default';
                RETURN;
            WHEN check_violation THEN  -- not expected: step 1 checked under its lock
                passed := journal_forget_adoption();
                RETURN;
        END;
    END IF;
    BEGIN
        ALTER TABLE run_events DETACH PARTITION run_events_default;
        EXECUTE format('ALTER TABLE run_events_default RENAME TO %I', name);
        FOR idx IN SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                    WHERE x.indrelid = to_regclass(name) AND i.relname LIKE 'run_events_default%'
        LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', idx.relname,
                           name || substr(idx.relname, length('run_events_default') + 1));
        END LOOP;
        EXECUTE format('ALTER TABLE run_events ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
                       name, bound);
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT run_events_default_adoption', name);
        CREATE TABLE run_events_default PARTITION OF run_events DEFAULT;
        made := name;
    EXCEPTION WHEN lock_not_available THEN
        passed := 'run_events_default';
    END;
END;
$$;

-- manage_journal_partitions as in 0037 (the advisory lock, lock_timeout on every change, the
-- same arguments and result), with the adoption, the current month, and bounds read from the
-- catalog. Order: finish an adoption first (its scan holds no lock an append waits for, and
-- the months made after it find an empty default), then the months, then begin an adoption
-- (below the months just made), then the drops.
CREATE OR REPLACE FUNCTION manage_journal_partitions(as_of timestamptz, months_ahead integer,
                                                     keep_days integer)
RETURNS TABLE (created text[], dropped text[], skipped text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    month_start timestamptz;
    low uuid;
    high uuid;
    name text;
    made text[] := '{}';
    gone text[] := '{}';
    passed text[] := '{}';
    adoption record;
    part record;
    callers_timeout text := current_setting('lock_timeout');
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('tickwork.journal_partitions')) THEN
        RETURN QUERY SELECT made, gone, ARRAY['busy']::text[];
        RETURN;
    END IF;
    IF callers_timeout = '0' THEN
        PERFORM set_config('lock_timeout', '100ms', true);
    END IF;
    adoption := journal_finish_adoption();
    made := made || array_remove(ARRAY[adoption.made], NULL);
    passed := passed || array_remove(ARRAY[adoption.passed], NULL);
    FOR i IN 0..months_ahead LOOP
        month_start := date_trunc('month', as_of AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                       + make_interval(months => i);
        low := journal_month_bound(month_start);
        high := journal_month_bound(month_start + interval '1 month');
        name := 'run_events_' || to_char(month_start AT TIME ZONE 'UTC', 'YYYY_MM');
        -- A month some partition already covers (in part: an adopted range) is left alone; so
        -- is one whose journal began in the default (adopted below, or deleted row by row):
        -- its partition could not be created over those rows.
        CONTINUE WHEN to_regclass(name) IS NOT NULL
            OR EXISTS (SELECT 1 FROM journal_partitions() p
                        WHERE NOT p.is_default AND coalesce(p.lower_bound < high, true)
                          AND coalesce(p.upper_bound > low, true))
            OR EXISTS (SELECT 1 FROM run_events_default
                        WHERE execution_id >= low AND execution_id < high);
        BEGIN
            EXECUTE format('CREATE TABLE %I PARTITION OF run_events FOR VALUES FROM (%L) TO (%L)',
                           name, low, high);
            made := made || name;
        EXCEPTION WHEN lock_not_available THEN
            passed := passed || name;
        END;
    END LOOP;
    passed := passed || array_remove(ARRAY[journal_begin_adoption()], NULL);
    IF keep_days > 0 THEN
        FOR part IN
            SELECT p.name, p.lower_bound, p.upper_bound FROM journal_partitions() p
             WHERE NOT p.is_default AND p.upper_bound IS NOT NULL
               AND p.name ~ '^run_events_\d{4}_\d{2}$'
        LOOP
            -- A partition goes only when all of it is older than the horizon and none of its
            -- runs is still live (0028). No lock is needed between this check and the drop: a
            -- finished run never becomes live again, and new runs get ids of the current month.
            IF journal_bound_time(part.upper_bound) < as_of - make_interval(days => keep_days)
               AND NOT EXISTS (
                   SELECT 1 FROM executions e
                    WHERE e.id >= coalesce(part.lower_bound, '00000000-0000-0000-0000-000000000000')
                      AND e.id < part.upper_bound
                      AND (e.status IN ('queued', 'running')
                           OR (e.status = 'completed' AND e.breadcrumb = 'suspended')))
            THEN
                BEGIN
                    EXECUTE format('DROP TABLE %I', part.name);
                    gone := gone || part.name;
                EXCEPTION WHEN lock_not_available THEN
                    passed := passed || part.name;
                END;
            END IF;
        END LOOP;
    END IF;
    -- The rest of the caller's transaction keeps the caller's own setting.
    PERFORM set_config('lock_timeout', callers_timeout, true);
    RETURN QUERY SELECT made, gone, passed;
END;
$$;

REVOKE ALL ON FUNCTION journal_partitions() FROM PUBLIC;
REVOKE ALL ON FUNCTION journal_begin_adoption() FROM PUBLIC;
REVOKE ALL ON FUNCTION journal_forget_adoption() FROM PUBLIC;
REVOKE ALL ON FUNCTION journal_finish_adoption() FROM PUBLIC;
REVOKE ALL ON FUNCTION manage_journal_partitions(timestamptz, integer, integer) FROM PUBLIC;
