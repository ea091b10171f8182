-- name: insert_manual_execution
-- A run started by "run now" or the API: it goes down the same queue path as a cron fire
-- (task named by the execution id, NOTIFY at commit). With an Idempotency-Key, a second
-- request with the same key inserts nothing and the caller reads the first execution.
WITH inserted AS (
    INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type, trigger_source,
                            scheduled_for, max_attempts, timeout_minutes, input,
                            idempotency_key, request_hash)
    VALUES (%(id)s, %(tenant_id)s, %(agent_id)s, %(schedule_id)s, %(trigger_type)s,
            %(trigger_source)s, now(), %(max_attempts)s, %(timeout_minutes)s, %(input)s,
            %(idempotency_key)s, %(request_hash)s)
    ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
), queued AS (
    INSERT INTO queue_tasks (name, kind, execution_id)
    SELECT id::text, 'run', id FROM inserted
    ON CONFLICT (name) DO NOTHING
    RETURNING execution_id
), notified AS (
    SELECT pg_notify('tickwork_tasks', 'run') FROM queued
)
SELECT inserted.*, (SELECT count(*) FROM notified) AS notified FROM inserted;

-- name: lock_agent_for_run
-- Read the agent's status for a run started by hand, holding the row until the run is queued
-- (a concurrent pause waits, so "paused" is never half-applied).
SELECT status FROM agents WHERE id = %(agent_id)s FOR SHARE;

-- name: get_execution_by_idempotency_key
SELECT * FROM executions WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s;

-- name: get_execution
SELECT * FROM executions WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: list_executions
SELECT * FROM executions
 WHERE tenant_id = %(tenant_id)s
   AND (%(agent_id)s::uuid IS NULL OR agent_id = %(agent_id)s::uuid)
   AND (%(schedule_id)s::uuid IS NULL OR schedule_id = %(schedule_id)s::uuid)
   AND (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
   AND (%(cursor)s::uuid IS NULL OR id < %(cursor)s::uuid)
 ORDER BY id DESC
 LIMIT %(limit)s;
