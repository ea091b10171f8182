-- name: lock_running_execution_for_release
-- A worker shutting down takes its own unfinished run (still running, still its token) under
-- the same row lock the sweep takes, so a release and a sweep verdict never both land.
SELECT id, attempt, max_attempts FROM executions
 WHERE id = %(execution_id)s AND status = 'running' AND run_token = %(run_token)s
   FOR UPDATE;

-- name: release_resumed_run
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
