-- name: delete_finished_executions
-- Retention: one batch of finished runs past the horizon, oldest first by index, with what
-- hangs off them (retention_delete_runs, migration 0037). Returns how many went.
SELECT retention_delete_runs(coalesce(%(now)s::timestamptz, now()) - make_interval(days => %(days)s),
                             %(limit)s) AS deleted;

-- name: delete_old_skipped_fires
-- One batch, found through skipped_fires_recorded_idx.
DELETE FROM skipped_fires
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM skipped_fires
                          WHERE recorded_at < coalesce(%(now)s::timestamptz, now()) - make_interval(days => %(days)s)
                          LIMIT %(limit)s));

-- name: set_partition_lock_timeout
-- Partition DDL locks the whole journal; waiting for that lock would queue every append behind
-- it, so it waits this long at most (the rest of the transaction is the function call).
SELECT set_config('lock_timeout', %(lock_timeout)s, true);

-- name: manage_journal_partitions
SELECT created, dropped, skipped
  FROM manage_journal_partitions(coalesce(%(now)s::timestamptz, now()), %(months_ahead)s,
                                 %(days)s);

-- name: retention_upkeep
-- The HTTP tick's retention (the API's role): one batch of everything above in one narrow
-- function on the database clock (migrations 0029, 0037).
SELECT retention_upkeep(%(days)s, %(limit)s) AS deleted;
