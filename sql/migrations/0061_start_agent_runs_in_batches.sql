-- start_agent_runs: many keyless run starts of one tenant (POST /v1/agents/{id}/runs without an
-- Idempotency-Key) in one statement and one commit. The API gathers the starts that arrive
-- while its previous batch is being written (scheduler/run_batch.py): a burst of 16 or 64
-- clients paid one commit, one function call and one FOR SHARE of the agent per run; now per
-- batch. A start with an Idempotency-Key still goes alone through start_agent_run (0060).
--
-- Each element of `runs` is {"id", "agent_id", "timeout_minutes", "input"}, in the order the
-- requests came. It does per run what start_agent_run does for one: the tenant's agents held
-- FOR SHARE until commit (in id order: two batches never wait on each other in a cycle), the
-- execution and its queue task inserted unless the agent is paused. One row per element
-- (request_id is its id): agent_status NULL means no such agent of this tenant; the run is NULL
-- when nothing was queued (a paused agent). It notifies nobody (sql/notify.py says why).
--
-- SECURITY INVOKER, as 0060: the caller's privileges and row-level security apply.
CREATE FUNCTION start_agent_runs(run_tenant_id uuid, run_trigger_type text,
                                 run_trigger_source text, run_max_attempts integer, runs jsonb)
RETURNS TABLE (request_id uuid, agent_status text, run executions)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH wanted AS (
        SELECT w.id, w.agent_id, w.timeout_minutes, w.input
          FROM jsonb_to_recordset(runs)
               AS w(id uuid, agent_id uuid, timeout_minutes integer, input jsonb)
    ), agent AS (
        SELECT a.id, a.status FROM agents a
         WHERE a.id IN (SELECT agent_id FROM wanted) AND a.tenant_id = run_tenant_id
         ORDER BY a.id
           FOR SHARE
    ), inserted AS (
        INSERT INTO executions (id, tenant_id, agent_id, schedule_id, trigger_type,
                                trigger_source, scheduled_for, max_attempts, timeout_minutes,
                                input)
        SELECT w.id, run_tenant_id, agent.id, NULL, run_trigger_type, run_trigger_source,
               now(), run_max_attempts, w.timeout_minutes, w.input
          FROM wanted w JOIN agent ON agent.id = w.agent_id
         WHERE agent.status <> 'paused'
        RETURNING *
    ), tasks AS (
        INSERT INTO queue_tasks (name, kind, execution_id)
        SELECT i.id::text, 'run', i.id FROM inserted i
        ON CONFLICT (name) DO NOTHING
    )
    SELECT w.id, agent.status, i::executions
      FROM wanted w
      LEFT JOIN agent ON agent.id = w.agent_id
      LEFT JOIN inserted i ON i.id = w.id;
END;
$$;
