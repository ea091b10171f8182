-- retention_delete_runs (0037) with the same rules and two costs taken out of every batch.
--
-- A batch of 1,000 one-turn runs deletes 2,000 rows in an old database (its journal months are
-- dropped whole) and 7,000 in one younger than a month (its journal is still in the default
-- partition, deleted row by row), so a young database's batch costs about twice an old one's.
-- A profile of the batch (perf on its backend) was index descents first: one per run into
-- each table's key, about a third of the batch's CPU. Two things are cut:
-- * The runs themselves are deleted where the batch found and locked them (their ctids)
--   instead of being looked up again by id: 1,000 descents fewer. A locked row cannot be
--   updated, deleted or moved by anyone else until this transaction ends, so its ctid still
--   names it (and should a place ever miss, the batch deletes the rest by id).
-- * The batch commits without waiting for its WAL to reach the disk (synchronous_commit off for
--   the batch's own transaction only): 3 of a batch's 18 ms with the disk idle, far more in a
--   slow-disk hour. A batch lost to a crash can only bring back rows already past the horizon,
--   which the next tick deletes again; nothing treats their absence as a promise. Retention
--   calls this function as a transaction of its own (the scheduler's batch query and the HTTP
--   tick's retention_upkeep), so no other write rides on that commit.
CREATE OR REPLACE FUNCTION retention_delete_runs(horizon timestamptz, batch_size integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    doomed uuid[];
    places tid[];
    waits text[];
    gone integer;
BEGIN
    SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.ctid), '{}')
      INTO doomed, places FROM (
        SELECT e.id, e.ctid FROM executions e
         WHERE e.finished_at < horizon
           AND e.status IN ('completed', 'failed', 'cancelled')
           AND e.breadcrumb IS DISTINCT FROM 'suspended'
         ORDER BY e.finished_at
         LIMIT least(greatest(batch_size, 1), 10000)
           FOR UPDATE SKIP LOCKED) d;
    IF cardinality(doomed) = 0 THEN
        RETURN 0;
    END IF;
    -- Local to the transaction: the next one on this connection is back to the session's.
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT coalesce(array_agg(a.id), '{}') INTO waits FROM approvals a
     WHERE a.execution_id = ANY (doomed);
    -- A run's task is named by its id, a resume's by its approval's id.
    DELETE FROM queue_tasks WHERE name = ANY (doomed::text[]) OR name = ANY (waits);
    DELETE FROM approvals WHERE execution_id = ANY (doomed);
    DELETE FROM run_states WHERE execution_id = ANY (doomed);
    DELETE FROM tool_call_results WHERE execution_id = ANY (doomed);
    DELETE FROM tool_results WHERE execution_id = ANY (doomed);
    DELETE FROM execution_claims WHERE execution_id = ANY (doomed);
    DELETE FROM run_events_default WHERE execution_id = ANY (doomed);
    DELETE FROM executions WHERE ctid = ANY (places);
    GET DIAGNOSTICS gone = ROW_COUNT;
    IF gone < cardinality(doomed) THEN
        -- Not expected (the locks hold every place); if a place ever named an older version of
        -- a run, the run is still deleted, by id, with the rest of its batch.
        DELETE FROM executions WHERE id = ANY (doomed);
    END IF;
    RETURN cardinality(doomed);
END;
$$;

REVOKE ALL ON FUNCTION retention_delete_runs(timestamptz, integer) FROM PUBLIC;
