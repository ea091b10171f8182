-- name: insert_tool_result
-- content arrives as JSON text (already rendered by the worker) and is cast here, so the
-- result is serialized once, not twice.
INSERT INTO tool_results (file_ref, execution_id, tool, content, chars)
VALUES (%(file_ref)s, %(execution_id)s, %(tool)s, %(content)s::jsonb, %(chars)s);

-- name: get_tool_result
-- Scoped to the execution: another run's file reference finds nothing.
SELECT file_ref, tool, content, chars
  FROM tool_results
 WHERE file_ref = %(file_ref)s AND execution_id = %(execution_id)s;
