-- Agents are definitions only: no model column (models are reached by alias through
-- configuration) and no schedule column (schedules point at agents).
CREATE TABLE agents (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name         text NOT NULL,
    instructions text NOT NULL DEFAULT '',
    tools        text[] NOT NULL DEFAULT '{}',
    auto_approve text[] NOT NULL DEFAULT '{}',
    status       text NOT NULL DEFAULT 'active',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT agents_tenant_name_key UNIQUE (tenant_id, name),
    CONSTRAINT agents_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT agents_instructions_length CHECK (char_length(instructions) <= 16384),
    CONSTRAINT agents_status_check CHECK (status IN ('active', 'paused', 'draft'))
);
CREATE INDEX agents_tenant_listing_idx ON agents (tenant_id, id DESC);
