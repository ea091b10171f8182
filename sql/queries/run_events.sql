-- name: insert_journal_batch
-- Many runs' journal appends, and the verdicts of those that end, in one statement and one
-- commit (sql/journal.py JournalWriter): thousands of runs in flight take a few commits.
-- Each run is fenced on its own, only while running and only with its token: FOR SHARE for an
-- append (it conflicts with the sweep's row lock, so an append lands before the sweep judges
-- the run, whose terminal event then follows it, or finds it no longer running and writes
-- nothing), FOR UPDATE for a run that ends, whose verdict is recorded with its last events.
-- The writer wakes the runs' tails once this has committed (sql/notify.py: a NOTIFY in this
-- transaction would hold the notify lock through its WAL flush). A row per run that was still
-- ours: finished says its verdict was recorded, and cancel_requested that a person asked it to
-- stop; a run missing from the answer was fenced.
-- ON CONFLICT DO NOTHING makes a retried batch idempotent: a run numbers its own events, so a
-- conflict can only be its earlier attempt whose commit acknowledgement was lost.
-- The batch is one jsonb array, one object per run with its events nested: one json.dumps
-- in the worker instead of typed arrays dumped element by element. Each run's row is locked
-- by its own lookup (a locking subquery is not flattened into a join), so executions is
-- reached by its primary key, never by a scan of every running run; rows lock in id order.
WITH runs AS (
    SELECT * FROM jsonb_to_recordset(%(runs)s::jsonb)
             AS r(id uuid, run_token uuid, finish boolean, status text, outcome text,
                  reason text, usage jsonb, answer text, events jsonb)
), ending AS (
    SELECT e.id
      FROM (SELECT id, run_token FROM runs WHERE finish ORDER BY id) r
     CROSS JOIN LATERAL (SELECT id FROM executions
                          WHERE id = r.id AND run_token = r.run_token AND status = 'running'
                            FOR UPDATE) e
), going AS (
    SELECT e.id, e.cancel_requested_at
      FROM (SELECT id, run_token FROM runs WHERE NOT finish ORDER BY id) r
     CROSS JOIN LATERAL (SELECT id, cancel_requested_at FROM executions
                          WHERE id = r.id AND run_token = r.run_token AND status = 'running'
                            FOR SHARE) e
), fence AS (
    SELECT id FROM ending UNION ALL SELECT id FROM going
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
           answer = r.answer,  -- the run's final answer, shown as a field (migration 0081)
           usage = coalesce(r.usage, e.usage)  -- a NULL usage leaves the column as it is
      FROM runs r
     WHERE e.id = r.id AND e.id = ANY (ARRAY(SELECT id FROM ending))  -- by primary key
    RETURNING e.id
)
-- The id comes back as text, the key the writer already holds (no uuid parsed per run).
SELECT g.id::text AS id, false AS finished, g.cancel_requested_at IS NOT NULL AS cancel_requested
  FROM going g
UNION ALL
SELECT f.id::text, true, false FROM finished f;

-- name: list_run_events
-- A run's journal after a sequence number, in order, one page (tails and replays).
SELECT seq, parent_seq, type, payload, ts FROM run_events
 WHERE execution_id = %(execution_id)s AND seq > %(after)s
 ORDER BY seq
 LIMIT %(limit)s;

-- name: list_run_events_of_runs
-- Several runs' journals, each after its own sequence number, in one statement (the tails'
-- hub reads every run a wake-up names at once): one page per run, by run then seq. Each run
-- is its own index range scan on (execution_id, seq).
SELECT r.execution_id, e.seq, e.parent_seq, e.type, e.payload, e.ts
  FROM unnest(%(execution_ids)s::uuid[], %(afters)s::integer[]) AS r(execution_id, after)
 CROSS JOIN LATERAL (SELECT seq, parent_seq, type, payload, ts FROM run_events
                      WHERE execution_id = r.execution_id AND seq > r.after
                      ORDER BY seq
                      LIMIT %(limit)s) e
 ORDER BY r.execution_id, e.seq;

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

-- name: get_run_event_type
-- The type of one event of a run's journal (a chat stream resumed at an event asks whether it
-- was the run's last: run_complete).
SELECT type FROM run_events WHERE execution_id = %(execution_id)s AND seq = %(seq)s;
