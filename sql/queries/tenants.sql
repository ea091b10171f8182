-- name: upsert_tenant
INSERT INTO tenants (id, name) VALUES (%(id)s, %(name)s)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
RETURNING id, name;

-- name: insert_api_token
INSERT INTO api_tokens (id, tenant_id, token_hash, is_admin)
VALUES (%(id)s, %(tenant_id)s, %(token_hash)s, %(is_admin)s);

-- name: find_api_token
SELECT t.id, t.tenant_id, t.token_hash, t.is_admin
  FROM api_tokens t
 WHERE t.token_hash = %(token_hash)s AND t.revoked_at IS NULL;
