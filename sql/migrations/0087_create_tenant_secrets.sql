-- A tenant's secrets: API keys and passwords its tools need (ctx.secret(name) in a tool).
-- A value is stored sealed (Fernet, sql/sealed.py: encrypted and authenticated with a key
-- the database never sees, TICKWORK_SECRET_KEY), bound to its tenant and name, so a sealed
-- value copied to another row does not open. The API writes and lists names and dates, never
-- reads `sealed` back (column grants in sql/grants.sql); the worker reads it to hand a value
-- to a tool. Row-level security like every tenant's table (sql/grants.sql).
CREATE TABLE tenant_secrets (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text NOT NULL,
    sealed     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name),
    CONSTRAINT tenant_secrets_name_check CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_.-]{0,99}$')
);
ALTER TABLE tenant_secrets ENABLE ROW LEVEL SECURITY;
