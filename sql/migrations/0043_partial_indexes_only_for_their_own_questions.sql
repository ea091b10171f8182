-- Two partial indexes of executions, made so that only the queries they serve can use them.
--
-- With the predicates `status = 'running'` (the sweep's deadlines) and `status IN ('queued',
-- 'running')` (the tick's overlap check, by schedule), every lookup of one running run by its
-- id (the journal's fence, a suspension's and a release's lock) also matched them, and the
-- planner chose them whenever the statistics said few runs were running or queued: a scan of
-- every running run's entry to find one id, per run, so a worker with 5,000 runs in flight
-- paid 5,000 x 5,000 (EXPLAIN showed insert_journal_batch's and lock_running_execution's
-- lookups on these indexes; tests/integration/test_query_plans.py holds them to the key).
-- `deadline IS NOT NULL` is implied by the sweep's `deadline < ...` and `schedule_id IS NOT
-- NULL` by the overlap check's `schedule_id = ...` (strict comparisons), so those still use
-- their index; a lookup by id now has only the primary key to choose.
CREATE INDEX executions_running_deadline_only_idx ON executions (deadline)
    WHERE status = 'running' AND deadline IS NOT NULL;
DROP INDEX executions_running_deadline_idx;
ALTER INDEX executions_running_deadline_only_idx RENAME TO executions_running_deadline_idx;

CREATE INDEX executions_unfinished_only_idx ON executions (schedule_id)
    WHERE status IN ('queued', 'running') AND schedule_id IS NOT NULL;
DROP INDEX executions_unfinished_idx;
ALTER INDEX executions_unfinished_only_idx RENAME TO executions_unfinished_idx;
