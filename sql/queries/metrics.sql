-- name: read_metric_gauges
-- The scalar gauges of one scrape, in one round trip; each subquery reads a partial index or a
-- bounded range.
--   queue_*: unleased tasks, from queue_tasks_ready_idx (a task leased by a worker is not
--     waiting); an available_at in the future is not "old", hence greatest(0, ...).
--   due_lag_max: how late the tick wrote the cron fires of the last 5 minutes. Ids are UUIDv7
--     (time-ordered), so the primary key reads only the newest rows: the floor is the id of a
--     moment 15 minutes ago, which leaves room for an app clock that lags the database's.
--     Retries are left out: they stand for an old fire on purpose.
--   oldest_transaction_age: client sessions of this database, this scrape excluded. A long
--     open transaction holds back vacuum of the queue and journal tables.
SELECT
    (SELECT count(*) FROM queue_tasks WHERE lease_expires_at IS NULL) AS queue_depth,
    (SELECT greatest(0, coalesce(extract(epoch FROM now() - min(available_at)), 0))
       FROM queue_tasks WHERE lease_expires_at IS NULL) AS queue_oldest_age_seconds,
    (SELECT count(*) FROM approvals WHERE status = 'pending') AS approvals_pending,
    (SELECT greatest(0, coalesce(max(extract(epoch FROM created_at - scheduled_for)), 0))
       FROM executions
      WHERE id >= (lpad(to_hex(floor(extract(epoch FROM now() - interval '15 minutes')
                                     * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid
        AND created_at >= now() - interval '5 minutes'
        AND trigger_source = 'cron'
        AND retry_of IS NULL) AS due_lag_max_seconds,
    (SELECT greatest(0, coalesce(extract(epoch FROM now() - min(xact_start)), 0))
       FROM pg_stat_activity
      WHERE datname = current_database()
        AND backend_type = 'client backend'
        AND pid <> pg_backend_pid()
        AND xact_start IS NOT NULL) AS oldest_transaction_age_seconds;

-- name: count_executions_by_state
-- Every execution by status and outcome (retention bounds the table; a handful of groups).
SELECT status, coalesce(outcome, 'none') AS outcome, count(*) AS count
  FROM executions
 GROUP BY status, outcome
 ORDER BY status, outcome;

-- name: count_recent_refusals_and_verdicts
-- Wall refusals by wall and gate decisions by verdict over the last hour, from the partial
-- index run_events_metrics_ts_idx. The values come from a closed set in the worker; the LIMIT
-- and left() bound what a scrape can return even if a payload were odd.
SELECT type,
       left(coalesce(CASE type WHEN 'budget_refusal' THEN payload->>'wall'
                               ELSE payload->>'verdict' END, 'unknown'), 64) AS label,
       count(*) AS count
  FROM run_events
 WHERE type IN ('budget_refusal', 'gate_decision')
   AND ts >= now() - interval '1 hour'
 GROUP BY 1, 2
 ORDER BY 1, 2
 LIMIT 200;
