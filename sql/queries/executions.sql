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

-- name: start_agent_run
-- POST /v1/agents/{id}/runs in one statement: the tenant's agent, held FOR SHARE until commit
-- (a pause that commits first is seen, one that comes later waits for this run), the
-- execution and its queue task unless the agent is paused, NOTIFY at commit; and when nothing
-- was inserted because the Idempotency-Key was used before, the run that use created (as of
-- this statement's snapshot). Always one row: agent_status NULL means no such agent of this
-- tenant; created true means this call queued the run, false means the row is the earlier
-- run of this key, NULL means no run (a paused agent, or a same-key request still committing).
WITH agent AS (
    SELECT id, status FROM agents
     WHERE id = %(agent_id)s AND tenant_id = %(tenant_id)s
       FOR SHARE
), inserted AS (
    INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type, trigger_source,
                            scheduled_for, max_attempts, timeout_minutes, input,
                            idempotency_key, request_hash)
    SELECT %(id)s, %(tenant_id)s, agent.id, NULL, 'run', 'api', now(), %(max_attempts)s,
           %(timeout_minutes)s, %(input)s, %(idempotency_key)s, %(request_hash)s
      FROM agent
     WHERE agent.status <> 'paused'
    ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
), queued AS (
    INSERT INTO queue_tasks (name, kind, execution_id)
    SELECT id::text, 'run', id FROM inserted
    ON CONFLICT (name) DO NOTHING
    RETURNING execution_id
), notified AS (
    SELECT pg_notify('tickwork_tasks', 'run') FROM queued
), run AS (
    SELECT true AS created, * FROM inserted
    UNION ALL
    SELECT false AS created, * FROM executions
     WHERE %(idempotency_key)s::text IS NOT NULL
       AND tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s::text
       AND NOT EXISTS (SELECT 1 FROM inserted)
)
SELECT agent.status AS agent_status, (SELECT count(*) FROM notified) AS notified, run.*
  FROM (SELECT) AS one
  LEFT JOIN agent ON true
  LEFT JOIN run ON true;

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
