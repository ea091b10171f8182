-- name: list_approvals
-- A tenant's approvals oldest first, optionally by status, a page after the cursor.
SELECT id, execution_id, tool, arguments, status, reason, created_at, decided_at
  FROM approvals
 WHERE tenant_id = %(tenant_id)s
   AND (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(cursor)s::text IS NULL OR id > %(cursor)s::text)
 ORDER BY id
 LIMIT %(limit)s;

-- name: get_approval
-- One approval of the tenant (another tenant's is not found).
SELECT id, execution_id, tool, arguments, status, reason, created_at, decided_at
  FROM approvals WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: update_approval_decided
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

-- name: update_waiting_approvals_reminded
-- The sweep's reminder (scheduler/expiry.py): one batch of pending approvals half their TTL
-- old marked reminded, each with one approval.reminder delivery per webhook that wants it,
-- through the narrow function of migration 0075 (SKIP LOCKED: two sweeps never remind twice).
SELECT remind_waiting_approvals(%(ttl_hours)s::integer, %(limit)s::integer,
                                %(now)s::timestamptz) AS count;
