-- name: insert_run_events
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

-- name: list_run_events
-- A run's journal after a sequence number, in order, one page (tails and replays).
SELECT seq, parent_seq, type, payload, ts FROM run_events
 WHERE execution_id = %(execution_id)s AND seq > %(after)s
 ORDER BY seq
 LIMIT %(limit)s;

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

-- name: update_journal_partitions
-- Create the coming months' journal partitions and drop those past retention, keeping a month
-- that still holds a run not finished (0028); a change that cannot get its lock within
-- lock_timeout is skipped this tick and named in `skipped` (0037).
SELECT created, dropped, skipped
  FROM manage_journal_partitions(coalesce(%(now)s::timestamptz, now()), %(months_ahead)s,
                                 %(days)s);
