-- name: lock_timed_out_executions
-- Running executions past their deadline, locked so that two sweepers never judge the same
-- one. A suspended run is 'completed', never 'running', so it is never swept.
SELECT id, tenant_id, agent_id, schedule_id, trigger_type, trigger_source, scheduled_for,
       attempt, max_attempts, timeout_minutes, input, deadline,
       coalesce(%(now)s::timestamptz, now()) AS sweep_time
  FROM executions
 WHERE status = 'running'
   AND deadline < coalesce(%(now)s::timestamptz, now())
 ORDER BY deadline
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- name: fail_timed_out_executions
-- Mark the locked executions failed, journal the terminal event, mint one retry each (new id,
-- attempt + 1, retry_of) where a retry id is given, queue the retries and wake workers: one
-- statement, one transaction. The status guard makes a late worker's write and this verdict
-- mutually exclusive. Two verdicts share it, so retries are minted in this one place:
--   timed out (the sweep, or a worker at its own deadline): outcome timed_out, a retry while
--     attempts remain;
--   released (the released flag: a worker shut down with the run unfinished): outcome failed,
--     breadcrumb 'released', and always a retry, queued at once, whose max_attempts is one
--     more, so a deploy does not use up the attempts kept for timeouts.
WITH stale AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(retry_ids)s::uuid[]) AS s(id, retry_id)
), failed AS (
    UPDATE executions e
       SET status = 'failed',
           outcome = CASE WHEN %(released)s THEN 'failed' ELSE 'timed_out' END,
           breadcrumb = CASE WHEN %(released)s THEN 'released' ELSE e.breadcrumb END,
           reason = CASE WHEN %(released)s
                         THEN format('released: the worker shut down before the run finished; '
                                     'retried as %%s', stale.retry_id)
                         ELSE format('timed_out: no result within %%s minutes (attempt %%s of %%s)',
                                     e.timeout_minutes, e.attempt, e.max_attempts) END,
           finished_at = coalesce(%(now)s::timestamptz, now())
      FROM stale
     WHERE e.id = stale.id AND e.status = 'running'
    RETURNING e.*, stale.retry_id
), journaled AS (  -- through the narrow function (migration 0029): no role needs INSERT on run_events
    SELECT journal_run_complete(f.id,
           CASE WHEN %(released)s
                THEN jsonb_build_object('status', 'failed', 'outcome', 'failed', 'by', 'worker',
                                        'released', true, 'reason', f.reason,
                                        'retry_id', f.retry_id)
                ELSE jsonb_build_object('status', 'failed', 'outcome', 'timed_out', 'by', 'sweep',
                                        'retry_id', f.retry_id) END) AS added
      FROM failed f
), retried AS (
    INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type, trigger_source,
                            scheduled_for, attempt, max_attempts, retry_of, timeout_minutes, input)
    SELECT f.retry_id, f.tenant_id, f.agent_id, f.schedule_id, f.trigger_type, f.trigger_source,
           f.scheduled_for, f.attempt + 1,
           f.max_attempts + CASE WHEN %(released)s THEN 1 ELSE 0 END,
           f.id, f.timeout_minutes, f.input
      FROM failed f
     WHERE f.retry_id IS NOT NULL
    ON CONFLICT (retry_of) WHERE retry_of IS NOT NULL DO NOTHING
    RETURNING id
), queued AS (
    INSERT INTO queue_tasks (name, kind, execution_id)
    SELECT id::text, 'run', id FROM retried
    ON CONFLICT (name) DO NOTHING
    RETURNING 1
), notified AS (
    SELECT pg_notify('tickwork_tasks', 'run') FROM (SELECT 1 FROM queued LIMIT 1) AS any_queued
), tails_woken AS (
    SELECT pg_notify('tickwork_events', f.id::text) FROM failed f
)
SELECT (SELECT count(*) FROM failed) AS failed,
       (SELECT count(*) FROM tails_woken) AS tails_woken,
       (SELECT count(*) FROM retried) AS retried,
       (SELECT coalesce(sum(added), 0) FROM journaled) AS journaled,
       (SELECT count(*) FROM notified) AS notified;
