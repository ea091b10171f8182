-- Row-level security on the tables that carry a tenant_id: a second wall behind the queries'
-- own tenant filters, so a query that forgets its filter still sees one tenant only.
--
-- The key is transaction-local (set_config(..., true), like SET LOCAL), so it also holds
-- behind a PgBouncer in transaction mode: app.tenant_id is the tenant a transaction works for,
-- and app.all_tenants = 'on' marks work that spans tenants by design (the HTTP tick, metrics,
-- the tail's hub). With neither set, a row is not visible.
--
-- ENABLE without FORCE: the owner (who only migrates) is not subject to it. The policies per
-- role live in sql/grants.sql, which knows which roles exist; a role without a policy sees no
-- row of these tables.
--
-- Not here: tenants, api_tokens and stream_tickets are found by a token's or ticket's hash
-- before the tenant is known; the journal, queue, saved states and tool results have no
-- tenant column and are reached only through a run the API found behind this wall (a per-row
-- lookup of the run would sit on the journal's hottest reads).
CREATE FUNCTION tenant_visible(row_tenant uuid) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(row_tenant = nullif(current_setting('app.tenant_id', true), '')::uuid, false)
        OR coalesce(current_setting('app.all_tenants', true), '') = 'on'
$$;

ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE schedules ENABLE ROW LEVEL SECURITY;
ALTER TABLE executions ENABLE ROW LEVEL SECURITY;
ALTER TABLE approvals ENABLE ROW LEVEL SECURITY;
ALTER TABLE skipped_fires ENABLE ROW LEVEL SECURITY;
