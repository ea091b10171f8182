-- name: suspend_for_approval
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

-- name: list_approvals
SELECT id, execution_id, tool, arguments, status, reason, created_at, decided_at
  FROM approvals
 WHERE tenant_id = %(tenant_id)s
   AND (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(cursor)s::text IS NULL OR id > %(cursor)s::text)
 ORDER BY id
 LIMIT %(limit)s;

-- name: get_approval
SELECT id, execution_id, tool, arguments, status, reason, created_at, decided_at
  FROM approvals WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: decide_approval
-- One decision per approval: only a pending approval changes, and its resume task (named by
-- the approval id, so a second insert is a no-op) is queued in the same transaction.
WITH decided AS (
    UPDATE approvals
       SET status = %(status)s, reason = %(reason)s, decided_at = now()
     WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND status = 'pending'
    RETURNING id, execution_id, tool, arguments, status, reason, created_at, decided_at
), queued AS (
    INSERT INTO queue_tasks (name, kind, execution_id)
    SELECT id, 'resume', execution_id FROM decided
    ON CONFLICT (name) DO NOTHING
    RETURNING 1
), notified AS (
    SELECT pg_notify('tickwork_tasks', 'resume') FROM queued
)
SELECT decided.*, (SELECT count(*) FROM notified) AS notified FROM decided;

-- name: claim_resume
-- Take a suspended run back to running with a fresh deadline and run token, and drop the
-- resume task; a second delivery of the same resume finds nothing suspended and does nothing.
-- The saved state is consumed (deleted) by the claim that takes it: it holds the pending
-- call's real arguments, which must not stay at rest once the call is decided.
WITH resumed AS (
    UPDATE executions e
       SET status = 'running', breadcrumb = NULL, run_token = %(run_token)s,
           deadline = now() + make_interval(mins => e.timeout_minutes)
     WHERE e.id = %(execution_id)s AND e.status = 'completed' AND e.breadcrumb = 'suspended'
    RETURNING e.*
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

-- name: get_tool_call_result
SELECT result, ok FROM tool_call_results
 WHERE execution_id = %(execution_id)s AND tool_call_id = %(tool_call_id)s;

-- name: record_tool_call_result
INSERT INTO tool_call_results (execution_id, tool_call_id, result, ok)
VALUES (%(execution_id)s, %(tool_call_id)s, %(result)s, %(ok)s)
ON CONFLICT (execution_id, tool_call_id) DO NOTHING;

-- name: request_cancel
-- A queued run is cancelled at once (its task removed); a running one is asked to stop; a run
-- waiting for approval (completed + breadcrumb 'suspended', which the terminal-state trigger
-- lets change) is cancelled at once: a terminal run_complete is journaled so tails close, its
-- pending approvals become 'cancelled', its saved state is deleted, and its resume task, if a
-- decision already queued one, is removed (a resume that slips past finds nothing suspended
-- and does nothing).
WITH target AS (
    SELECT id, status, breadcrumb = 'suspended' AND status = 'completed' AS suspended
      FROM executions
     WHERE id = %(id)s AND tenant_id = %(tenant_id)s
       FOR UPDATE
), cancelled AS (
    UPDATE executions e
       SET status = CASE WHEN t.status = 'running' THEN e.status ELSE 'cancelled' END,
           outcome = CASE WHEN t.status = 'running' THEN e.outcome ELSE 'cancelled' END,
           reason = CASE WHEN t.status = 'queued' THEN 'cancelled before it started'
                         WHEN t.suspended THEN 'cancelled while waiting for approval'
                         ELSE e.reason END,
           breadcrumb = CASE WHEN t.suspended THEN NULL ELSE e.breadcrumb END,
           finished_at = CASE WHEN t.status = 'running' THEN e.finished_at ELSE now() END,
           cancel_requested_at = coalesce(e.cancel_requested_at, now())
      FROM target t
     WHERE e.id = t.id AND (t.status IN ('queued', 'running') OR t.suspended)
    RETURNING e.*, t.suspended AS was_suspended
), journaled AS (  -- the API cannot write the journal: the narrow function of migration 0029
    SELECT journal_run_complete(c.id,
           jsonb_build_object('status', 'cancelled', 'outcome', 'cancelled', 'by', 'person',
                              'reason', c.reason, 'usage', c.usage)) AS added
      FROM cancelled c
     WHERE c.was_suspended
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
     WHERE s.execution_id = c.id AND c.was_suspended
), tails_woken AS (
    SELECT pg_notify('tickwork_events', id::text) FROM cancelled
)
SELECT cancelled.*, (SELECT count(*) FROM tails_woken) AS tails_woken,
       (SELECT coalesce(sum(added), 0) FROM journaled) AS journaled,
       (SELECT count(*) FROM approvals_cancelled) AS approvals_cancelled
  FROM cancelled;
