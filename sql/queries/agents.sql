-- name: insert_agent
INSERT INTO agents (id, tenant_id, name, instructions, tools, auto_approve, status)
VALUES (%(id)s, %(tenant_id)s, %(name)s, %(instructions)s, %(tools)s, %(auto_approve)s, %(status)s)
RETURNING *;

-- name: update_agent
UPDATE agents
   SET name = %(name)s, instructions = %(instructions)s, tools = %(tools)s,
       auto_approve = %(auto_approve)s, status = %(status)s, updated_at = now()
 WHERE id = %(id)s AND tenant_id = %(tenant_id)s
RETURNING *;

-- name: get_agent
SELECT * FROM agents WHERE id = %(id)s AND tenant_id = %(tenant_id)s;

-- name: list_agents
SELECT * FROM agents
 WHERE tenant_id = %(tenant_id)s
   AND (%(name)s::text IS NULL OR name = %(name)s::text)
   AND (%(cursor)s::uuid IS NULL OR id < %(cursor)s::uuid)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: delete_agent
-- Its schedules go with it (ON DELETE CASCADE); its past runs stay as history.
DELETE FROM agents WHERE id = %(id)s AND tenant_id = %(tenant_id)s RETURNING id;
