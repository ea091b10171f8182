-- name: upsert_tenant
-- The tenant of this name, created if new (the no-op update makes RETURNING give the existing
-- row).
INSERT INTO tenants (id, name) VALUES (%(id)s, %(name)s)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
RETURNING id, name;
