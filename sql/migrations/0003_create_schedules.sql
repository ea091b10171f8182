-- One schedule per (agent, cron). Deleting an agent deletes its schedules (ON DELETE CASCADE).
-- The due scan reads only the partial index on active rows, so its cost does not grow with
-- paused schedules or with schedules that are not due.
CREATE TABLE schedules (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent_id        uuid NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    cron            text NOT NULL,
    timeout_minutes integer NOT NULL DEFAULT 5,
    overlap         text NOT NULL DEFAULT 'skip',
    max_attempts    integer NOT NULL DEFAULT 3,
    display         jsonb,
    input           jsonb NOT NULL DEFAULT '{}',
    status          text NOT NULL DEFAULT 'active',
    next_run        timestamptz NOT NULL,
    last_run        timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_agent_cron_key UNIQUE (agent_id, cron),
    CONSTRAINT schedules_cron_length CHECK (char_length(cron) <= 200),
    CONSTRAINT schedules_timeout_range CHECK (timeout_minutes BETWEEN 1 AND 15),
    CONSTRAINT schedules_overlap_check CHECK (overlap IN ('skip', 'allow')),
    CONSTRAINT schedules_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 10),
    CONSTRAINT schedules_status_check CHECK (status IN ('active', 'paused'))
);
CREATE INDEX schedules_due_idx ON schedules (next_run) WHERE status = 'active';
CREATE INDEX schedules_tenant_listing_idx ON schedules (tenant_id, id DESC);
