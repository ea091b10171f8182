-- Retention never drops the journal of a run that is not finished. A run waiting for approval
-- (completed, breadcrumb 'suspended') can wait for months, and a queued or running run can be
-- older than the horizon too; all of a run's events live in the partition of its id's month, so
-- a month that holds the id of such a run is kept whole until the run ends (a later upkeep then
-- drops it). Same signature as 0018: only the drop test changes.
CREATE OR REPLACE FUNCTION manage_journal_partitions(as_of timestamptz, months_ahead integer,
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
            -- A month goes only when all of it is older than the horizon and none of its runs
            -- is still live. No lock is needed between this check and the drop: a finished run
            -- never becomes live again, and new runs get ids of the current month.
            IF month_start + interval '1 month' < as_of - make_interval(days => keep_days)
               AND NOT EXISTS (
                   SELECT 1 FROM executions e
                    WHERE e.id >= journal_month_bound(month_start)
                      AND e.id < journal_month_bound(month_start + interval '1 month')
                      AND (e.status IN ('queued', 'running')
                           OR (e.status = 'completed' AND e.breadcrumb = 'suspended')))
            THEN
                EXECUTE format('DROP TABLE %I', part.relname);
                gone := gone || part.relname::text;
            END IF;
        END LOOP;
    END IF;
    RETURN QUERY SELECT made, gone;
END;
$$;

REVOKE ALL ON FUNCTION manage_journal_partitions(timestamptz, integer, integer) FROM PUBLIC;
