-- name: insert_schedule
-- next_run is computed by the caller from the database clock read in the same transaction.
INSERT INTO schedules (id, tenant_id, agent_id, cron, timeout_minutes, overlap, max_attempts,
                       display, input, next_run)
VALUES (%(id)s, %(tenant_id)s, %(agent_id)s, %(cron)s, %(timeout_minutes)s, %(overlap)s,
        %(max_attempts)s, %(display)s, %(input)s, %(next_run)s)
ON CONFLICT (agent_id, cron) DO NOTHING
RETURNING *;

-- name: find_schedule_by_agent_cron
SELECT id FROM schedules WHERE agent_id = %(agent_id)s AND cron = %(cron)s;

-- name: get_schedule
SELECT * FROM schedules WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: lock_schedule
SELECT * FROM schedules WHERE id = %(id)s AND tenant_id = %(tenant_id)s FOR UPDATE;

-- name: list_schedules
SELECT * FROM schedules
 WHERE tenant_id = %(tenant_id)s
   AND (%(agent_id)s::uuid IS NULL OR agent_id = %(agent_id)s::uuid)
   AND (%(cursor)s::uuid IS NULL OR id < %(cursor)s::uuid)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: update_schedule
UPDATE schedules
   SET status = %(status)s, timeout_minutes = %(timeout_minutes)s, overlap = %(overlap)s,
       input = %(input)s, display = %(display)s, next_run = %(next_run)s, updated_at = now()
 WHERE id = %(id)s AND tenant_id = %(tenant_id)s
RETURNING *;

-- name: delete_schedule
DELETE FROM schedules WHERE id = %(id)s AND tenant_id = %(tenant_id)s RETURNING id;

-- name: database_now
SELECT now() AS now;

-- name: schedule_history
-- What happened to each fire of a schedule, newest first: executions (cron fires, run-now,
-- retries) and fires that got no execution of their own (coalesced or skipped), with why.
SELECT * FROM (
    SELECT e.scheduled_for, 'execution' AS kind, e.trigger_source AS reason, e.id AS execution_id,
           e.status, e.outcome, e.fires, e.attempt, e.created_at AS recorded_at
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
