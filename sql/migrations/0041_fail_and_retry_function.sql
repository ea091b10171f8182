-- fail_and_retry_executions: the one place a retry is minted (the sweep, a worker at its own
-- deadline, a worker releasing its run at shutdown), as a narrow SECURITY DEFINER door so the
-- worker needs no INSERT on executions or on queue_tasks for retries (RELIABILITY S4). The
-- caller names only the executions (and, for a release, its run token); the function decides
-- everything else as the statement did before: it fails only runs still 'running' and past
-- their deadline (timed out) or fenced by the caller's run token (released), and copies the
-- retry from the failed row (attempt + 1, retry_of), with an id it mints itself (UUIDv7).
-- Two doors, one body: the worker's (three arguments) takes no date, so the deadline check and
-- finished_at use the database clock; the sweep's (a fourth argument, sweep_time, the injected
-- clock the sweep locked its batch with; NULL is the database clock) is granted only to the
-- roles that dispatch runs and so may insert executions anyway (the scheduler, the API's tick).
--   timed out: outcome timed_out, a retry while attempts remain;
--   released: outcome failed, breadcrumb 'released', always a retry, queued at once, whose
--     max_attempts is one more, so a deploy does not use up the attempts kept for timeouts.
-- Returns one row per failed execution: its id and its retry's id (NULL when none).
CREATE FUNCTION fail_and_retry_executions(ids uuid[], released boolean, fence uuid,
                                          sweep_time timestamptz)
RETURNS TABLE (failed_id uuid, retry_id uuid)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF released AND fence IS NULL THEN
        RAISE EXCEPTION 'a release needs the run token of the run it releases';
    END IF;
    RETURN QUERY
    WITH candidates AS (
        SELECT e.id,
               CASE WHEN released OR e.attempt < e.max_attempts
                    THEN encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                             PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                              * 1000)::bigint) FROM 3)
                             FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid END AS retry_id
          FROM executions e
         WHERE e.id = ANY(ids) AND e.status = 'running'
           AND CASE WHEN released THEN e.run_token = fence ELSE e.deadline <= coalesce(sweep_time, now()) END
    ), failed AS (
        UPDATE executions e
           SET status = 'failed',
               outcome = CASE WHEN released THEN 'failed' ELSE 'timed_out' END,
               breadcrumb = CASE WHEN released THEN 'released' ELSE e.breadcrumb END,
               reason = CASE WHEN released
                             THEN format('released: the worker shut down before the run '
                                         'finished; retried as %s', c.retry_id)
                             ELSE format('timed_out: no result within %s minutes '
                                         '(attempt %s of %s)',
                                         e.timeout_minutes, e.attempt, e.max_attempts) END,
               finished_at = coalesce(sweep_time, now())
          FROM candidates c
         WHERE e.id = c.id AND e.status = 'running'
        RETURNING e.*, c.retry_id AS new_id
    ), journaled AS (
        SELECT journal_run_complete(f.id,
               CASE WHEN released
                    THEN jsonb_build_object('status', 'failed', 'outcome', 'failed', 'by', 'worker',
                                            'released', true, 'reason', f.reason,
                                            'retry_id', f.new_id)
                    ELSE jsonb_build_object('status', 'failed', 'outcome', 'timed_out',
                                            'by', 'sweep', 'retry_id', f.new_id) END) AS added
          FROM failed f
    ), retried AS (
        INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type,
                                trigger_source, scheduled_for, attempt, max_attempts, retry_of,
                                timeout_minutes, input)
        SELECT f.new_id, f.tenant_id, f.agent_id, f.schedule_id, f.trigger_type,
               f.trigger_source, f.scheduled_for, f.attempt + 1,
               f.max_attempts + CASE WHEN released THEN 1 ELSE 0 END,
               f.id, f.timeout_minutes, f.input
          FROM failed f
         WHERE f.new_id IS NOT NULL
        ON CONFLICT (retry_of) WHERE retry_of IS NOT NULL DO NOTHING
        RETURNING executions.id, executions.retry_of
    ), queued AS (
        INSERT INTO queue_tasks (name, kind, execution_id)
        SELECT r.id::text, 'run', r.id FROM retried r
        ON CONFLICT (name) DO NOTHING
        RETURNING 1
    ), notified AS (
        SELECT pg_notify('tickwork_tasks', 'run') FROM (SELECT 1 FROM queued LIMIT 1) AS any_queued
    ), tails_woken AS (
        SELECT pg_notify('tickwork_events', f.id::text) FROM failed f
    )
    SELECT f.id, r.id
      FROM failed f LEFT JOIN retried r ON r.retry_of = f.id
     -- every CTE is referenced so that each one runs (journal, queue, notifications)
     WHERE (SELECT count(*) FROM journaled) >= 0 AND (SELECT count(*) FROM notified) >= 0
       AND (SELECT count(*) FROM tails_woken) >= 0;
END;
$$;

CREATE FUNCTION fail_and_retry_executions(ids uuid[], released boolean, fence uuid)
RETURNS TABLE (failed_id uuid, retry_id uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT * FROM fail_and_retry_executions(ids, released, fence, NULL::timestamptz);
$$;

REVOKE ALL ON FUNCTION fail_and_retry_executions(uuid[], boolean, uuid, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION fail_and_retry_executions(uuid[], boolean, uuid) FROM PUBLIC;
