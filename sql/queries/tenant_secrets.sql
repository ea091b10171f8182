-- name: upsert_tenant_secret
-- Set a tenant's secret (a new one, or a new value for the same name); the value is sealed by
-- the caller. At most %(max_per_tenant)s names per tenant: a new name past that inserts
-- nothing and the caller says why. Never returns the sealed value.
INSERT INTO tenant_secrets (tenant_id, name, sealed)
SELECT %(tenant_id)s, %(name)s, %(sealed)s
 WHERE EXISTS (SELECT 1 FROM tenant_secrets WHERE tenant_id = %(tenant_id)s AND name = %(name)s)
    OR (SELECT count(*) FROM tenant_secrets WHERE tenant_id = %(tenant_id)s) < %(max_per_tenant)s
ON CONFLICT (tenant_id, name) DO UPDATE SET sealed = EXCLUDED.sealed, updated_at = now()
RETURNING name, created_at, updated_at;

-- name: list_tenant_secrets
-- A tenant's secrets by name: names and dates only.
SELECT name, created_at, updated_at FROM tenant_secrets
 WHERE tenant_id = %(tenant_id)s
 ORDER BY name;

-- name: delete_tenant_secret
-- Remove one of the tenant's secrets; nothing when it has no such name.
DELETE FROM tenant_secrets WHERE tenant_id = %(tenant_id)s AND name = %(name)s
RETURNING name;

-- name: get_tenant_secret_sealed
-- The sealed value of one of a tenant's secrets, for a tool of that tenant's run (the worker).
SELECT sealed FROM tenant_secrets WHERE tenant_id = %(tenant_id)s AND name = %(name)s;

-- name: list_tenant_secrets_to_reseal
-- Every stored secret, locked for `tickwork secret rotate` (the owner's, across tenants).
SELECT tenant_id, name, sealed FROM tenant_secrets ORDER BY tenant_id, name FOR UPDATE;

-- name: update_tenant_secret_sealed
-- One secret's value sealed again under the first key; its dates stay.
UPDATE tenant_secrets SET sealed = %(sealed)s
 WHERE tenant_id = %(tenant_id)s AND name = %(name)s;
