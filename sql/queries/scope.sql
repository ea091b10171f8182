-- name: scope_to_tenant
-- Row-level security's key for this transaction only (migration 0031): the tenant it works for.
SELECT set_config('app.tenant_id', %(tenant_id)s::text, true);

-- name: scope_to_all_tenants
-- This transaction spans tenants by design (the tick, metrics, the tail's hub).
SELECT set_config('app.all_tenants', 'on', true);
