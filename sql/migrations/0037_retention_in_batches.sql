-- Retention that keeps up: the tick calls these in a loop within a time budget.
--
-- retention_delete_runs: one batch of finished runs past the horizon, oldest first through
-- executions_finished_idx, with everything that hangs off them (their queue tasks, approvals,
-- saved states, tool results, claims, and their journal rows in the default partition; rows in
-- month partitions go when the month is dropped whole). Every delete is by key, so a batch
-- costs the same however large the tables are. SECURITY DEFINER: the scheduler's role may
-- delete finished runs (it always could) but not, directly, claims, approvals or states.
-- A run waiting for approval (completed, breadcrumb 'suspended') and unfinished runs stay.
CREATE FUNCTION retention_delete_runs(horizon timestamptz, batch_size integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    doomed uuid[];
    waits text[];
BEGIN
    SELECT coalesce(array_agg(d.id), '{}') INTO doomed FROM (
        SELECT e.id FROM executions e
         WHERE e.finished_at < horizon
           AND e.status IN ('completed', 'failed', 'cancelled')
           AND e.breadcrumb IS DISTINCT FROM 'suspended'
         ORDER BY e.finished_at
         LIMIT least(greatest(batch_size, 1), 10000)
           FOR UPDATE SKIP LOCKED) d;
    IF cardinality(doomed) = 0 THEN
        RETURN 0;
    END IF;
    SELECT coalesce(array_agg(a.id), '{}') INTO waits FROM approvals a
     WHERE a.execution_id = ANY (doomed);
    -- A run's task is named by its id, a resume's by its approval's id.
    DELETE FROM queue_tasks WHERE name = ANY (doomed::text[]) OR name = ANY (waits);
    DELETE FROM approvals WHERE execution_id = ANY (doomed);
    DELETE FROM run_states WHERE execution_id = ANY (doomed);
    DELETE FROM tool_call_results WHERE execution_id = ANY (doomed);
    DELETE FROM tool_results WHERE execution_id = ANY (doomed);
    DELETE FROM execution_claims WHERE execution_id = ANY (doomed);
    DELETE FROM run_events_default WHERE execution_id = ANY (doomed);
    DELETE FROM executions WHERE id = ANY (doomed);
    RETURN cardinality(doomed);
END;
$$;

-- manage_journal_partitions as in 0028, but it never stalls the journal: creating or dropping
-- a partition needs an ACCESS EXCLUSIVE lock on run_events, and a DDL statement waiting for it
-- queues every journal append behind it. Each change waits at most lock_timeout (the caller's
-- if it set one, else 100 ms); one that cannot get its lock is skipped, reported in `skipped`,
-- and tried again by the next tick. A scheduler that finds another managing the partitions
-- skips them this tick instead of waiting. Same arguments as before; `skipped` is new, so the
-- function is dropped and created again (sql/grants.sql grants it by these arguments).
DROP FUNCTION manage_journal_partitions(timestamptz, integer, integer);
CREATE FUNCTION manage_journal_partitions(as_of timestamptz, months_ahead integer,
                                          keep_days integer)
RETURNS TABLE (created text[], dropped text[], skipped text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    month_start timestamptz;
    name text;
    made text[] := '{}';
    gone text[] := '{}';
    passed text[] := '{}';
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
    FOR i IN 1..months_ahead LOOP
        month_start := date_trunc('month', as_of AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                       + make_interval(months => i);
        name := 'run_events_' || to_char(month_start AT TIME ZONE 'UTC', 'YYYY_MM');
        IF to_regclass(name) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF run_events FOR VALUES FROM (%L) TO (%L)',
                               name, journal_month_bound(month_start),
                               journal_month_bound(month_start + interval '1 month'));
                made := made || name;
            EXCEPTION WHEN lock_not_available THEN
                passed := passed || name;
            END;
        END IF;
    END LOOP;
    IF keep_days > 0 THEN
        FOR part IN
            SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'run_events'::regclass AND c.relname ~ '^run_events_\d{4}_\d{2}$'
        LOOP
            month_start := to_timestamp(substr(part.relname, 12), 'YYYY_MM') AT TIME ZONE 'UTC';
            -- A month goes only when all of it is older than the horizon and none of its runs
            -- is still live (0028).
            IF month_start + interval '1 month' < as_of - make_interval(days => keep_days)
               AND NOT EXISTS (
                   SELECT 1 FROM executions e
                    WHERE e.id >= journal_month_bound(month_start)
                      AND e.id < journal_month_bound(month_start + interval '1 month')
                      AND (e.status IN ('queued', 'running')
                           OR (e.status = 'completed' AND e.breadcrumb = 'suspended')))
            THEN
                BEGIN
                    EXECUTE format('DROP TABLE %I', part.relname);
                    gone := gone || part.relname::text;
                EXCEPTION WHEN lock_not_available THEN
                    passed := passed || part.relname::text;
                END;
            END IF;
        END LOOP;
    END IF;
    -- The rest of the caller's transaction keeps the caller's own setting.
    PERFORM set_config('lock_timeout', callers_timeout, true);
    RETURN QUERY SELECT made, gone, passed;
END;
$$;

-- retention_upkeep (0029) with the same narrow contract (database clock, at least 7 days kept,
-- batch capped at 10,000) and the same result (runs deleted), now one call per batch: the tick
-- calls it again while batches come back full and its time budget lasts. The partitions come
-- last, after the deletes, so the partition lock (when one is taken) is held only to commit.
CREATE OR REPLACE FUNCTION retention_upkeep(keep_days integer, batch_size integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    deleted integer := 0;
    batch integer := least(greatest(batch_size, 1), 10000);
BEGIN
    IF keep_days < 0 OR keep_days BETWEEN 1 AND 6 THEN
        RAISE EXCEPTION 'retention through the tick keeps at least 7 days (or 0: everything), not %',
            keep_days USING ERRCODE = '22023';
    END IF;
    IF keep_days > 0 THEN
        deleted := retention_delete_runs(now() - make_interval(days => keep_days), batch);
        DELETE FROM skipped_fires
         WHERE ctid = ANY (ARRAY(SELECT ctid FROM skipped_fires
                                  WHERE recorded_at < now() - make_interval(days => keep_days)
                                  LIMIT batch));
    END IF;
    DELETE FROM stream_tickets WHERE expires_at < now() - interval '1 hour';
    PERFORM manage_journal_partitions(now(), 2, keep_days);
    RETURN deleted;
END;
$$;

REVOKE ALL ON FUNCTION retention_delete_runs(timestamptz, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION manage_journal_partitions(timestamptz, integer, integer) FROM PUBLIC;
