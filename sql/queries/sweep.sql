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
-- Fail the locked executions and mint their retries through the one minting statement,
-- fail_and_retry_executions (migration 0041): it re-checks each run (still running and past its
-- deadline, or, for a release, still holding the caller's run token), journals the end, queues
-- the retries and wakes workers, so no role needs INSERT on executions to mint a retry. The
-- sweep's injected clock (or NULL, the database clock) decides the deadline and finished_at.
SELECT failed_id, retry_id
  FROM fail_and_retry_executions(%(ids)s::uuid[], %(released)s, %(run_token)s::uuid,
                                 %(now)s::timestamptz);

-- name: fail_own_executions
-- A worker's door to the same statement (its own deadline, a release): no date, the database
-- clock decides the deadline (0041).
SELECT failed_id, retry_id
  FROM fail_and_retry_executions(%(ids)s::uuid[], %(released)s, %(run_token)s::uuid);
