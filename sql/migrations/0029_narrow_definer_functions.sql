-- Narrow doors for what the roles may no longer do directly (sql/grants.sql). Each function is
-- SECURITY DEFINER (it runs as the owner) and does one fixed thing; none takes a date.
--
-- journal_run_complete: the terminal journal event of a run that a verdict just ended (the
-- sweep's timed_out, a worker's release, a person's cancel of a run waiting for approval). The
-- API and the scheduler lose INSERT on run_events; through this function they can add only a
-- run's one run_complete, and only once the run is failed or cancelled. It is called from the
-- verdict's own statement, after the row was updated: a VOLATILE function's queries take a new
-- snapshot and see that update.
CREATE FUNCTION journal_run_complete(execution uuid, payload jsonb) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM executions e
                    WHERE e.id = execution AND e.status IN ('failed', 'cancelled'))
       OR EXISTS (SELECT 1 FROM run_events r
                   WHERE r.execution_id = execution AND r.type = 'run_complete') THEN
        RETURN 0;
    END IF;
    INSERT INTO run_events (execution_id, seq, parent_seq, type, payload)
    SELECT execution,
           coalesce((SELECT max(r.seq) FROM run_events r WHERE r.execution_id = execution), 0) + 1,
           (SELECT min(r.seq) FROM run_events r WHERE r.execution_id = execution),
           'run_complete', payload;
    RETURN 1;
END;
$$;

-- remove_schedules_of_missing_agent: a run that finds its agent gone removes that agent's
-- schedules (the foreign key's cascade normally did it already). The worker loses DELETE on
-- schedules; this deletes only schedules whose agent no longer exists.
CREATE FUNCTION remove_schedules_of_missing_agent(agent uuid) RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH gone AS (
        DELETE FROM schedules s
         WHERE s.agent_id = agent AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.id = agent)
        RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;

-- retention_upkeep: retention as the HTTP tick (POST /v1/tick, run by the API's role) does it,
-- on the database clock: one batch of finished runs past the horizon with their journal and
-- tool results, old skipped-fire records, the journal's partitions (two months ahead; old
-- months without a live run dropped) and long-expired stream tickets. The horizon is the
-- caller's setting but never under 7 days (0 keeps everything), so the API's role cannot use
-- it to wipe recent history. Returns the number of runs deleted.
CREATE FUNCTION retention_upkeep(keep_days integer, batch_size integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    deleted integer := 0;
BEGIN
    IF keep_days < 0 OR keep_days BETWEEN 1 AND 6 THEN
        RAISE EXCEPTION 'retention through the tick keeps at least 7 days (or 0: everything), not %',
            keep_days USING ERRCODE = '22023';
    END IF;
    -- The partitions' lock first: the journal rows deleted below sit in the default partition,
    -- which a concurrent upkeep creating a partition must lock whole (a deadlock otherwise).
    PERFORM pg_advisory_xact_lock(hashtext('tickwork.journal_partitions'));
    IF keep_days > 0 THEN
        WITH doomed AS (
            SELECT id FROM executions
             WHERE status IN ('completed', 'failed', 'cancelled')
               AND breadcrumb IS DISTINCT FROM 'suspended'
               AND finished_at < now() - make_interval(days => keep_days)
             LIMIT least(greatest(batch_size, 1), 10000)
               FOR UPDATE SKIP LOCKED
        ), events AS (
            DELETE FROM run_events r USING doomed d WHERE r.execution_id = d.id
        ), results AS (
            DELETE FROM tool_results t USING doomed d WHERE t.execution_id = d.id
        ), gone AS (
            DELETE FROM executions e USING doomed d WHERE e.id = d.id RETURNING 1
        )
        SELECT count(*) INTO deleted FROM gone;
        DELETE FROM skipped_fires
         WHERE ctid = ANY (ARRAY(SELECT ctid FROM skipped_fires
                                  WHERE recorded_at < now() - make_interval(days => keep_days)
                                  LIMIT least(greatest(batch_size, 1), 10000)));
    END IF;
    PERFORM manage_journal_partitions(now(), 2, keep_days);
    DELETE FROM stream_tickets WHERE expires_at < now() - interval '1 hour';
    RETURN deleted;
END;
$$;

REVOKE ALL ON FUNCTION journal_run_complete(uuid, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION remove_schedules_of_missing_agent(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION retention_upkeep(integer, integer) FROM PUBLIC;
