-- name: insert_agent
-- A tenant's new agent, returned whole.
INSERT INTO agents (id, tenant_id, name, instructions, tools, auto_approve, status, model,
                    timeout_minutes, max_tool_calls, token_budget, max_concurrent_runs)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(instructions)s, %(tools)s, %(auto_approve)s, %(status)s,
        %(model)s, %(timeout_minutes)s, %(max_tool_calls)s, %(token_budget)s,
        %(max_concurrent_runs)s)
RETURNING *;

-- name: update_agent
-- Replace an agent's fields (PUT; a setting left out returns to the deployment's default); no
-- row back means no such agent of this tenant.
UPDATE agents
   SET name = %(name)s, instructions = %(instructions)s, tools = %(tools)s,
       auto_approve = %(auto_approve)s, status = %(status)s, model = %(model)s,
       timeout_minutes = %(timeout_minutes)s, max_tool_calls = %(max_tool_calls)s,
       token_budget = %(token_budget)s, max_concurrent_runs = %(max_concurrent_runs)s,
       updated_at = now()
 WHERE id = %(id)s AND tenant_id = %(tenant_id)s
RETURNING *;

-- name: get_agent
-- One agent of the tenant (another tenant's is not found).
SELECT * FROM agents WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: list_agents
-- A tenant's agents newest first (ids are UUIDv7), optionally by name, a page before the cursor.
SELECT * FROM agents
 WHERE tenant_id = %(tenant_id)s
   AND (%(name)s::text IS NULL OR name = %(name)s::text)
   AND (%(cursor)s::uuid IS NULL OR id < %(cursor)s::uuid)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: delete_agent
-- Its schedules go with it (ON DELETE CASCADE); its past runs stay as history.
DELETE FROM agents WHERE id = %(id)s AND tenant_id = %(tenant_id)s RETURNING id;

-- name: get_agent_for_run
-- What the worker needs of a run's agent; no tenant filter: the run already names it, and no row
-- means the agent was deleted.
SELECT id, name, instructions, tools, auto_approve, status, model, max_tool_calls, token_budget
  FROM agents WHERE id = %(agent_id)s;
