-- name: lease_queue_tasks
-- Lease up to %(limit)s resume tasks: ready ones first, then ones whose lease expired (a worker
-- died before taking the run back). Only resumes are leased: a fresh run is started by
-- claim_queued_runs alone. Each half reads its own partial index; SKIP LOCKED keeps workers
-- apart.
WITH ready AS (
    SELECT name FROM queue_tasks
     WHERE kind = 'resume' AND lease_expires_at IS NULL AND available_at <= now()
     ORDER BY available_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT name FROM queue_tasks
     WHERE kind = 'resume' AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT name FROM ready UNION ALL SELECT name FROM expired
     LIMIT %(limit)s
)
UPDATE queue_tasks q
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       deliveries = q.deliveries + 1
  FROM picked AS p
 WHERE q.name = p.name
RETURNING q.name, q.kind, q.execution_id, q.deliveries;

-- name: get_agent_for_run
SELECT id, name, instructions, tools, auto_approve, status FROM agents WHERE id = %(agent_id)s;

-- name: delete_agent_schedules
-- A run that finds its agent gone removes that agent's schedules itself, through the narrow
-- function of migration 0029 (the worker may not delete schedules).
SELECT remove_schedules_of_missing_agent(%(agent_id)s) AS removed;

-- name: append_run_events
-- One statement, so one round trip and atomic by itself: lock the running execution FOR SHARE
-- (this conflicts with the sweep's row lock, so an append either lands before the sweep judges
-- the run, whose terminal event then follows it, or finds the run no longer running and
-- appends nothing), append the batch, wake tails, and report a pending cancel request.
-- ON CONFLICT DO NOTHING makes a retried append idempotent: the run numbers its own events, so
-- a conflict can only be this run's earlier attempt whose commit acknowledgement was lost.
-- The batch is one jsonb array of {seq, parent_seq, type, payload} (sql/journal.py): one
-- json.dumps in the worker instead of a typed array per column, each dumped element by element.
WITH fence AS (
    SELECT id, cancel_requested_at FROM executions
     WHERE id = %(execution_id)s AND status = 'running' AND run_token = %(run_token)s
       FOR SHARE
), appended AS (
    INSERT INTO run_events (execution_id, seq, parent_seq, type, payload)
    SELECT fence.id, e.seq, e.parent_seq, e.type, e.payload
      FROM fence,
           jsonb_to_recordset(%(events)s::jsonb)
             AS e(seq integer, parent_seq integer, type text, payload jsonb)
    ON CONFLICT (execution_id, seq) DO NOTHING
), notified AS (
    SELECT pg_notify('tickwork_events', fence.id::text) FROM fence
)
SELECT (SELECT count(*) FROM fence) AS running,
       (SELECT cancel_requested_at IS NOT NULL FROM fence) AS cancel_requested,
       (SELECT count(*) FROM notified) AS notified;

-- name: lock_running_execution
-- Taken by a suspension's transaction before it saves state (see append_run_events).
SELECT id FROM executions
 WHERE id = %(execution_id)s AND status = 'running' AND run_token = %(run_token)s
   FOR SHARE;

-- name: lock_execution_if_timed_out
-- The worker's own deadline: the same verdict the sweep gives, for one execution.
SELECT id, attempt, max_attempts FROM executions
 WHERE id = %(execution_id)s AND status = 'running' AND deadline <= now()
   FOR UPDATE SKIP LOCKED;

-- name: list_run_events
SELECT seq, parent_seq, type, payload, ts FROM run_events
 WHERE execution_id = %(execution_id)s AND seq > %(after)s
 ORDER BY seq
 LIMIT %(limit)s;

-- name: listen_for_tasks
LISTEN tickwork_tasks;

-- name: listen_for_events
LISTEN tickwork_events;

-- name: run_tail_state
-- What a tail needs besides events: whether the run exists for this tenant, its status, and
-- its last event.
SELECT e.id, e.status, e.breadcrumb,
       (SELECT max(seq) FROM run_events r WHERE r.execution_id = e.id) AS last_seq
  FROM executions e
 WHERE e.id = %(id)s AND e.tenant_id = %(tenant_id)s;

-- name: run_status
SELECT status FROM executions WHERE id = %(id)s;

-- name: claim_queued_runs
-- The one statement that starts fresh runs: pick up to %(limit)s run tasks (ready ones, then
-- leftovers an older worker leased and never claimed, once their lease expired; SKIP LOCKED),
-- insert their idempotency claims (a duplicate inserts nothing and runs nothing), start the
-- claimed executions with a deadline and run token, write run_start as event 1, drop the
-- tasks, and return each started run with its agent. Nothing is leased between picking and
-- claiming, so a worker that dies here either committed (the sweep owns the run from then on)
-- or did not (the task is still queued).
WITH ready AS (
    SELECT name, execution_id FROM queue_tasks
     WHERE kind = 'run' AND lease_expires_at IS NULL AND available_at <= now()
     ORDER BY available_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), leftover AS (
    SELECT name, execution_id FROM queue_tasks
     WHERE kind = 'run' AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT name, execution_id FROM ready UNION ALL SELECT name, execution_id FROM leftover
     LIMIT %(limit)s
), claimed AS (
    INSERT INTO execution_claims (execution_id, worker_id)
    SELECT execution_id, %(worker_id)s FROM picked
    ON CONFLICT (execution_id) DO NOTHING
    RETURNING execution_id
), started AS (
    UPDATE executions e
       SET status = 'running', started_at = now(), run_token = gen_random_uuid(),
           deadline = now() + make_interval(mins => e.timeout_minutes)
      FROM claimed c
     WHERE e.id = c.execution_id AND e.status = 'queued'
    RETURNING e.*
), journaled AS (
    INSERT INTO run_events (execution_id, seq, parent_seq, type, payload)
    SELECT id, 1, NULL, 'run_start',
           jsonb_build_object('attempt', attempt, 'trigger_type', trigger_type,
                              'trigger_source', trigger_source, 'worker_id', %(worker_id)s::text)
      FROM started
), dropped AS (
    DELETE FROM queue_tasks q USING picked p WHERE q.name = p.name
), tails_woken AS (  -- run_start reaches live tails at once, not with the first append
    SELECT pg_notify('tickwork_events', id::text) FROM started
)
SELECT s.*, NULL::bigint AS last_seq, a.id AS agent_found, a.instructions AS agent_instructions,
       a.tools AS agent_tools, a.auto_approve AS agent_auto_approve,
       (SELECT count(*) FROM tails_woken) AS tails_woken
  FROM started s
  LEFT JOIN agents a ON a.id = s.agent_id;

-- name: finish_runs
-- Many runs finished together, in one statement: each run is fenced on its own (only while
-- running, only with its token), its last events land with its verdict, and tails are woken.
-- The returned ids are the runs that finished; any other was fenced by the sweep. A run's
-- usage is its whole total (a resumed run's state carries what it spent before the pause).
-- The batch is one jsonb array, one object per run with its events nested (sql/finisher.py):
-- one json.dumps in the worker instead of eleven typed arrays dumped element by element. The
-- ids are also given as an array (an InitPlan) so executions is reached by its primary key.
WITH runs AS (
    SELECT * FROM jsonb_to_recordset(%(runs)s::jsonb)
             AS r(id uuid, run_token uuid, status text, outcome text, reason text, usage jsonb,
                  events jsonb)
), fence AS (
    SELECT e.id FROM executions e
      JOIN runs r ON r.id = e.id AND r.run_token = e.run_token
     WHERE e.status = 'running' AND e.id = ANY (ARRAY(SELECT id FROM runs))
     ORDER BY e.id
       FOR UPDATE OF e
), appended AS (
    INSERT INTO run_events (execution_id, seq, parent_seq, type, payload)
    SELECT r.id, ev.seq, ev.parent_seq, ev.type, ev.payload
      FROM runs r
      JOIN fence f ON f.id = r.id
     CROSS JOIN LATERAL jsonb_to_recordset(r.events)
           AS ev(seq integer, parent_seq integer, type text, payload jsonb)
    ON CONFLICT (execution_id, seq) DO NOTHING
), finished AS (
    UPDATE executions e
       SET status = r.status, outcome = r.outcome, reason = r.reason, finished_at = now(),
           usage = coalesce(r.usage, e.usage)  -- a NULL usage leaves the column as it is
      FROM runs r JOIN fence f ON f.id = r.id
     WHERE e.id = r.id
    RETURNING e.id
), notified AS (
    SELECT pg_notify('tickwork_events', id::text) FROM finished
)
SELECT id, (SELECT count(*) FROM notified) AS notified FROM finished;
