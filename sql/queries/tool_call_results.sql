-- name: get_tool_call_result
-- The stored result of a tool call this run already made: a resumed or retried step replays it
-- instead of calling the tool twice.
SELECT result, ok FROM tool_call_results
 WHERE execution_id = %(execution_id)s AND tool_call_id = %(tool_call_id)s;

-- name: insert_tool_call_result
-- Store a tool call's result once; a second store of the same call keeps the first.
INSERT INTO tool_call_results (execution_id, tool_call_id, result, ok)
VALUES (%(execution_id)s, %(tool_call_id)s, %(result)s, %(ok)s)
ON CONFLICT (execution_id, tool_call_id) DO NOTHING;

-- name: list_tool_call_results_of_chain
-- Every completed call a run chain stored, whichever attempt made it: a retry replays these
-- instead of calling the tools again.
SELECT tool_call_id, result, ok FROM tool_call_results
 WHERE execution_id = ANY (%(execution_ids)s::uuid[]);
