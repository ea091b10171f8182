-- name: insert_agent_run
-- The one way a person or a program starts a run (POST /v1/agents/{id}/runs, trigger run/api,
-- and run-now on a schedule, trigger schedule/manual), in one statement that goes down the
-- same queue path as a cron fire: the function start_agent_run (migration 0060, a PL/pgSQL
-- function for its cached plan) holds the tenant's agent FOR SHARE until commit (a pause that
-- commits first is seen, one that comes later waits for this run) and inserts the execution
-- and its queue task unless the agent is paused (the caller wakes workers once the statement
-- has committed: sql/notify.py says why not in this transaction); when nothing was inserted
-- because the Idempotency-Key was used before, the row is the run that use created (as of
-- this statement's snapshot). Always one row: agent_status NULL means no such agent of this
-- tenant; created true means this call queued the run, false means the row is the earlier
-- run of this key, NULL means no run (a paused agent, or a same-key request still committing).
SELECT started.agent_status, started.queued, started.created, (started.run).*
  FROM start_agent_run(%(id)s::uuid, %(tenant_id)s::uuid, %(agent_id)s::uuid,
                       %(schedule_id)s::uuid, %(trigger_type)s::text, %(trigger_source)s::text,
                       %(max_attempts)s::integer, %(timeout_minutes)s::integer,
                       %(input)s::jsonb, %(idempotency_key)s::text,
                       %(request_hash)s::text) AS started;

-- name: insert_agent_runs
-- Many keyless run starts of one tenant in one statement and one commit (scheduler/run_batch.py):
-- the function start_agent_runs (migration 0061) does for each element of %(runs)s what
-- start_agent_run does for one. One row per element, found by request_id: agent_status NULL
-- means no such agent of this tenant; id NULL means nothing was queued (a paused agent). Only
-- the columns a run's answer shows come back.
SELECT s.request_id, s.agent_status, (s.run).id, (s.run).agent_id, (s.run).schedule_id,
       (s.run).trigger_type, (s.run).trigger_source, (s.run).status, (s.run).outcome,
       (s.run).breadcrumb, (s.run).attempt, (s.run).retry_of, (s.run).scheduled_for,
       (s.run).created_at, (s.run).started_at, (s.run).finished_at, (s.run).fires,
       (s.run).max_attempts, (s.run).timeout_minutes, (s.run).reason, (s.run).deadline,
       (s.run).input, (s.run).usage
  FROM start_agent_runs(%(tenant_id)s::uuid, %(trigger_type)s::text, %(trigger_source)s::text,
                        %(max_attempts)s::integer, %(runs)s::jsonb) AS s;

-- name: get_execution_by_idempotency_key
-- The run an earlier request with this Idempotency-Key created, to replay or to refuse a
-- different body.
SELECT * FROM executions WHERE tenant_id = %(tenant_id)s AND idempotency_key = %(idempotency_key)s;

-- name: get_execution
-- One run of the tenant (another tenant's is not found).
SELECT * FROM executions WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: list_executions
-- A tenant's runs newest first, filtered by agent, schedule, status and age, a page before the
-- cursor. The status is the one shown (sql/vocabulary.py ShownRunStatus): 'waiting' is a run
-- waiting for a person (completed, breadcrumb 'suspended'), which 'completed' leaves out.
SELECT * FROM executions
 WHERE tenant_id = %(tenant_id)s
   AND (%(agent_id)s::uuid IS NULL OR agent_id = %(agent_id)s::uuid)
   AND (%(schedule_id)s::uuid IS NULL OR schedule_id = %(schedule_id)s::uuid)
   AND (%(status)s::text IS NULL
        OR CASE WHEN status = 'completed' AND breadcrumb IS NOT DISTINCT FROM 'suspended'
                THEN 'waiting' ELSE status END = %(status)s::text)
   AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
   AND (%(cursor)s::uuid IS NULL OR id < %(cursor)s::uuid)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: get_execution_status
-- A run's status alone, no tenant filter: the hub asks on behalf of a tail already scoped to the
-- run.
SELECT status FROM executions WHERE id = %(id)s;

-- name: list_execution_statuses
-- Several runs' statuses, no tenant filter: the hub asks on behalf of tails already scoped to
-- their runs (a run that is gone is absent).
SELECT id, status FROM executions WHERE id = ANY (%(ids)s::uuid[]);

-- name: get_execution_tail_state
-- What a tail needs besides events: whether the run exists for this tenant, its status, and
-- its last event.
SELECT e.id, e.status, e.breadcrumb,
       (SELECT max(seq) FROM run_events r WHERE r.execution_id = e.id) AS last_seq
  FROM executions e
 WHERE e.id = %(id)s AND e.tenant_id = %(tenant_id)s;

-- name: claim_queued_executions
-- The one statement that starts fresh runs: pick up to %(limit)s run tasks, round-robin across
-- the tenants with work (below), then leftovers an older worker leased and never claimed, once
-- their lease expired (SKIP LOCKED); keep those that fit the caps (the tenant's running runs
-- under %(tenant_cap)s, 0 meaning none, and each agent's under its max_concurrent_runs: the
-- function runs_within_caps of migration 0077 counts them under a per-tenant lock, and only
-- for candidates a cap applies to); insert their idempotency claims (a duplicate inserts
-- nothing and runs nothing), start the claimed executions with a deadline (the agent's
-- timeout_minutes when it has one) and run token, write run_start as event 1, drop their
-- tasks, and return each started run with its agent, in the order picked (the worker wakes
-- their tails once this has committed: sql/notify.py). Nothing is leased between picking and
-- claiming, so a worker that dies here either committed (the sweep owns the run from then on)
-- or did not (the task is still queued). Every table is reached by its key, whatever the
-- backlog: the tasks are dropped by name (a join to the picked CTE was planned as a scan of
-- every queued task) and each run's agent is looked up by id; only the columns a run reads
-- come back. The claim_id parameter names this claim in its claim rows, for
-- get_runs_of_lost_claim.
-- (Each agent's tasks are read in the index's own order, tenant_id, agent_id, available_at:
-- sorted by available_at alone, a plan made while one tenant had work read them from
-- queue_tasks_ready_idx, every other tenant's tasks filtered out one by one.)
-- Round-robin: the agents with ready run tasks are found by a skip scan of
-- queue_tasks_tenant_ready_idx (one probe per agent, at most 256 of them); each tenant's agents
-- are ranked by their oldest task, and up to %(limit)s agents are chosen turn by turn (every
-- tenant's first agent, then every tenant's second...), each getting an equal share of the
-- claim, its own oldest tasks; these are ranked turn by turn again (within a tenant its agents
-- alternate; across tenants every tenant's first, then every tenant's second...), so one
-- tenant's backlog delays another's next run by at most one claim, and one agent's backlog held
-- by its cap does not hold back the tenant's other agents. What the shares leave unfilled (an
-- agent with fewer tasks than its share) is filled first in, first out.
-- Planned once per connection: every scan has a constant bound (the fill scans at most the
-- 256 oldest tasks it can lock, a constant: worker/runner.py CLAIM_BATCH, the largest claim,
-- is not above it) and an outer LIMIT stops it, so only what is taken is locked. With the
-- limit alone on the scan, a generic plan guessed it at a tenth of the queue, never looked
-- cheaper than a fresh plan, and every claim was planned again (a sixth of the time the claim
-- and the journal took, bench/README.md).
WITH RECURSIVE busy (tenant_id, agent_id) AS (
    (SELECT tenant_id, agent_id FROM queue_tasks
      WHERE kind = 'run' AND lease_expires_at IS NULL AND tenant_id IS NOT NULL
        AND agent_id IS NOT NULL
      ORDER BY tenant_id, agent_id
      LIMIT 1)
    UNION ALL
    SELECT n.tenant_id, n.agent_id
      FROM busy b
     CROSS JOIN LATERAL (SELECT q.tenant_id, q.agent_id FROM queue_tasks q
                          WHERE q.kind = 'run' AND q.lease_expires_at IS NULL
                            AND q.tenant_id IS NOT NULL AND q.agent_id IS NOT NULL
                            AND (q.tenant_id, q.agent_id) > (b.tenant_id, b.agent_id)
                          ORDER BY q.tenant_id, q.agent_id
                          LIMIT 1) n
), heads AS (
    SELECT t.tenant_id, t.agent_id, h.available_at,
           row_number() OVER (PARTITION BY t.tenant_id ORDER BY h.available_at) AS agent_turn
      FROM (SELECT tenant_id, agent_id FROM busy LIMIT 256) t
     CROSS JOIN LATERAL (SELECT q.available_at FROM queue_tasks q
                          WHERE q.tenant_id = t.tenant_id AND q.agent_id = t.agent_id
                            AND q.kind = 'run' AND q.lease_expires_at IS NULL
                            AND q.available_at <= now()
                          ORDER BY q.tenant_id, q.agent_id, q.available_at  -- the index's order
                          LIMIT 1) h
), chosen AS (
    SELECT tenant_id, agent_id FROM heads ORDER BY agent_turn, available_at LIMIT %(limit)s
), shares AS (
    SELECT tenant_id, agent_id, ceil(%(limit)s::numeric / count(*) OVER ())::integer AS share
      FROM chosen
), fair AS (
    SELECT p.name, p.execution_id, p.tenant_id, p.agent_id,
           row_number() OVER (ORDER BY p.tenant_turn, p.available_at) AS ord
      FROM (SELECT t.*, row_number() OVER (PARTITION BY t.tenant_id
                                           ORDER BY t.turn, t.available_at) AS tenant_turn
              FROM (SELECT t.name, t.execution_id, t.tenant_id, t.agent_id, t.available_at,
                           row_number() OVER (PARTITION BY t.tenant_id, t.agent_id
                                              ORDER BY t.available_at) AS turn
                      FROM shares s
                     CROSS JOIN LATERAL (
                           SELECT * FROM (SELECT q.name, q.execution_id, q.tenant_id,
                                                 q.agent_id, q.available_at
                                            FROM queue_tasks q
                                           WHERE q.tenant_id = s.tenant_id
                                             AND q.agent_id = s.agent_id AND q.kind = 'run'
                                             AND q.lease_expires_at IS NULL
                                             AND q.available_at <= now()
                                           ORDER BY q.tenant_id, q.agent_id, q.available_at
                                           LIMIT 256
                                             FOR UPDATE SKIP LOCKED) oldest
                            LIMIT s.share) t) t) p
), fill AS (
    SELECT name, execution_id, tenant_id, agent_id
      FROM (SELECT name, execution_id, tenant_id, agent_id FROM queue_tasks
             WHERE kind = 'run' AND lease_expires_at IS NULL AND available_at <= now()
             ORDER BY available_at
             LIMIT 256
               FOR UPDATE SKIP LOCKED) oldest
     WHERE name <> ALL (ARRAY(SELECT name FROM fair))  -- a task of ours is not skipped
     LIMIT greatest(%(limit)s - (SELECT count(*) FROM fair), 0)
), leftover AS (
    SELECT name, execution_id, tenant_id, agent_id
      FROM (SELECT name, execution_id, tenant_id, agent_id FROM queue_tasks
             WHERE kind = 'run' AND lease_expires_at < now()
             ORDER BY lease_expires_at
             LIMIT 256
               FOR UPDATE SKIP LOCKED) oldest
     LIMIT %(limit)s
), picked AS (
    SELECT name, execution_id, tenant_id, agent_id, ord FROM fair
    UNION ALL
    SELECT name, execution_id, tenant_id, agent_id, 1000 + row_number() OVER () FROM fill
    UNION ALL
    SELECT name, execution_id, tenant_id, agent_id, 2000 + row_number() OVER () FROM leftover
     ORDER BY ord
     LIMIT %(limit)s
), candidate AS (
    SELECT p.name, p.execution_id, p.tenant_id, p.ord, a.id AS agent_found,
           a.instructions, a.tools, a.auto_approve, a.model, a.timeout_minutes,
           a.max_tool_calls, a.token_budget, a.max_concurrent_runs
      FROM picked p
      LEFT JOIN LATERAL (SELECT id, instructions, tools, auto_approve, model, timeout_minutes,
                                max_tool_calls, token_budget, max_concurrent_runs
                           FROM agents
                          WHERE id = p.agent_id
                          LIMIT 1) a ON true  -- LIMIT: looked up by id, never hashed from a scan
), capped AS (  -- the candidates a cap applies to, in the order they would start
    SELECT execution_id, tenant_id, agent_found, max_concurrent_runs, ord FROM candidate
     WHERE %(tenant_cap)s::integer > 0 OR max_concurrent_runs IS NOT NULL
), allowed AS (
    SELECT execution_id FROM candidate
     WHERE %(tenant_cap)s::integer <= 0 AND max_concurrent_runs IS NULL
    UNION ALL
    SELECT fits FROM runs_within_caps(
        ARRAY(SELECT execution_id FROM capped ORDER BY ord),
        ARRAY(SELECT tenant_id FROM capped ORDER BY ord),
        ARRAY(SELECT agent_found FROM capped ORDER BY ord),
        ARRAY(SELECT max_concurrent_runs FROM capped ORDER BY ord),
        %(tenant_cap)s::integer) AS fits
), claimed AS (
    INSERT INTO execution_claims (execution_id, worker_id, claim_id)
    SELECT execution_id, %(worker_id)s, %(claim_id)s FROM allowed
    ON CONFLICT (execution_id) DO NOTHING
    RETURNING execution_id
), started AS (
    UPDATE executions e
       SET status = 'running', started_at = now(), run_token = gen_random_uuid(),
           timeout_minutes = coalesce(c.timeout_minutes, e.timeout_minutes),
           deadline = now() + make_interval(mins => coalesce(c.timeout_minutes,
                                                              e.timeout_minutes))
      FROM claimed cl JOIN candidate c ON c.execution_id = cl.execution_id
     WHERE e.id = cl.execution_id AND e.id = c.execution_id AND e.status = 'queued'
    RETURNING e.id, e.tenant_id, e.agent_id, e.schedule_id, e.attempt, e.timeout_minutes,
              e.input, e.run_token, e.cancel_requested_at, e.trigger_type, e.trigger_source
), journaled AS (
    INSERT INTO run_events (execution_id, seq, parent_seq, type, payload)
    SELECT id, 1, NULL, 'run_start',
           jsonb_build_object('attempt', attempt, 'trigger_type', trigger_type,
                              'trigger_source', trigger_source, 'worker_id', %(worker_id)s::text)
      FROM started
), dropped AS (  -- a task held back by a cap stays queued
    DELETE FROM queue_tasks
     WHERE name = ANY (ARRAY(SELECT c.name FROM candidate c
                              WHERE c.execution_id IN (SELECT execution_id FROM allowed)))
)
SELECT s.id, s.tenant_id, s.agent_id, s.schedule_id, s.attempt, s.timeout_minutes, s.input,
       s.run_token, s.cancel_requested_at, NULL::bigint AS last_seq,
       c.agent_found, c.instructions AS agent_instructions, c.tools AS agent_tools,
       c.auto_approve AS agent_auto_approve, c.model AS agent_model,
       c.max_tool_calls AS agent_max_tool_calls, c.token_budget AS agent_token_budget
  FROM started s
  JOIN candidate c ON c.execution_id = s.id
 ORDER BY c.ord;

-- name: end_backend_of_lost_claim
-- Before a lost claim is asked about (worker/claim.py runs_of_lost_claim): end the backend it
-- was sent to if it is still there (a network cut; after a restart it is gone) and wait up to
-- %(wait_ms)s ms for it to end, so the claim has committed or rolled back before the question.
-- A pid may be given again after a restart, so the backend must also be one of this role whose
-- last statement is a claim (its text begins with %(claim_prefix)s): ending another worker's
-- claim by mistake costs that worker one claim, never a run. Ending a backend of one's own
-- role needs no privilege. No row: it had already ended.
SELECT pg_terminate_backend(pid, %(wait_ms)s) AS ended
  FROM pg_stat_activity
 WHERE pid = %(pid)s AND pid <> pg_backend_pid() AND backend_type = 'client backend'
   AND usename = current_user AND starts_with(query, %(claim_prefix)s);

-- name: get_runs_of_lost_claim
-- The runs a claim started whose answer never reached its worker (worker/claim_once_more.py):
-- still running (the sweep has not judged them), with what claim_queued_executions returns for
-- each, so the worker takes them over as if the answer had come. No row: the claim did not
-- commit (its connection died before the commit), and its tasks are still queued.
SELECT e.id, e.tenant_id, e.agent_id, e.schedule_id, e.attempt, e.timeout_minutes, e.input,
       e.run_token, e.cancel_requested_at, NULL::bigint AS last_seq,
       a.id AS agent_found, a.instructions AS agent_instructions,
       a.tools AS agent_tools, a.auto_approve AS agent_auto_approve, a.model AS agent_model,
       a.max_tool_calls AS agent_max_tool_calls, a.token_budget AS agent_token_budget
  FROM execution_claims c
  JOIN executions e ON e.id = c.execution_id
  LEFT JOIN LATERAL (SELECT id, instructions, tools, auto_approve, model, max_tool_calls,
                            token_budget FROM agents
                      WHERE id = e.agent_id
                      LIMIT 1) a ON true
 WHERE c.claim_id = %(claim_id)s AND c.worker_id = %(worker_id)s AND e.status = 'running';

-- name: claim_resumed_execution
-- Take a suspended run back to running with a fresh deadline and run token, and drop the
-- resume task; a second delivery of the same resume finds nothing suspended and does nothing.
-- The saved state is consumed (deleted) by the claim that takes it: it holds the pending
-- call's real arguments, which must not stay at rest once the call is decided. The run's claim
-- row names the worker that holds it now, for the sweep's question whether that worker is still
-- there (sql/presence.py).
WITH resumed AS (
    UPDATE executions e
       SET status = 'running', breadcrumb = NULL, run_token = %(run_token)s,
           deadline = now() + make_interval(mins => e.timeout_minutes)
     WHERE e.id = %(execution_id)s AND e.status = 'completed' AND e.breadcrumb = 'suspended'
    RETURNING e.*
), held_by AS (
    UPDATE execution_claims c SET worker_id = %(worker_id)s
      FROM resumed r
     WHERE c.execution_id = r.id
), dropped AS (
    DELETE FROM queue_tasks WHERE name = %(task_name)s
), consumed AS (
    DELETE FROM run_states s USING resumed r WHERE s.execution_id = r.id
    RETURNING s.state
)
SELECT resumed.*,
       (SELECT max(seq) FROM run_events r WHERE r.execution_id = %(execution_id)s) AS last_seq,
       (SELECT state FROM consumed) AS state,
       a.status AS approval_status, a.reason AS approval_reason
  FROM resumed
  LEFT JOIN approvals a ON a.id = %(task_name)s;

-- name: lock_running_execution
-- Taken by a suspension's transaction before it saves state (see insert_run_events).
SELECT id FROM executions
 WHERE id = %(execution_id)s AND status = 'running' AND run_token = %(run_token)s
   FOR SHARE;

-- name: lock_execution_if_timed_out
-- The worker's own deadline: the same verdict the sweep gives, for one execution.
SELECT id, attempt, max_attempts FROM executions
 WHERE id = %(execution_id)s AND status = 'running' AND deadline <= now()
   FOR UPDATE SKIP LOCKED;

-- name: lock_running_execution_for_release
-- A worker shutting down takes its own unfinished run (still running, still its token) under
-- the same row lock the sweep takes, so a release and a sweep verdict never both land.
SELECT id, attempt, max_attempts FROM executions
 WHERE id = %(execution_id)s AND status = 'running' AND run_token = %(run_token)s
   FOR UPDATE;

-- name: lock_approved_call_shared
-- A resumed run's approved call about to run (worker/cancel_fence.py): a session lock, shared,
-- held on a connection of its own until the call has ended (closing it lets go). A person's
-- cancel takes the same key exclusively (lock_approved_call_for_cancel), so a cancel never
-- commits while the call is running: it commits before (the call then never runs) or after it.
SELECT pg_advisory_lock_shared(
           hashtextextended('tickwork approved call ' || %(execution_id)s::text, 0));

-- name: get_execution_cancel_requested
-- Whether a person asked to stop this run, read afresh: after lock_approved_call_shared was
-- granted, in a statement of its own (its snapshot is taken after any cancel that held the lock
-- has committed), and while run_python's code runs (it makes no journal append that would
-- learn it).
SELECT cancel_requested_at IS NOT NULL OR status = 'cancelled' AS cancelled
  FROM executions WHERE id = %(execution_id)s;

-- name: lock_approved_call_for_cancel
-- A cancel's transaction, before it changes the run: waits while an approved call of the run
-- is running (lock_approved_call_shared); released at the transaction's end.
SELECT pg_advisory_xact_lock(hashtextextended('tickwork approved call ' || %(id)s::text, 0));

-- name: update_execution_suspended
-- In one transaction: save the run's state, create the approval (once), journal
-- approval_required (already appended by the caller in this transaction), and end the
-- execution as completed with the breadcrumb 'suspended' — no terminal event, no outcome.
WITH saved AS (
    INSERT INTO run_states (execution_id, version, state)
    VALUES (%(execution_id)s, %(version)s, %(state)s)
    ON CONFLICT (execution_id) DO UPDATE
       SET version = EXCLUDED.version, state = EXCLUDED.state, saved_at = now()
), approval AS (
    INSERT INTO approvals (id, tenant_id, execution_id, tool_call_id, tool, arguments)
    SELECT %(approval_id)s, e.tenant_id, e.id, %(tool_call_id)s, %(tool)s, %(arguments)s
      FROM executions e WHERE e.id = %(execution_id)s
    ON CONFLICT (id) DO NOTHING
)
UPDATE executions
   SET status = 'completed', breadcrumb = 'suspended', outcome = NULL, run_token = NULL,
       usage = coalesce(%(usage)s::jsonb, usage)  -- the total so far; NULL leaves it
 WHERE id = %(execution_id)s AND status = 'running' AND run_token = %(run_token)s
RETURNING id;

-- name: update_execution_parked
-- A run whose model is down waits it out without a worker (worker/outage.py), in one
-- transaction with its provider_wait event (appended by the caller): its state is saved, with
-- what was left of its deadline (deadline_left_seconds, read back by claim_unparked_execution:
-- the deadline does not run while it is parked); it stays running with the breadcrumb 'parked',
-- no run token and no deadline (the sweep judges only running runs past a deadline); and its
-- unpark task is queued for %(wait_seconds)s from now, or at once when a person has asked the
-- run to stop (taken back, its router ends it cancelled; a cancel that comes after the park
-- ends the parked run itself, update_execution_cancelled). No row: the run was no longer this
-- worker's.
WITH target AS (
    SELECT id, deadline, cancel_requested_at FROM executions
     WHERE id = %(execution_id)s AND status = 'running' AND run_token = %(run_token)s
       FOR UPDATE
), saved AS (
    INSERT INTO run_states (execution_id, version, state)
    SELECT t.id, %(version)s, %(state)s::jsonb || jsonb_build_object('deadline_left_seconds',
           greatest(extract(epoch FROM t.deadline - now()), 0))
      FROM target t
    ON CONFLICT (execution_id) DO UPDATE
       SET version = EXCLUDED.version, state = EXCLUDED.state, saved_at = now()
), queued AS (
    INSERT INTO queue_tasks (name, kind, execution_id, available_at)
    SELECT 'unpark:' || t.id, 'unpark', t.id,
           CASE WHEN t.cancel_requested_at IS NULL
                THEN now() + make_interval(secs => %(wait_seconds)s) ELSE now() END
      FROM target t
    ON CONFLICT (name) DO UPDATE
       SET available_at = EXCLUDED.available_at, lease_expires_at = NULL
), parked AS (
    UPDATE executions e
       SET breadcrumb = 'parked', run_token = NULL, deadline = NULL,
           usage = coalesce(%(usage)s::jsonb, e.usage)  -- the total so far; NULL leaves it
      FROM target t
     WHERE e.id = t.id
    RETURNING e.id
), tails_woken AS (
    SELECT pg_notify('tickwork_events', id::text) FROM parked
)
SELECT id, (SELECT count(*) FROM tails_woken) AS tails_woken FROM parked;

-- name: claim_unparked_execution
-- Take a parked run back to running once its wait is over: a fresh run token, the deadline it
-- had left when it parked, its saved state (consumed), and the unpark task dropped; the run's
-- claim row names the worker that holds it now (sql/presence.py). A second delivery of the
-- same task finds nothing parked and does nothing.
WITH unparked AS (
    UPDATE executions e
       SET breadcrumb = NULL, run_token = %(run_token)s,
           deadline = now() + make_interval(secs => coalesce(
               (SELECT (s.state ->> 'deadline_left_seconds')::float8
                  FROM run_states s WHERE s.execution_id = e.id),
               e.timeout_minutes * 60))
     WHERE e.id = %(execution_id)s AND e.status = 'running' AND e.breadcrumb = 'parked'
    RETURNING e.*
), held_by AS (
    UPDATE execution_claims c SET worker_id = %(worker_id)s
      FROM unparked u
     WHERE c.execution_id = u.id
), dropped AS (
    DELETE FROM queue_tasks WHERE name = %(task_name)s
), consumed AS (
    DELETE FROM run_states s USING unparked u WHERE s.execution_id = u.id
    RETURNING s.state
)
SELECT unparked.*, extract(epoch FROM unparked.deadline - now())::float8 AS time_left,
       (SELECT max(seq) FROM run_events r WHERE r.execution_id = %(execution_id)s) AS last_seq,
       (SELECT state FROM consumed) AS state
  FROM unparked;

-- name: update_resumed_execution_released
-- A run resumed after a person's decision, released at shutdown: it goes back to its pause
-- (completed, breadcrumb 'suspended', no token) with the state its resume consumed put back
-- (the decided call pending in it), the approval keeps its decision, and the resume task
-- (named by the approval id) is queued again at once for any worker. The tool-call store
-- replays the approved call if it already ran, so it never runs twice. No new execution: the
-- decision belongs to this one.
WITH released AS (
    UPDATE executions
       SET status = 'completed', breadcrumb = 'suspended', run_token = NULL
     WHERE id = %(execution_id)s AND status = 'running' AND run_token = %(run_token)s
    RETURNING id
), restored AS (
    INSERT INTO run_states (execution_id, version, state)
    SELECT id, %(version)s, %(state)s FROM released
    ON CONFLICT (execution_id) DO UPDATE
       SET version = EXCLUDED.version, state = EXCLUDED.state, saved_at = now()
    RETURNING 1
), queued AS (
    INSERT INTO queue_tasks (name, kind, execution_id)
    SELECT %(approval_id)s, 'resume', id FROM released
    ON CONFLICT (name) DO NOTHING
    RETURNING 1
), notified AS (
    SELECT pg_notify('tickwork_tasks', 'resume') FROM queued
), tails_woken AS (
    SELECT pg_notify('tickwork_events', id::text) FROM released
)
SELECT id, (SELECT count(*) FROM restored) AS restored, (SELECT count(*) FROM queued) AS queued,
       (SELECT count(*) FROM notified) AS notified,
       (SELECT count(*) FROM tails_woken) AS tails_woken
  FROM released;

-- name: update_execution_cancelled
-- A queued run is cancelled at once (its task removed); a running one is asked to stop; a run
-- waiting for approval (completed + breadcrumb 'suspended', which the terminal-state trigger
-- lets change) is cancelled at once: a terminal run_complete is journaled so tails close, its
-- pending approvals become 'cancelled', its saved state is deleted, and its resume task, if a
-- decision already queued one, is removed (a resume that slips past finds nothing suspended
-- and does nothing). A run parked through a model outage (running + breadcrumb 'parked', held
-- by no worker) is cancelled at once the same way, its unpark task and saved state removed.
WITH target AS (
    SELECT id, status, breadcrumb = 'suspended' AND status = 'completed' AS suspended,
           breadcrumb IS NOT DISTINCT FROM 'parked' AND status = 'running' AS parked
      FROM executions
     WHERE id = %(id)s AND tenant_id = %(tenant_id)s
       FOR UPDATE
), cancelled AS (
    UPDATE executions e
       SET status = CASE WHEN t.status = 'running' AND NOT t.parked THEN e.status
                         ELSE 'cancelled' END,
           outcome = CASE WHEN t.status = 'running' AND NOT t.parked THEN e.outcome
                          ELSE 'cancelled' END,
           reason = CASE WHEN t.status = 'queued' THEN 'cancelled before it started'
                         WHEN t.suspended THEN 'cancelled while waiting for approval'
                         WHEN t.parked THEN 'cancelled while waiting out a model outage'
                         ELSE e.reason END,
           breadcrumb = CASE WHEN t.suspended OR t.parked THEN NULL ELSE e.breadcrumb END,
           finished_at = CASE WHEN t.status = 'running' AND NOT t.parked THEN e.finished_at
                              ELSE now() END,
           cancel_requested_at = coalesce(e.cancel_requested_at, now())
      FROM target t
     WHERE e.id = t.id AND (t.status IN ('queued', 'running') OR t.suspended)
    RETURNING e.*, t.suspended AS was_suspended, t.parked AS was_parked
), journaled AS (  -- the API cannot write the journal: the narrow function of migration 0029
    SELECT journal_run_complete(c.id,
           jsonb_build_object('status', 'cancelled', 'outcome', 'cancelled', 'by', 'person',
                              'reason', c.reason, 'usage', c.usage)) AS added
      FROM cancelled c
     WHERE c.was_suspended OR c.was_parked
), approvals_cancelled AS (
    UPDATE approvals a
       SET status = 'cancelled', reason = 'the run was cancelled', decided_at = now()
      FROM cancelled c
     WHERE a.execution_id = c.id AND c.was_suspended AND a.status = 'pending'
    RETURNING 1
), dropped AS (
    DELETE FROM queue_tasks q USING cancelled c
     WHERE q.execution_id = c.id AND c.status = 'cancelled'
), state_dropped AS (  -- the saved state holds the waiting call's real arguments: never run now
    DELETE FROM run_states s USING cancelled c
     WHERE s.execution_id = c.id AND (c.was_suspended OR c.was_parked)
), tails_woken AS (
    SELECT pg_notify('tickwork_events', id::text) FROM cancelled
)
SELECT cancelled.*, (SELECT count(*) FROM tails_woken) AS tails_woken,
       (SELECT coalesce(sum(added), 0) FROM journaled) AS journaled,
       (SELECT count(*) FROM approvals_cancelled) AS approvals_cancelled
  FROM cancelled;

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

-- name: update_timed_out_executions_failed
-- Fail the locked executions and mint their retries through the one minting statement,
-- fail_and_retry_executions (migration 0041): it re-checks each run (still running and past its
-- deadline, or, for a release, still holding the caller's run token), journals the end, queues
-- the retries and wakes workers, so no role needs INSERT on executions to mint a retry. The
-- sweep's injected clock (or NULL, the database clock) decides the deadline and finished_at.
SELECT failed_id, retry_id
  FROM fail_and_retry_executions(%(ids)s::uuid[], %(released)s, %(run_token)s::uuid,
                                 %(now)s::timestamptz);

-- name: update_waiting_executions_expired
-- The sweep's expiry (scheduler/expiry.py): one batch of runs whose approval waited past the
-- TTL ended cancelled with reason 'expired', journaled, their approvals 'expired', through the
-- narrow function of migration 0075 (SKIP LOCKED; the sweep's injected clock or NULL).
SELECT expire_waiting_runs(%(ttl_hours)s::integer, %(limit)s::integer,
                           %(now)s::timestamptz) AS count;

-- name: update_own_executions_failed
-- A worker's door to the same statement (its own deadline, a release): no date, the database
-- clock decides the deadline (0041).
SELECT failed_id, retry_id
  FROM fail_and_retry_executions(%(ids)s::uuid[], %(released)s, %(run_token)s::uuid);

-- name: count_executions_by_state
-- Every execution by status (as shown: 'waiting' for a run waiting for a person) and outcome
-- (retention bounds the table; a handful of groups).
SELECT CASE WHEN status = 'completed' AND breadcrumb IS NOT DISTINCT FROM 'suspended'
            THEN 'waiting' ELSE status END AS status,
       coalesce(outcome, 'none') AS outcome, count(*) AS count
  FROM executions
 GROUP BY 1, 2
 ORDER BY 1, 2;

-- name: count_executions_per_minute
-- Runs created in each minute from %(since)s on, counted by how they ended: the outcome once
-- there is one, else `waiting` (an approval is pending) or the status (queued, running).
-- The id bound lets the (tenant_id, id) index range-scan an hour instead of the tenant's whole
-- history (ids are UUIDv7: their first 48 bits are the creating process's clock in ms); it
-- starts 10 minutes early so an API host whose clock runs behind the database's loses nothing,
-- and created_at (the database's clock) decides.
SELECT date_trunc('minute', created_at) AS minute,
       coalesce(outcome, CASE WHEN breadcrumb = 'suspended' THEN 'waiting' ELSE status END)
           AS outcome,
       count(*) AS runs
  FROM executions
 WHERE tenant_id = %(tenant_id)s
   AND id >= (SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-0000-0000-000000000000')::uuid
                FROM (SELECT lpad(to_hex((extract(epoch FROM %(since)s::timestamptz
                                                  - interval '10 minutes') * 1000)::bigint),
                                  12, '0') AS h) AS bound)
   AND created_at >= %(since)s::timestamptz
 GROUP BY 1, 2
 ORDER BY 1, 2;

-- name: delete_finished_executions
-- Retention: one batch of finished runs past the horizon, oldest first by index, with what
-- hangs off them (retention_delete_runs, migration 0037). Returns how many went.
SELECT retention_delete_runs(coalesce(%(now)s::timestamptz, now()) - make_interval(days => %(days)s),
                             %(limit)s) AS deleted;

-- name: list_earlier_attempts
-- The attempts a retry replaces, oldest first: the chain of retry_of links up from this run
-- (a chain is a handful of rows: each retry has one retry_of, unique). The first is the
-- chain's root, whose id keys the chain's tool-call store and its vendors' idempotency keys.
WITH RECURSIVE chain AS (
    SELECT retry_of AS id, 1 AS depth FROM executions WHERE id = %(execution_id)s
    UNION ALL
    SELECT e.retry_of, c.depth + 1
      FROM chain c JOIN executions e ON e.id = c.id
     WHERE e.retry_of IS NOT NULL AND c.depth < 1000
)
SELECT e.id, e.attempt
  FROM chain c JOIN executions e ON e.id = c.id
 ORDER BY e.attempt, e.created_at;
