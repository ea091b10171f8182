-- Fair claims between tenants, and per-agent settings (DESIGN.md, third round).
--
-- Agents carry their own limits, each NULL meaning "the deployment's default" (the worker's
-- TICKWORK_* settings): model (an alias of TICKWORK_MODELS), timeout_minutes (the timeout of
-- each of its runs, set at the claim), max_tool_calls (the hard cap of external tool calls),
-- token_budget (tokens one run may spend) and max_concurrent_runs (its runs running at once,
-- held at the claim).
ALTER TABLE agents
    ADD COLUMN model text,
    ADD COLUMN timeout_minutes integer,
    ADD COLUMN max_tool_calls integer,
    ADD COLUMN token_budget bigint,
    ADD COLUMN max_concurrent_runs integer,
    ADD CONSTRAINT agents_model_check CHECK (model ~ '^[A-Za-z0-9_.-]{1,64}$'),
    ADD CONSTRAINT agents_timeout_minutes_check CHECK (timeout_minutes BETWEEN 1 AND 15),
    ADD CONSTRAINT agents_max_tool_calls_check CHECK (max_tool_calls BETWEEN 1 AND 100000),
    ADD CONSTRAINT agents_token_budget_check CHECK (token_budget BETWEEN 1 AND 1000000000000),
    ADD CONSTRAINT agents_max_concurrent_runs_check CHECK (max_concurrent_runs BETWEEN 1 AND 100000);

-- A run task knows its tenant (and agent), so the claim can take the oldest task of each tenant with work
-- (round-robin) by index instead of the oldest tasks of the whole queue (first in, first out:
-- one tenant's backlog of thousands held every other tenant's run behind it). Filled from the
-- task's execution by a trigger, so that every statement that queues a task (the run starts
-- of 0060/0061, the retries of fail_and_retry_executions, the tick's fires, a released resume)
-- fills it without being rewritten. A task whose execution cannot be found keeps NULL and is
-- still claimed, first in, first out, by the claim's fill. The agent is kept beside it so the
-- claim learns each candidate's agent (and its cap) without reading its execution first.
ALTER TABLE queue_tasks ADD COLUMN tenant_id uuid, ADD COLUMN agent_id uuid;
UPDATE queue_tasks q SET tenant_id = e.tenant_id, agent_id = e.agent_id
  FROM executions e WHERE e.id = q.execution_id;

-- SECURITY DEFINER: the owner is not walled by row-level security (0031), so the tenant is
-- found whichever role queues the task; it reads one row by its key and writes only NEW.
CREATE FUNCTION queue_tasks_fill_tenant() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF NEW.tenant_id IS NULL THEN
        SELECT e.tenant_id, e.agent_id INTO NEW.tenant_id, NEW.agent_id
          FROM executions e WHERE e.id = NEW.execution_id;
    END IF;
    RETURN NEW;
END;
$$;
REVOKE ALL ON FUNCTION queue_tasks_fill_tenant() FROM PUBLIC;

CREATE TRIGGER queue_tasks_fill_tenant BEFORE INSERT ON queue_tasks
    FOR EACH ROW EXECUTE FUNCTION queue_tasks_fill_tenant();

-- The tenants and agents with ready run tasks (a skip scan walks it one agent at a time) and
-- each one's oldest tasks.
CREATE INDEX queue_tasks_tenant_ready_idx ON queue_tasks (tenant_id, agent_id, available_at)
    WHERE kind = 'run' AND lease_expires_at IS NULL AND tenant_id IS NOT NULL
      AND agent_id IS NOT NULL;

-- The runs running now per tenant and agent, counted at the claim when a cap applies (a
-- handful of rows per tenant: only running runs are in it). `started_at IS NOT NULL` (every
-- running run was started by a claim) keeps it to the counts that say so: a lookup of one
-- running run by its id must not see it as a cheap way in (0043 says why).
CREATE INDEX executions_running_by_owner_idx ON executions (tenant_id, agent_id)
    WHERE status = 'running' AND started_at IS NOT NULL;

-- runs_within_caps: which of a claim's candidate runs may start without taking a tenant past
-- tenant_cap (0: no cap) or an agent past its max_concurrent_runs. The candidates come in the
-- order the claim would start them (ids, with their tenants, agents and agents' caps, as
-- parallel arrays); the first ones that fit are kept.
--
-- Why a function: the claim is one statement, and a statement sees the database as of its
-- start, so two workers claiming at once would each count the other's new runs as not running
-- and both start up to the cap. Here each tenant's claims are serialized by a transaction
-- advisory lock (taken in key order, so two claims never wait on each other in a cycle), and
-- the count that follows is a new query of a VOLATILE function, which sees every claim
-- committed before the lock was granted. The lock is held to the claim's commit. Only claims
-- with a cap in play come here (the claim passes no candidate otherwise), so uncapped claims
-- never wait on each other.
CREATE FUNCTION runs_within_caps(run_ids uuid[], run_tenants uuid[], run_agents uuid[],
                                 agent_caps integer[], tenant_cap integer)
RETURNS SETOF uuid
LANGUAGE plpgsql VOLATILE ROWS 16 AS $$
BEGIN
    IF cardinality(run_ids) = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(1953064812, k)  -- the presence lock's classid + 1
       FROM (SELECT DISTINCT hashtext(t::text) AS k FROM unnest(run_tenants) t ORDER BY 1) keys;
    RETURN QUERY
    WITH candidate AS (
        SELECT c.run_id, c.run_tenant, c.run_agent, c.agent_cap, c.ord
          FROM unnest(run_ids, run_tenants, run_agents, agent_caps) WITH ORDINALITY
               AS c(run_id, run_tenant, run_agent, agent_cap, ord)
    ), agent_running AS (
        SELECT e.agent_id, count(*) AS now_running
          FROM executions e
         WHERE e.status = 'running' AND e.started_at IS NOT NULL
           AND e.tenant_id = ANY (run_tenants)
           AND e.agent_id IN (SELECT run_agent FROM candidate WHERE agent_cap IS NOT NULL)
         GROUP BY e.agent_id
    ), tenant_running AS (
        SELECT e.tenant_id, count(*) AS now_running
          FROM executions e
         WHERE tenant_cap > 0 AND e.status = 'running' AND e.started_at IS NOT NULL
           AND e.tenant_id = ANY (run_tenants)
         GROUP BY e.tenant_id
    ), agent_fits AS (
        SELECT c.run_id, c.run_tenant, c.ord
          FROM (SELECT c.*, row_number() OVER (PARTITION BY c.run_agent ORDER BY c.ord) AS nth
                  FROM candidate c) c
          LEFT JOIN agent_running r ON r.agent_id = c.run_agent
         WHERE c.agent_cap IS NULL OR c.nth + coalesce(r.now_running, 0) <= c.agent_cap
    )
    SELECT f.run_id
      FROM (SELECT f.*, row_number() OVER (PARTITION BY f.run_tenant ORDER BY f.ord) AS nth
              FROM agent_fits f) f
      LEFT JOIN tenant_running r ON r.tenant_id = f.run_tenant
     WHERE tenant_cap <= 0 OR f.nth + coalesce(r.now_running, 0) <= tenant_cap
     ORDER BY f.ord;
END;
$$;
