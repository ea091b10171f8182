-- name: delete_finished_executions
-- Retention: remove a batch of finished executions older than the horizon, with their journal
-- rows (partitions of old months are dropped whole; this catches the default partition).
WITH doomed AS (
    SELECT id FROM executions
     WHERE status IN ('completed', 'failed', 'cancelled')
       AND (breadcrumb IS DISTINCT FROM 'suspended')
       AND finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(days => %(days)s)
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), events AS (
    DELETE FROM run_events r USING doomed d WHERE r.execution_id = d.id
), results AS (
    DELETE FROM tool_results t USING doomed d WHERE t.execution_id = d.id
)
DELETE FROM executions e USING doomed d WHERE e.id = d.id
RETURNING e.id;

-- name: delete_old_skipped_fires
DELETE FROM skipped_fires
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM skipped_fires
                          WHERE recorded_at < coalesce(%(now)s::timestamptz, now()) - make_interval(days => %(days)s)
                          LIMIT %(limit)s));

-- name: manage_journal_partitions
SELECT created, dropped
  FROM manage_journal_partitions(coalesce(%(now)s::timestamptz, now()), %(months_ahead)s,
                                 %(days)s);

-- name: retention_upkeep
-- The HTTP tick's retention (the API's role): everything above in one narrow function on the
-- database clock (migration 0029).
SELECT retention_upkeep(%(days)s, %(limit)s) AS deleted;
