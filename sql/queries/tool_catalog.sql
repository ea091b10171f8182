-- name: upsert_tool
-- Publish one tool of a worker's catalog, replacing what was published under the same key.
INSERT INTO tool_catalog (key, tool_class, is_local, description, parameters, published_at)
VALUES (%(key)s, %(tool_class)s, %(is_local)s, %(description)s, %(parameters)s, now())
ON CONFLICT (key) DO UPDATE
   SET tool_class = EXCLUDED.tool_class, is_local = EXCLUDED.is_local,
       description = EXCLUDED.description, parameters = EXCLUDED.parameters,
       published_at = EXCLUDED.published_at;

-- name: list_unknown_tools
-- Of the given tool keys, those the catalog does not hold, so an agent naming one is refused.
SELECT k.key FROM unnest(%(keys)s::text[]) AS k(key)
 WHERE NOT EXISTS (SELECT 1 FROM tool_catalog c WHERE c.key = k.key)
 ORDER BY k.key;

-- name: list_tools
-- The whole tool catalog by key (GET /v1/tools).
SELECT key, tool_class, is_local, description, parameters FROM tool_catalog ORDER BY key;
