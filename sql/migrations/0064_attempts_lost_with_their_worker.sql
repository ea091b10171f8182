-- An attempt lost because its worker died is not one of the agent's attempts.
--
-- A worker killed with SIGKILL (or by the OOM killer, or a lost host) leaves every run it held
-- `running` until the sweep finds it past its deadline. Until now the sweep counted each of them
-- as a timed-out attempt, so a run could spend all of its attempts on worker deaths that had
-- nothing to do with it: a chaos run (bench/chaos.py, seed 541765) lost 5 of 1,200 chains that
-- way, the same group of runs claimed together three times by a worker killed the next second.
--
-- How the sweep knows the worker is gone: every worker process holds, on its LISTEN connection,
-- a session advisory lock keyed on its worker id (sql/presence.py, query
-- hold_worker_presence: key 1953064811, hashtext(worker_id)). The kernel closes a dead
-- process's sockets and Postgres drops its locks with its session. A run whose claim names a
-- worker holding no such lock in this database was lost with its worker. A live worker judges
-- its own runs at their deadline, so the sweep meets a run of a live worker only in a race at
-- the deadline or while that worker's LISTEN connection reconnects; either way the worst it
-- does is give one attempt back. A run with no claim row (none in practice) counts as before.
--
-- Such an attempt ends as before (failed, timed_out, journaled by the sweep, with its reason
-- saying the worker was gone, and "worker_lost": true in run_complete's payload), and its retry
-- gets one more allowed attempt, as a release at shutdown does (0041). A run that kills its own
-- worker every time (a poison pill: a tool that exhausts memory) must still end: a chain gets
-- at most 5 attempts back this way, counted in executions.workers_lost (copied down the chain);
-- after that a lost attempt counts like any other timeout.
ALTER TABLE executions ADD COLUMN workers_lost smallint NOT NULL DEFAULT 0;

-- The workers present in this database, as pg_locks shows their presence locks: one row each,
-- worker_key = hashtext(worker_id)::oid. The one definition the sweep (below) and the metrics'
-- workers_present gauge (get_metric_gauges) both read.
CREATE VIEW worker_presences AS
SELECT objid AS worker_key
  FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND objsubid = 2
   AND classid = 1953064811::oid  -- sql/presence.py PRESENCE_KEY
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database());

CREATE OR REPLACE FUNCTION fail_and_retry_executions(ids uuid[], released boolean, fence uuid,
                                                     sweep_time timestamptz)
RETURNS TABLE (failed_id uuid, retry_id uuid)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    attempts_given_back constant integer := 5;
BEGIN
    IF released AND fence IS NULL THEN
        RAISE EXCEPTION 'a release needs the run token of the run it releases';
    END IF;
    RETURN QUERY
    WITH judged AS (
        SELECT e.id, e.attempt, e.max_attempts, e.workers_lost, claim.worker_id,
               NOT released AND claim.worker_id IS NOT NULL AND NOT EXISTS (
                   SELECT 1 FROM worker_presences p
                    WHERE p.worker_key = hashtext(claim.worker_id)::oid) AS worker_gone
          FROM executions e
          LEFT JOIN execution_claims claim ON claim.execution_id = e.id
         WHERE e.id = ANY(ids) AND e.status = 'running'
           AND CASE WHEN released THEN e.run_token = fence ELSE e.deadline <= coalesce(sweep_time, now()) END
    ), candidates AS (
        SELECT j.id, j.worker_id, j.worker_gone, back.given_back,
               CASE WHEN released OR j.attempt < j.max_attempts OR back.given_back
                    THEN encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                             PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                              * 1000)::bigint) FROM 3)
                             FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid END AS new_id
          FROM judged j,
               LATERAL (SELECT j.worker_gone AND j.workers_lost < attempts_given_back
                               AS given_back) back
    ), failed AS (
        UPDATE executions e
           SET status = 'failed',
               outcome = CASE WHEN released THEN 'failed' ELSE 'timed_out' END,
               breadcrumb = CASE WHEN released THEN 'released' ELSE e.breadcrumb END,
               reason = CASE WHEN released
                             THEN format('released: the worker shut down before the run '
                                         'finished; retried as %s', c.new_id)
                             WHEN c.given_back
                             THEN format('timed_out: its worker (%s) was gone; retried as %s, '
                                         'and this attempt is not counted (%s of %s given back '
                                         'to this run)', c.worker_id, c.new_id,
                                         e.workers_lost + 1, attempts_given_back)
                             ELSE format('timed_out: no result within %s minutes '
                                         '(attempt %s of %s)',
                                         e.timeout_minutes, e.attempt, e.max_attempts) END,
               finished_at = coalesce(sweep_time, now())
          FROM candidates c
         WHERE e.id = c.id AND e.status = 'running'
        RETURNING e.*, c.new_id, c.worker_gone, c.given_back
    ), journaled AS (
        SELECT journal_run_complete(f.id,
               CASE WHEN released
                    THEN jsonb_build_object('status', 'failed', 'outcome', 'failed', 'by', 'worker',
                                            'released', true, 'reason', f.reason,
                                            'retry_id', f.new_id)
                    WHEN f.worker_gone
                    THEN jsonb_build_object('status', 'failed', 'outcome', 'timed_out',
                                            'by', 'sweep', 'retry_id', f.new_id,
                                            'worker_lost', true)
                    ELSE jsonb_build_object('status', 'failed', 'outcome', 'timed_out',
                                            'by', 'sweep', 'retry_id', f.new_id) END) AS added
          FROM failed f
    ), retried AS (
        INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type,
                                trigger_source, scheduled_for, attempt, max_attempts, retry_of,
                                timeout_minutes, input, workers_lost)
        SELECT f.new_id, f.tenant_id, f.agent_id, f.schedule_id, f.trigger_type,
               f.trigger_source, f.scheduled_for, f.attempt + 1,
               f.max_attempts + CASE WHEN released OR f.given_back THEN 1 ELSE 0 END,
               f.id, f.timeout_minutes, f.input,
               f.workers_lost + CASE WHEN f.worker_gone THEN 1 ELSE 0 END
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

