-- name: insert_schedule
-- next_run is computed by the caller from the database clock read in the same transaction.
INSERT INTO schedules (id, tenant_id, agent_id, cron, timeout_minutes, overlap, max_attempts,
                       display, input, next_run)
VALUES (%(id)s, %(tenant_id)s, %(agent_id)s, %(cron)s, %(timeout_minutes)s, %(overlap)s,
        %(max_attempts)s, %(display)s, %(input)s, %(next_run)s)
ON CONFLICT (agent_id, cron) DO NOTHING
RETURNING *;

-- name: get_schedule_by_agent_cron
-- The agent's schedule with this cron, to name it in a duplicate's refusal.
SELECT id FROM schedules WHERE agent_id = %(agent_id)s AND cron = %(cron)s;

-- name: get_schedule
-- One schedule of the tenant (another tenant's is not found).
SELECT * FROM schedules WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: lock_schedule
-- One schedule of the tenant, held until commit so that a PATCH reads and writes the same row
-- (two concurrent patches do not lose each other's fields).
SELECT * FROM schedules WHERE id = %(id)s AND tenant_id = %(tenant_id)s FOR UPDATE;

-- name: list_schedules
-- A tenant's schedules newest first, optionally of one agent, a page before the cursor.
SELECT * FROM schedules
 WHERE tenant_id = %(tenant_id)s
   AND (%(agent_id)s::uuid IS NULL OR agent_id = %(agent_id)s::uuid)
   AND (%(cursor)s::uuid IS NULL OR id < %(cursor)s::uuid)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: update_schedule
-- Replace a schedule's editable fields (the caller merged the patch and recomputed next_run).
UPDATE schedules
   SET status = %(status)s, timeout_minutes = %(timeout_minutes)s, overlap = %(overlap)s,
       input = %(input)s, display = %(display)s, next_run = %(next_run)s, updated_at = now()
 WHERE id = %(id)s AND tenant_id = %(tenant_id)s
RETURNING *;

-- name: delete_schedule
-- Remove a tenant's schedule; its past runs stay as history.
DELETE FROM schedules WHERE id = %(id)s AND tenant_id = %(tenant_id)s RETURNING id;

-- name: list_schedule_history
-- What happened to each fire of a schedule, newest first: executions (cron fires, run-now,
-- retries) and fires that got no execution of their own (coalesced or skipped), with why. A
-- run waiting for a person shows as 'waiting' (sql/vocabulary.py ShownRunStatus).
SELECT * FROM (
    SELECT e.scheduled_for, 'execution' AS kind, e.trigger_source AS reason, e.id AS execution_id,
           CASE WHEN e.status = 'completed' AND e.breadcrumb = 'suspended' THEN 'waiting'
                ELSE e.status END AS status,
           e.outcome, e.fires, e.attempt, e.created_at AS recorded_at
      FROM executions e
     WHERE e.schedule_id = %(id)s AND e.tenant_id = %(tenant_id)s
    UNION ALL
    SELECT f.scheduled_for, 'skipped_fire', f.reason, f.execution_id,
           NULL, NULL, NULL, NULL, f.recorded_at
      FROM skipped_fires f
     WHERE f.schedule_id = %(id)s AND f.tenant_id = %(tenant_id)s
) AS history
 ORDER BY scheduled_for DESC, recorded_at DESC
 LIMIT %(limit)s;

-- name: claim_due_schedules
-- Lock a batch of due, active schedules; other dispatchers skip them and take the next batch.
-- tick_time is the one clock of the tick: the caller's fixed time in tests, else the
-- database's now(), read inside this transaction. unfinished_execution_id is only looked up
-- for overlap = 'skip' (from a partial index of unfinished runs, migration 0075): a queued or
-- running run, or one waiting for a person (completed, breadcrumb 'suspended'), which has not
-- finished either. The predicate is the index's own, word for word, so the planner can prove
-- the index serves it. The columns are those of
-- scheduler.planner.DueSchedule, in its order: rows are read straight into it.
SELECT s.id, s.cron, s.next_run, s.overlap,
       a.status AS agent_status,
       CASE WHEN s.overlap = 'skip' THEN
           (SELECT e.id FROM executions e
             WHERE e.schedule_id = s.id
               AND (e.status IN ('queued', 'running')
                    OR (e.status = 'completed' AND e.breadcrumb = 'suspended'))
             LIMIT 1)
       END AS unfinished_execution_id,
       coalesce(%(now)s::timestamptz, now()) AS tick_time
  FROM schedules s
  JOIN agents a ON a.id = s.agent_id
 WHERE s.status = 'active'
   AND s.next_run <= coalesce(%(now)s::timestamptz, now())
 ORDER BY s.next_run
 LIMIT %(limit)s
   FOR UPDATE OF s SKIP LOCKED;

-- name: update_claimed_schedules
-- In one statement of the claiming transaction: advance next_run, insert one execution per
-- firing schedule, name a queue task after each new execution, record skipped fires, and
-- NOTIFY workers (delivered at commit). ON CONFLICT on the one-per-fire index turns a racing
-- writer into a no-op instead of a duplicate. uuid and timestamp arrays come in binary.
WITH plan AS (
    SELECT * FROM unnest(%(schedule_ids)b::uuid[], %(next_runs)b::timestamptz[],
                         %(fire_ats)b::timestamptz[], %(execution_ids)s::uuid[],
                         %(fires)s::integer[])
             AS p(schedule_id, next_run, fire_at, execution_id, fires)
), advanced AS (
    -- RETURNING hands the inserts below what they need of each schedule, so schedules is
    -- read once per batch (by primary key), not once more for the executions and the skips.
    UPDATE schedules s
       SET next_run = p.next_run,
           last_run = coalesce(p.fire_at, s.last_run),
           updated_at = now()
      FROM plan p
     WHERE s.id = p.schedule_id
       -- The ANY() lets the planner use the primary key; a bare join to the unnest() can
       -- choose a hash join over the whole table, which grows with schedules that are not due.
       AND s.id = ANY (%(schedule_ids)b::uuid[])
    RETURNING s.id, s.tenant_id, s.agent_id, s.max_attempts, s.timeout_minutes, s.input,
              p.fire_at, p.execution_id, p.fires
), inserted AS (
    INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type, trigger_source,
                            scheduled_for, fires, max_attempts, timeout_minutes, input)
    SELECT a.execution_id, a.tenant_id, a.agent_id, a.id, 'schedule', 'cron',
           a.fire_at, a.fires, a.max_attempts, a.timeout_minutes, a.input
      FROM advanced a
     WHERE a.fire_at IS NOT NULL
    ON CONFLICT (schedule_id, scheduled_for) WHERE retry_of IS NULL AND trigger_source = 'cron'
    DO NOTHING
    RETURNING id
), queued AS (
    -- No ON CONFLICT here: a task is named after an execution this statement just inserted
    -- under a freshly minted id, so no task can hold that name yet. A speculative insert would
    -- cost a second WAL record per row (HEAP_CONFIRM) and an extra probe of the primary key.
    INSERT INTO queue_tasks (name, kind, execution_id)
    SELECT id::text, 'run', id FROM inserted
    RETURNING 1
), skipped AS (
    INSERT INTO skipped_fires (schedule_id, scheduled_for, tenant_id, reason, execution_id)
    SELECT k.schedule_id, k.scheduled_for, a.tenant_id, k.reason, k.execution_id
      FROM unnest(%(skip_schedule_ids)b::uuid[], %(skip_times)b::timestamptz[],
                  %(skip_reasons)s::text[], %(skip_execution_ids)s::uuid[])
           AS k(schedule_id, scheduled_for, reason, execution_id)
      JOIN advanced a ON a.id = k.schedule_id
    ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
    RETURNING 1
), notified AS (
    SELECT pg_notify('tickwork_tasks', 'run') FROM (SELECT 1 FROM queued LIMIT 1) AS any_queued
)
SELECT (SELECT count(*) FROM inserted) AS created,
       (SELECT count(*) FROM queued) AS queued,
       (SELECT count(*) FROM skipped) AS skipped,
       (SELECT count(*) FROM notified) AS notified;

-- name: delete_schedules_of_missing_agent
-- A run that finds its agent gone removes that agent's schedules itself, through the narrow
-- function of migration 0029 (the worker may not delete schedules).
SELECT remove_schedules_of_missing_agent(%(agent_id)s) AS removed;
