-- One row per agent run. agent_id and schedule_id carry no foreign key on purpose: a run's
-- history outlives its agent, and a run that finds its agent gone fails in-band with a reason.
CREATE TABLE executions (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    agent_id        uuid NOT NULL,
    schedule_id     uuid,
    trigger_type    varchar(8) NOT NULL,
    trigger_source  text NOT NULL,
    scheduled_for   timestamptz NOT NULL,
    fires           integer NOT NULL DEFAULT 1,
    status          text NOT NULL DEFAULT 'queued',
    outcome         text,
    breadcrumb      text,
    reason          text,
    attempt         integer NOT NULL DEFAULT 1,
    max_attempts    integer NOT NULL DEFAULT 3,
    retry_of        uuid,
    timeout_minutes integer NOT NULL DEFAULT 5,
    deadline        timestamptz,
    input           jsonb NOT NULL DEFAULT '{}',
    idempotency_key text,
    request_hash    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    CONSTRAINT executions_trigger_type_check CHECK (trigger_type IN ('chat', 'run', 'schedule')),
    CONSTRAINT executions_trigger_source_check CHECK (trigger_source IN ('cron', 'manual', 'api')),
    CONSTRAINT executions_status_check
        CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    CONSTRAINT executions_outcome_check CHECK (outcome IN
        ('done', 'question', 'stalled_out', 'hard_stop', 'timed_out', 'cancelled', 'failed')),
    CONSTRAINT executions_fires_positive CHECK (fires >= 1),
    CONSTRAINT executions_attempt_range CHECK (attempt BETWEEN 1 AND max_attempts),
    CONSTRAINT executions_timeout_range CHECK (timeout_minutes BETWEEN 1 AND 15)
);

-- The guarantee behind "one execution per cron fire": a second writer gets a conflict, not a
-- duplicate. Retries (retry_of set) and manual runs are outside it.
CREATE UNIQUE INDEX executions_one_per_fire_idx ON executions (schedule_id, scheduled_for)
    WHERE retry_of IS NULL AND trigger_source = 'cron';
-- A failed execution has at most one retry, however many sweepers race.
CREATE UNIQUE INDEX executions_one_retry_idx ON executions (retry_of) WHERE retry_of IS NOT NULL;
CREATE UNIQUE INDEX executions_idempotency_key_idx ON executions (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Hot paths stay small: the overlap check reads unfinished runs only, the sweep running ones.
CREATE INDEX executions_unfinished_idx ON executions (schedule_id)
    WHERE status IN ('queued', 'running');
CREATE INDEX executions_running_deadline_idx ON executions (deadline) WHERE status = 'running';
CREATE INDEX executions_tenant_listing_idx ON executions (tenant_id, id DESC);
